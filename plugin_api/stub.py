"""A marker for contract calls a backend has not written yet (``anydev new-backend`` skeletons).

A method decorated with :func:`stub` raises :class:`NotSupportedError` naming the call, and the
conformance suite's contract group fails that call by name, so a vendor sees exactly what is left.
"""
from __future__ import annotations

import functools

from .errors import NotSupportedError

STUB_MARK = "__anydev_stub__"


def stub(method):
    """Replace ``method``'s body with one that raises ``NotSupportedError("<call> is not implemented
    yet ...")``, keeping its signature and docstring."""

    @functools.wraps(method)
    def not_written_yet(self, *args, **kwargs):
        raise NotSupportedError(f"{method.__name__} is not implemented yet: fill it in in runtime.py")

    setattr(not_written_yet, STUB_MARK, True)
    return not_written_yet


def is_stub(method) -> bool:
    """True for a method still marked with :func:`stub`."""
    return bool(getattr(method, STUB_MARK, False))
