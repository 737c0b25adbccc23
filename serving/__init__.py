"""``anydev serve``: an OpenAI-compatible HTTP server over the engine (FastAPI + uvicorn).

``create_app`` and ``AsyncEngine`` (the engine core's asyncio client) are imported on first use, so
that the rest of the command line (``anydev list-backends``, ``anydev serve --help``) works where the
serving libraries are not installed."""
from .limits import ServerLimits

__all__ = ["AsyncEngine", "ServerLimits", "create_app"]


def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "AsyncEngine":
        from .async_engine import AsyncEngine

        return AsyncEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
