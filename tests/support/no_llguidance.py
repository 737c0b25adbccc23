"""An environment for a subprocess in which ``import llguidance`` fails, as where it is not installed."""
from __future__ import annotations

import os
from pathlib import Path


def env_without_llguidance(directory: Path) -> dict:
    """``PYTHONPATH`` with ``directory`` first, holding an ``llguidance`` module that raises ImportError."""
    (directory / "llguidance.py").write_text('raise ImportError("llguidance is hidden for this test")\n')
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(directory), os.environ.get("PYTHONPATH")) if p)}
