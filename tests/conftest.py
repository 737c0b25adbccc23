"""Session hooks and fixtures shared by the tests."""
import sys
from pathlib import Path

import pytest

# The shared helpers (checkpoints, serve_support, ...) import as top-level modules from subfolders too.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_sessionfinish(session, exitstatus):
    import sys

    support = sys.modules.get("serve_support")     # only when a serving test ran
    if support is not None:
        support.FIGURES.write()


@pytest.fixture(autouse=True)
def executors_as_found():
    """The executor registry as each test found it: an executor a test (or a benchmark it runs in
    process) registers is gone after it."""
    from anydev.core.executors.registry import EXECUTORS

    before = dict(EXECUTORS)
    yield
    EXECUTORS.clear()
    EXECUTORS.update(before)


@pytest.fixture
def cpu_with_graphs(monkeypatch):
    """The cpu backend with its recording device graphs (what ANYDEV_CPU_GRAPHS=1 loads), for this test only."""
    from anydev.backends.cpu.runtime import CpuGraphRuntime
    from anydev.plugin_api import Backend
    from anydev.plugin_api.discovery import get_registry

    backend = Backend(CpuGraphRuntime())
    monkeypatch.setitem(get_registry()._loaded, "cpu", backend)
    yield backend
    backend.close()
