"""``anydev serve``: an OpenAI-compatible HTTP server over the engine (FastAPI + uvicorn)."""
from .app import create_app
from .limits import ServerLimits

__all__ = ["ServerLimits", "create_app"]
