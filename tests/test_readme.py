"""The README as a new user meets it on a machine without a GPU: every Python snippet runs as written
(the cpu backend; the openai client against ``anydev serve --device cpu``, on a free port instead of
8000) and ends without a traceback; and ``.venv/``, where a virtual environment is usually made for
``pip install -e``, is ignored by git."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from serve_support import Server

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.S | re.M)
DEFAULT_ADDRESS = "127.0.0.1:8000"


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_the_readme_has_its_snippets():
    assert len(SNIPPETS) >= 3 and sum(DEFAULT_ADDRESS in s for s in SNIPPETS) == 1


@pytest.mark.parametrize("code", [s for s in SNIPPETS if DEFAULT_ADDRESS not in s],
                         ids=lambda s: s.splitlines()[0][:40])
def test_a_python_snippet_runs_as_written_without_a_gpu(code, tmp_path):
    assert "nvidia\")" not in code and "/models/" not in code.split("#")[0]
    result = run_snippet(code, tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]


def test_the_openai_snippet_runs_against_the_server_and_takes_the_model_from_it(tmp_path):
    code = next(s for s in SNIPPETS if DEFAULT_ADDRESS in s)
    assert '"anydev-demo"' not in code and "models.list()" in code    # the model as the server names it
    server = Server("--max-model-len", "128", "--served-model-name", "not-the-demo-name")
    try:
        result = run_snippet(code.replace(DEFAULT_ADDRESS, f"127.0.0.1:{server.port}"), tmp_path)
    finally:
        server.stop()
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "completion_tokens=" in result.stdout           # the chat reply's usage was printed


def test_a_virtual_environment_in_the_checkout_is_ignored():
    ignored = [line.strip() for line in (README.parent / ".gitignore").read_text().splitlines()]
    assert ".venv/" in ignored or ".venv" in ignored
