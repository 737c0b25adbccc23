"""One request's state while the scheduler runs it: its tokens, its KV blocks, how far it is computed."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import numpy as np

from .logprobs import LogprobRows
from .sampling import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"      # not admitted yet, or preempted (its blocks given back, to be recomputed)
    RUNNING = "running"      # holds KV blocks; gets tokens scheduled at each step
    FINISHED = "finished"    # done, aborted or failed; holds nothing


@dataclass
class Sequence:
    """``num_cached`` tokens of ``tokens`` have their K/V in ``blocks``; a step feeds the next
    ``num_new`` of them (a prefill chunk, or the one newest token at decode)."""

    index: int                  # the request's id (its position in a generate call's prompt list)
    prompt: list[int]
    max_new_tokens: int         # already capped by the context length
    output: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    num_cached: int = 0         # tokens whose K/V are in the cache
    finish_reason: str | None = None   # "eos" | "length" | "stop" | "abort" | "closed" | "error"
    error: str | None = None           # why it failed (finish reason "error": its sampling failed)
    slots: np.ndarray | None = None    # KV slot of every position the blocks cover (set with the blocks)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    status: Status = Status.WAITING
    seq_id: int = -1            # unique in its engine (``index`` may repeat): its generator's key on the sampler
    eos_ids: frozenset[int] = frozenset()      # the model's EOS tokens (empty with ignore_eos)
    block_hashes: list[int] = field(default_factory=list)   # prefix-cache hash of each full block computed
    num_prefix_hit: int = 0     # prompt tokens found in the prefix cache at admission
    num_preemptions: int = 0
    #: 1 while the token sampled for this sequence by the step in flight is still on the device (it
    #: counts in ``num_tokens`` but not in ``output``); ``pending_row`` is its row in that step.
    num_pending: int = 0
    pending_row: int = -1
    arrival_time: float = field(default_factory=time.monotonic)
    #: Its output as text while it has stop strings to find (an ``anydev.core.output.OutputText``, set by the engine).
    text: object = None
    #: With ``sampling.logprobs``: each output token's packed row as read back (read :attr:`logprobs`).
    logprob_rows: LogprobRows = field(default_factory=lambda: LogprobRows(None), repr=False)
    #: With ``sampling.prompt_logprobs``: a TokenLogprobs for each prompt token after the first.
    prompt_logprobs: list = field(default_factory=list)

    @property
    def logprobs(self) -> list:
        """With ``sampling.logprobs``: each output token's :class:`~.logprobs.TokenLogprobs` (built when read)."""
        return self.logprob_rows.entries

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def num_tokens(self) -> int:
        """Tokens so far, a pending one (sampled, not read back yet) included."""
        return len(self.prompt) + len(self.output) + self.num_pending

    @property
    def num_known(self) -> int:
        """Tokens the host has: the prompt and the output read back."""
        return len(self.prompt) + len(self.output)

    @property
    def is_last_pending(self) -> bool:
        """Its pending token is its last one (it reaches ``max_new_tokens``): nothing left to feed."""
        return self.num_pending > 0 and len(self.output) + self.num_pending >= self.max_new_tokens

    @property
    def scores_prompt(self) -> bool:
        """It asks for its prompt's logprobs and has not had them."""
        return self.sampling.prompt_logprobs is not None and not self.prompt_logprobs

    @property
    def computes_prompt_whole(self) -> bool:
        """Its prompt is computed in one step from its first token (no prefix-cache hit, no chunks):
        every prompt position then has its logits (prompt logprobs), or the sampler sees the whole
        prompt in its first step (a repetition penalty's record of it)."""
        return self.scores_prompt or (self.sampling.repetition_penalty != 1.0 and not self.output)

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens ``start..end-1`` of prompt + output, without joining the two lists; a pending
        token (not read back yet) reads as 0 (the step takes it on the device)."""
        if end > self.num_known:
            return self.token_slice(start, self.num_known) + [0] * (end - max(start, self.num_known))
        n = len(self.prompt)
        if start >= n:
            return self.output[start - n:end - n]
        return self.prompt[start:end] + self.output[:max(0, end - n)]

    def token_at(self, i: int) -> int:
        """Token ``i`` of prompt + output (:meth:`token_slice` of one token, without building a list);
        a pending token reads as 0."""
        n = len(self.prompt)
        if i < n:
            return self.prompt[i]
        i -= n
        return self.output[i] if i < len(self.output) else 0

    def assign_blocks(self, blocks: list[int], block_size: int) -> None:
        """Give the sequence its KV blocks (``[]`` takes them back) and cache its slot list."""
        self.blocks = blocks
        table = np.asarray(blocks, dtype=np.int64)
        self.slots = (table[:, None] * block_size + np.arange(block_size)).ravel() if blocks else None

    def blocks_needed(self, block_size: int) -> int:
        """Blocks for the whole life of the sequence (prompt + every token it may generate)."""
        return -(-(len(self.prompt) + self.max_new_tokens) // block_size)
