"""A script that compiles Triton kernels for an H100/H200 (sm_90) on this CPU, run in a fresh Python
without Triton's interpreter (Triton's own compiler and the ptxas its wheel ships, no GPU)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest


def nvidia_backend_missing() -> str | None:
    """Why Triton cannot compile for NVIDIA here, or None when it can."""
    spec = importlib.util.find_spec("triton.backends.nvidia")
    if spec is None:
        return "this triton build has no NVIDIA backend"
    ptxas = os.path.join(os.path.dirname(spec.origin), "bin", "ptxas")
    return None if os.path.exists(ptxas) else f"this triton build ships no ptxas ({ptxas})"


def run_sm90_compile(script: str, *args: str) -> None:
    """Run ``script`` (with ``args``) uninterpreted; skip where Triton cannot compile for NVIDIA here.
    It must exit 0 having printed exactly ``ok``."""
    reason = nvidia_backend_missing()
    if reason:
        pytest.skip(reason)
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
