"""A script run under Triton's interpreter in a fresh Python (the interpreter is chosen when triton is
imported, so a test process that has imported it already cannot switch)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def run_interpreted(script: str, timeout: float = 300) -> None:
    """Run ``script`` with ``TRITON_INTERPRET=1``; it must exit 0 having printed exactly ``ok``."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
