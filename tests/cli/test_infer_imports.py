"""test_infer on a safetensors model imports neither transformers nor gguf (nor the yaml gguf brings):
what its start-up does not need stays off it (``python -X importtime`` lists every module it imports)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_NEEDED = ("transformers", "gguf", "yaml")


def test_test_infer_on_safetensors_imports_no_transformers_and_no_gguf(tmp_path):
    model = tmp_path / "tiny"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_random_model.py"), str(model), "--layers", "1",
                    "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--vocab", "384", "--dtype", "float32"],
                   check=True, capture_output=True, timeout=120)
    done = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "examples" / "test_infer.py"), "--device",
                           "cpu", "--model", str(model), "--max-new-tokens", "2", "--prompt", "Hello"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    imported = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*([\w.]+)$", done.stderr, re.M)}
    assert "torch" in imported and "tokenizers" in imported   # the listing is read right
    assert imported.isdisjoint(NOT_NEEDED), sorted(imported & set(NOT_NEEDED))
