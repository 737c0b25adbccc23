"""Stop strings found in a text that grows by pieces, looking only at each new piece and the few
characters before it in which a stop string may have begun."""
from __future__ import annotations


class StopFinder:
    """The first of ``stops`` (non-empty strings) in the text given piece by piece to :meth:`add`."""

    def __init__(self, stops: list[str]):
        self.stops = list(stops)
        #: Characters at the end of the text a stop string may still grow from: a reader hands out
        #: everything but these until the text ends.
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self._tail = ""

    def add(self, piece: str) -> int | None:
        """Take the next ``piece``; None when no stop string ends in it, else where the text ends:
        how many of ``piece``'s characters stay (negative: the stop string began that many
        characters before the piece)."""
        window = self._tail + piece
        found = [at for at in (window.find(s) for s in self.stops) if at >= 0]
        if found:
            return min(found) - len(self._tail)
        self._tail = window[-self.hold:] if self.hold else ""
        return None
