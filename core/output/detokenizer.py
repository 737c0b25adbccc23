"""Token ids to text as they arrive, with the same work for every token however long the text grows.

The offsets method (as vLLM's front end does it): the new text of a token is
``decode(ids[prefix:])`` past ``decode(ids[prefix:read])``, a window of a few tokens, so the
tokenizer's own decoder (byte-level BPE, sentencepiece's "▁" spaces and byte fallback, skipped
special tokens) settles every case a whole-text decode settles. While the window's text ends in
U+FFFD (a character whose bytes are split across tokens) the part before it is handed out and the
rest waits for the next token; :meth:`IncrementalDetokenizer.finish` hands out what still waits.

``tokenizers``' ``DecodeStream`` does the same in Rust but cannot flush a character left incomplete
at the end, and holds a byte run that never completes a character for ever (its window then grows
with the text); here the window moves on after :data:`MAX_HELD` tokens whatever their text.

A tokenizer that says which ids its decode drops wherever they stand (``drops(id, skip_special_tokens)``:
ids its vocabulary lacks, skipped special tokens) spares the decodes of windows that hold only such
ids: their text is "". (A random-weight model over a small tokenizer samples mostly such ids, and
each of them would otherwise cost the walk back of :meth:`IncrementalDetokenizer._move_window`.)
"""
from __future__ import annotations

#: Tokens held back at most while their text ends in an incomplete character (a UTF-8 character has
#: at most 4 bytes; byte-fallback tokens carry one each): past it the window moves on regardless.
MAX_HELD = 8

_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """One request's output tokens to text. ``tokenizer``: anything with
    ``decode(ids, skip_special_tokens=...)`` (:class:`~anydev.core.loading.tokenizer.Tokenizer` or a
    ``tokenizers.Tokenizer``). The concatenation of everything :meth:`add` and :meth:`finish` return
    equals ``tokenizer.decode(all ids)`` whenever the output's bytes are UTF-8 (a byte run that is
    not may read differently: a byte-fallback decoder turns every byte of such a run, the valid ones
    before it included, into U+FFFD, which a decoder that hands text out early cannot know)."""

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self._decode = tokenizer.decode
        self._drops = getattr(tokenizer, "drops", None)
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []     # the window's tokens and a few before it (not the whole output)
        self._kept = [0]         # _kept[i] - _kept[j]: how many of ids[j:i] decode keeps
        self._prefix = self._read = 0
        self._base_len = 0       # len(decode(ids[prefix:read])): text already handed out before the window's new part
        self._sent = 0           # characters of the window's new part handed out while it was held
        self._starts = [0]       # token indices where a character begins (earlier window starts)

    def _text(self, start: int, end: int | None = None) -> str:
        if self._kept[len(self.ids) if end is None else end] == self._kept[start]:
            return ""            # nothing but ids that decode drops
        return self._decode(self.ids[start:end], skip_special_tokens=self.skip_special_tokens)

    def add(self, token_id: int) -> str:
        """Take one token; returns the text it settles (often its own, "" while a character waits)."""
        self.ids.append(token_id)
        dropped = self._drops is not None and self._drops(token_id, self.skip_special_tokens)
        self._kept.append(self._kept[-1] + (not dropped))
        text = self._text(self._prefix)
        held = len(self.ids) - self._read
        if text.endswith(_REPLACEMENT) and held < MAX_HELD:
            settled = text.rstrip(_REPLACEMENT)
            new = settled[self._base_len + self._sent:]
            self._sent += len(new)
            return new
        new = text[self._base_len + self._sent:]
        self._move_window()
        return new

    def finish(self) -> str:
        """The text that still waits (a character left incomplete reads as U+FFFD, as a whole decode gives it)."""
        if len(self.ids) == self._read:
            return ""
        new = self._text(self._prefix)[self._base_len + self._sent:]
        self._move_window()
        return new

    def _move_window(self) -> None:
        """Everything up to the last token is handed out: the window restarts at the tokens just read."""
        self._starts.append(self._read)
        self._prefix, self._read, self._sent = self._read, len(self.ids), 0
        base = self._text(self._prefix, self._read)
        # A window whose first tokens read as nothing (skipped special tokens, a space a sentencepiece
        # decoder strips at the start of a text) starts at an earlier character boundary: the
        # decoder's start-of-text rules then apply to text both decodes share, not to the new part.
        # The walk back is bounded (MAX_HELD windows) so that a long run of tokens that read as nothing
        # (ids a vocabulary lacks, skipped special tokens) costs each token the same: past it, a
        # sentencepiece space after such a run reads as at the start of a text.
        back = len(self._starts) - 1
        oldest = max(0, back - MAX_HELD)
        while not base and back > oldest:
            back -= 1
            self._prefix = self._starts[back]
            base = self._text(self._prefix, self._read)
        self._base_len = len(base)
        if len(self._starts) > 2 * MAX_HELD:      # the lists stay short: drop what no window reads again
            drop = self._starts[MAX_HELD]
            if drop <= self._prefix:
                del self.ids[:drop]
                del self._kept[:drop]
                self._starts = [start - drop for start in self._starts[MAX_HELD:]]
                self._prefix -= drop
                self._read -= drop
