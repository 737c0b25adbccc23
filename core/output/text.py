"""A request's output text as its tokens arrive: incremental decoding, stop strings, and the settled
text handed out in pieces (what a stream sends)."""
from __future__ import annotations

from .detokenizer import IncrementalDetokenizer
from .stops import StopFinder


class OutputText:
    """The text of one request's output tokens, given to :meth:`add` one at a time, cut before the
    first of ``stop``. :meth:`take` hands out the settled text not handed out yet: never half of a
    character, nor the last characters a stop string may still begin in. With no ``tokenizer``
    (a model without one) the text stays "" and no stop string is ever found."""

    def __init__(self, tokenizer, stop: list[str] = (), skip_special_tokens: bool = True):
        self._decoder = IncrementalDetokenizer(tokenizer, skip_special_tokens) if tokenizer is not None else None
        self._stops = StopFinder(stop) if stop else None
        self._hold = self._stops.hold if self._stops else 0
        self._given: list[str] = []     # handed out by take
        self._waiting: list[str] = []   # settled, not handed out yet
        self._num_waiting = 0           # characters in _waiting
        self.stopped = False            # a stop string was found: the text is final
        self.finished = False           # the request ended: the text is final
        #: Tokens taken by :meth:`add` until the text became final (the stop string's last token included).
        self.num_tokens = 0

    def add(self, token_id: int) -> bool:
        """Take the request's next token; True when a stop string is complete with it (the text then
        ends before the stop string, and later tokens are ignored)."""
        if self.stopped or self.finished:
            return False
        self.num_tokens += 1
        if self._decoder is not None:
            self._append(self._decoder.add(token_id))
        return self.stopped

    def finish(self) -> None:
        """The request ended: the text still held (an incomplete character, a possible stop string's start) settles."""
        if not (self.stopped or self.finished) and self._decoder is not None:
            self._append(self._decoder.finish())
        self.finished = True

    def _append(self, piece: str) -> None:
        if not piece:
            return
        cut = self._stops.add(piece) if self._stops else None
        if cut is None:
            self._waiting.append(piece)
            self._num_waiting += len(piece)
            return
        self.stopped = True
        if cut >= 0:
            self._waiting.append(piece[:cut])
            self._num_waiting += cut
            return
        # the stop string began in earlier text, which take() held back (it is within the last `hold` characters)
        waiting = "".join(self._waiting)[:self._num_waiting + cut]
        self._waiting, self._num_waiting = [waiting], len(waiting)

    def take(self) -> str:
        """The settled text not handed out yet (everything, once :attr:`stopped` or :attr:`finished`)."""
        keep = 0 if (self.stopped or self.finished) else self._hold
        if self._num_waiting <= keep:
            return ""
        waiting = "".join(self._waiting)
        out, rest = waiting[:len(waiting) - keep], waiting[len(waiting) - keep:]
        self._waiting, self._num_waiting = ([rest] if rest else []), len(rest)
        self._given.append(out)
        return out

    @property
    def text(self) -> str:
        """All the text so far, handed out or not (cut before the stop string once one is found)."""
        return "".join(self._given) + "".join(self._waiting)
