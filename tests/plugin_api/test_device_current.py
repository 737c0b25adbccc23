"""Only ``Device.set_current()`` changes the calling thread's current device: the factories and
queries of another device leave it as it was."""
from __future__ import annotations

import pytest

from anydev.plugin_api import load_backend


@pytest.mark.parametrize("call", ["memory_info", "alloc", "alloc_host", "create_stream", "create_event", "synchronize"])
def test_a_call_on_another_device_keeps_the_current_one(call):
    backend = load_backend("cpu")
    current, other = backend.device(1), backend.device(0)
    current.set_current()
    args = (64,) if call.startswith("alloc") else ()
    made = getattr(other, call)(*args)
    try:
        assert backend.current_device() is current
    finally:
        if hasattr(made, "close"):
            made.close()


def test_set_current_changes_it():
    backend = load_backend("cpu")
    backend.device(1).set_current()
    backend.device(2).set_current()
    assert backend.current_device() is backend.device(2)
