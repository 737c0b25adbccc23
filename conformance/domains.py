"""Property-based checks over an argument's domain: hypothesis, with a fixed seed and a bounded
example count, so the suite is deterministic and its cost known.

hypothesis is what the suite needs beyond pytest (as pytest-xdist is): it comes with
``pip install "anydev[conformance]"`` (and ``anydev[test]``), not with anydev itself, which serves
models without it. Without it the domain checks fail at import, saying what to install, rather than
skipping: a suite that silently dropped them would certify less than it says.
"""
from __future__ import annotations

try:
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised only where hypothesis is missing
    raise ImportError(
        "the conformance suite's domain checks (test_*_domains.py) need hypothesis: "
        'pip install "anydev[conformance]" (or pip install hypothesis)'
    ) from exc

__all__ = ["bounded", "example", "given", "st"]


def bounded(max_examples: int):
    """hypothesis settings of a domain check: ``max_examples`` examples from a fixed seed
    (``derandomize``), no deadline (a device's first call may compile or allocate), the suite's
    fixtures (a device, a stream) shared by the examples of one check, and no shrinking: the first
    failing example is reported as found (shrinking one costs minutes on a slow device)."""
    return settings(max_examples=max_examples, derandomize=True, deadline=None, database=None,
                    phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
