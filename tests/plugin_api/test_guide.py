"""docs/writing-a-backend.md states what a vendor needs and the code it states it about agrees: the
error classes with their constructors, what the failing-rank check looks for, the suite's memory sizes."""
import inspect
from pathlib import Path

import pytest

import anydev
from anydev import plugin_api
from anydev.conformance import engine_support, test_memory, test_parallel_init

GUIDE = Path(anydev.__file__).parent / "docs" / "writing-a-backend.md"
BACKEND_ERRORS = ("BackendUnavailableError", "RuntimeCallError", "OutOfMemoryError", "InvalidArgumentError",
                  "NotSupportedError", "CollectiveTimeoutError", "ClosedError")


@pytest.fixture(scope="module")
def guide() -> str:
    return GUIDE.read_text()


def constructor(name: str) -> str:
    """``RuntimeCallError(backend, call, code, name, message)``, from the class itself."""
    cls = getattr(plugin_api, name)
    own = next((c.__init__ for c in cls.__mro__ if "__init__" in vars(c) and c.__module__ == plugin_api.errors.__name__), None)
    if own is None:  # the builtin exception constructor: one message
        return f"{name}(message)"
    parameters = list(inspect.signature(own).parameters.values())[1:]
    return f"{name}(" + ", ".join(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
                                  for p in parameters) + ")"


@pytest.mark.parametrize("name", BACKEND_ERRORS)
def test_every_error_a_backend_raises_is_documented_with_its_constructor(guide, name):
    assert f"`{constructor(name)}`" in guide, f"the guide does not show {constructor(name)}"


def test_the_guide_says_destroys_end_their_threads_and_what_the_check_looks_for(guide):
    source = inspect.getsource(test_parallel_init.test_failing_rank_raises_and_leaves_nothing_behind)
    assert "threading.enumerate()" in source and "threads still running after the failed init" in source
    assert "test_failing_rank_raises_and_leaves_nothing_behind" in guide
    assert "threads still running after the failed init" in guide
    assert "**Destroys end their threads and give back their memory before they return.**" in guide
    assert f"more than {test_parallel_init.LEAK_TOLERANCE >> 20} MiB" in guide


def test_the_guide_states_the_memory_sizes_the_suite_uses(guide):
    assert "**Memory the suite needs.**" in guide
    low, high = engine_support.KV_TARGET_MIN >> 20, engine_support.KV_TARGET_MAX >> 30
    assert f"clamped to {low} MiB ..\n1 GiB" in guide or f"clamped to {low} MiB .. {high} GiB" in guide.replace("\n", " ")
    assert f"one\nof {test_memory.LARGE >> 20} MiB" in guide or f"of {test_memory.LARGE >> 20} MiB" in guide.replace("\n", " ")
