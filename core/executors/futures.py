"""Futures that are resolved already: with a value, or with an error."""
from __future__ import annotations

from concurrent.futures import Future


def done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


def failed(error: BaseException) -> Future:
    future = Future()
    future.set_exception(error)
    return future
