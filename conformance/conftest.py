"""Instantiates every check once per selected backend (like PyTorch's device-generic tests).

A check takes the ``backend`` fixture. For a backend that cannot be used here the fixture skips with
the :class:`BackendUnavailableError` text; for a broken plugin it fails with the cause. Either way the
check never passes without having run on the backend.

Test modules import helpers absolutely (``anydev.conformance.support``): pytest may import this
folder under another package name.
"""
from __future__ import annotations

import pytest

from anydev.conformance import crashes
from anydev.conformance import emulated_runtime  # noqa: F401  (registers the emulated runtime: a library built
#                                                  from conformance/emulated/ loads as one, whatever its prefix)
from anydev.conformance.report import (
    BACKEND_KEY, BEHAVIOUR, CONTRACT_SHAPE, GROUP_KEY, HARDWARE_KEY, KIND_KEY, PERFORMANCE, RANKS_KEY,
)
from anydev.conformance.long_work import LongWork
from anydev.conformance.support import guarded, load_outcome, rank_counts, selected_backends
from anydev.plugin_api import Backend, BackendUnavailableError, is_stub


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session) -> None:
    """Check ``--device`` once, before any module is collected: an unknown name is a usage error."""
    selected_backends(session.config)


def pytest_generate_tests(metafunc) -> None:
    if "nranks" in metafunc.fixturenames:  # 1, 2, 3 and N ranks per backend (N: --tp, else its device count)
        pairs = [(name, n) for name in selected_backends(metafunc.config) for n in rank_counts(metafunc.config, name)]
        metafunc.parametrize(("backend_name", "nranks"), pairs, ids=[f"{name}-{n}ranks" for name, n in pairs],
                             scope="session")
    elif "backend_name" in metafunc.fixturenames:
        metafunc.parametrize("backend_name", selected_backends(metafunc.config), scope="session")


def pytest_collection_modifyitems(items) -> None:
    """Tag each check with its backend, group and kind, for the report (also read under xdist)."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "backend_name" in params:
            group = crashes.group_of(item.nodeid)
            kind = (CONTRACT_SHAPE if item.get_closest_marker("contract_shape")
                    else PERFORMANCE if item.get_closest_marker("performance") else BEHAVIOUR)
            item.user_properties += [(BACKEND_KEY, params["backend_name"]), (GROUP_KEY, group), (KIND_KEY, kind)]
            if "nranks" in params:
                item.user_properties.append((RANKS_KEY, params["nranks"]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A check that hangs past ``crashes.CHECK_TIMEOUT_S`` ends its xdist worker, as a crash would."""
    with crashes.watchdog():
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """Skip the rest of a check group whose process a check of the same backend crashed."""
    props = dict(item.user_properties)
    crash = crashes.crash_of(props.get(BACKEND_KEY, ""), props.get(GROUP_KEY, ""))
    if crash is not None:
        pytest.skip(f"not run: {crash.check.rsplit('::', 1)[-1]} crashed this group's process ({crash.describe()})")


@pytest.fixture
def backend(request, backend_name) -> Backend:
    """The backend under test, loaded once per process; skips or fails when it cannot be loaded."""
    outcome = load_outcome(backend_name)
    where = request.node.user_properties
    if isinstance(outcome, BackendUnavailableError):
        where.append((HARDWARE_KEY, "unavailable"))
        pytest.skip(str(outcome))
    if isinstance(outcome, BaseException):
        where.append((HARDWARE_KEY, "broken plugin"))
        pytest.fail(f"backend '{backend_name}' cannot be loaded: {type(outcome).__name__}: {outcome}", pytrace=False)
    where.append((HARDWARE_KEY, outcome.runtime.hardware_label))
    if is_stub(type(outcome.runtime).device_count):
        return outcome  # a skeleton: each check fails naming the stub it reaches (contract: each call)
    if outcome.device_count() == 0:
        pytest.skip(f"backend '{backend_name}' is loaded but reports 0 devices")
    return outcome


@pytest.fixture
def device(backend):
    """Device 0 of the backend under test, current on the test's thread."""
    dev = backend.device(0)
    dev.set_current()
    return dev


@pytest.fixture
def stream(device):
    """A fresh stream on device 0, synchronised and closed after the check."""
    s = device.create_stream()
    yield s
    if not s.closed:
        guarded(lambda: (s.synchronize(), s.close()), "closing the check's stream")


@pytest.fixture
def long_work(device, stream):
    """A :class:`~anydev.conformance.long_work.LongWork` on device 0, calibrated on ``stream``."""
    work = LongWork(device, stream)
    yield work
    guarded(work.free, "freeing the long-work buffer")
