"""Helpers the checks share: loading a backend or explaining why not, rank counts, the torch bridge,
and running one function per rank on its own thread."""
from __future__ import annotations

import os
import queue
import threading
import time
from typing import Callable

import pytest

from anydev.plugin_api import Backend, BackendUnavailableError, NotSupportedError, get_registry
from anydev.plugin_api.discovery import default_backend_name

from anydev.conformance.report import RANKS_KEY

#: A collective, an engine init or a fixture teardown that has not finished after this long is
#: reported as hung (seconds; ``$ANYDEV_CONFORMANCE_HANG_TIMEOUT`` overrides it).
HANG_TIMEOUT_S = float(os.environ.get("ANYDEV_CONFORMANCE_HANG_TIMEOUT") or 120.0)

_outcomes: dict[str, object] = {}
_outcomes_lock = threading.Lock()


def requested_names(config) -> list[str]:
    """The names ``--device`` gives, once each, in order ("all" included); default: the backend a
    program uses when given none (``$ANYDEV_DEVICE``, else cpu)."""
    requested = config.getoption("anydev_device") or [default_backend_name()]
    return list(dict.fromkeys(n.strip() for item in requested for n in item.split(",") if n.strip()))


def selected_backends(config) -> list[str]:
    """The backend names from ``--device`` (``all``: every registered one, broken ones included)."""
    names = requested_names(config)
    known = get_registry().names()
    if "all" in names:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise pytest.UsageError(
            f"--device: unknown backend(s) {', '.join(unknown)}; known: {', '.join(known)}"
            " (run `anydev list-backends`)"
        )
    return names


def rank_counts(config, name: str) -> list[int]:
    """The rank counts of backend ``name``'s collective checks: 1, 2, 3 and N, as far as N, from
    :func:`rank_limit` (a fault that appears only beyond 2 ranks, such as ranks placed wrongly from
    the third on, shows at 3; one that appears only at the full count, at N)."""
    top = rank_limit(config, name)
    return sorted({n for n in (1, 2, 3, top) if n <= top})


def rank_limit(config, name: str) -> int:
    """The largest rank count of ``name``'s checks: ``--tp``, else its device count (the most ranks
    it has); 1 when it cannot count its devices (unavailable, broken, or a skeleton whose
    ``device_count`` is a stub: its checks skip or fail on that anyway)."""
    tp = config.getoption("anydev_tp")
    if tp:
        return tp
    outcome = load_outcome(name)
    if not isinstance(outcome, Backend):
        return 1
    try:
        count = outcome.device_count()
    except Exception:  # the checks themselves report it (the contract group calls device_count)
        return 1
    return max(1, count)


def load_outcome(name: str):
    """The loaded backend ``name``, or the exception loading it raised (remembered per process)."""
    with _outcomes_lock:
        outcome = _outcomes.get(name)
        if outcome is None or (isinstance(outcome, Backend) and outcome.closed):
            try:
                outcome = get_registry().load(name)
            except Exception as exc:  # kept and reported by every check of this backend
                outcome = exc
            _outcomes[name] = outcome
        return outcome


def max_ranks(backend: Backend, request) -> int:
    """``--tp`` if given, else the device count (:func:`rank_limit`); the check of ``request`` is
    reported as run at that many ranks."""
    n = request.config.getoption("anydev_tp") or backend.device_count()
    record_ranks(request, n)
    return n


def largest_ranks_dividing(backend: Backend, request, count: int) -> int:
    """The most ranks, up to ``--tp`` (else the device count), that divide ``count`` (the demo model's
    attention heads), recorded for the check of ``request`` like :func:`max_ranks`."""
    top = request.config.getoption("anydev_tp") or backend.device_count()
    n = next((k for k in range(top, 0, -1) if count % k == 0), 1)
    record_ranks(request, n)
    return n


def record_ranks(request, n: int) -> None:
    """Report the check of ``request`` as run at ``n`` ranks (checks parametrized by ``nranks`` are
    recorded when collected)."""
    request.node.user_properties.append((RANKS_KEY, n))


def require_devices(backend: Backend, n: int) -> None:
    """Skip unless the backend has at least ``n`` devices."""
    count = backend.device_count()
    if n > count:
        pytest.skip(f"needs {n} devices; backend '{backend.name}' has {count}")


def require_torch_bridge(backend: Backend) -> None:
    """Skip unless torch can use this backend's memory: its torch device type exists in this torch.

    An emulated MUSA runtime has no torch_musa; an emulated MACA runtime's device type is ``cuda`` but
    this torch has no CUDA. When torch does have the device type, an error from the plugin's
    ``torch_device`` is a failure (e.g. a stub still to fill in), not a skip.
    """
    import torch

    try:
        device_type = torch.device(backend.device(0).torch_device).type
    except (BackendUnavailableError, NotSupportedError) as exc:
        if torch_has_device_type(backend.torch_device_type):
            raise
        pytest.skip(f"the torch bridge is unavailable: {exc}")
    if not torch_has_device_type(device_type):
        hint = " (needs torch_musa)" if device_type == "musa" else ""
        pytest.skip(
            f"the torch bridge needs torch device '{device_type}', which this torch build "
            f"({torch.__version__}) does not have{hint}"
        )


def torch_has_device_type(device_type: str) -> bool:
    """True when this torch can place tensors on ``device_type`` here (``cuda`` needs a GPU)."""
    import torch

    if device_type == "cpu":
        return True
    module = getattr(torch, device_type, None)
    return module is not None and callable(getattr(module, "is_available", None)) and bool(module.is_available())


def guarded(fn: Callable[[], object], what: str, timeout: float | None = None):
    """``fn()`` on a daemon thread, failing the check (or its teardown) instead of hanging when it has
    not returned after ``timeout`` seconds (default :data:`HANG_TIMEOUT_S`): a fixture teardown after
    a hung collective (``comm_destroy``, a stream's synchronize) must not hang the session, so that
    the session ends and writes its report."""
    return run_ranks(1, lambda _: fn(), what, HANG_TIMEOUT_S if timeout is None else timeout)[0]


def run_ranks(n: int, fn: Callable[[int], object], what: str, timeout: float | None = None) -> list:
    """Run ``fn(rank)`` for ranks 0..n-1, one daemon thread each; return their results in rank order.

    Raises the first failing rank's exception (noting the rank); fails the check instead of hanging
    the session when a rank has not returned after ``timeout`` seconds (its thread is then left
    behind, as a daemon, so that it cannot block the interpreter's exit).
    """
    timeout = HANG_TIMEOUT_S if timeout is None else timeout
    results: list = [None] * n
    errors: dict[int, BaseException] = {}
    finished: queue.Queue[int] = queue.Queue()

    def body(rank: int) -> None:
        try:
            results[rank] = fn(rank)
        except BaseException as exc:  # handed to the caller below
            errors[rank] = exc
        finally:
            finished.put(rank)

    threads = [threading.Thread(target=body, args=(r,), name=f"conformance-rank-{r}", daemon=True) for r in range(n)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    returned: list[int] = []
    while len(returned) < n and not errors:  # after a failure, the others may wait on it forever
        try:
            returned.append(finished.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            hung = sorted(set(range(n)) - set(returned))
            pytest.fail(f"{what}: rank(s) {hung} did not finish within {timeout:.0f} s (hang?)", pytrace=False)
    for rank in returned:  # finished: joining returns at once, and no thread of ours lingers
        threads[rank].join()
    if errors:
        rank = min(errors)
        exc = errors[rank]
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(f"(raised by rank {rank} of {n} in: {what})")
        raise exc
    return results
