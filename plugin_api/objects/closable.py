"""Closable: ``close()`` once releases, later calls do nothing, any other use after close raises."""
from __future__ import annotations

from ..errors import ClosedError


class Closable:
    """``close()`` once releases; later calls do nothing; ``_check_open`` guards every other use."""

    _closed = False
    _what = "object"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    def _release(self) -> None:  # pragma: no cover - overridden
        pass

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(self._what)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
