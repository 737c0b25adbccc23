"""Log-probabilities computed on the device by the sampling rank, packed small: of the sampled tokens
and, for requests that score their prompt, of every prompt token after the first.

Only what an answer needs comes back to the host: per scored position, the log-probability of its
token (the sampled one, or the prompt's next token) and its ``k`` likeliest tokens with theirs (``k``
the most any row of the step asks), as one float32 row ``[chosen, top values (k), top ids (k)]``
(ids below 2**24 are exact in float32). A step's rows are packed row by row in the step's order: a
row's prompt positions first, then its sampled token (:func:`step_layout`), so the packed rows of
pipeline micro-batches, joined, are the whole step's. The log-softmax is of the model's logits as
they are (before temperature, top-k and top-p), as vLLM's and OpenAI's logprobs are.

On the host the step loop builds nothing per token: each sequence keeps its rows, views of the step's
read-back block (:class:`LogprobRows`), and its :class:`TokenLogprobs` are built, by blocks, when read.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .token_logprobs import MAX_LOGPROBS, TokenLogprobs  # noqa: F401  (the engine's names for them)


@dataclass(frozen=True)
class StepLayout:
    """Which of a step's positions are scored: ``prompt[i] = (row, first token index in the step,
    count)`` for a row that scores its prompt (its positions but the last: the last one's token is
    the sampled one), ``output`` the rows whose sampled token is; ``order`` puts the packed prompt rows
    (0..P-1) and output rows (P..) into the step's order; ``k`` the width of the top lists."""

    prompt: tuple[tuple[int, int, int], ...]
    output: tuple[int, ...]
    order: tuple[int, ...]
    k: int

    @property
    def empty(self) -> bool:
        return not self.prompt and not self.output

    @property
    def scores_prompt(self) -> bool:
        return bool(self.prompt)

    @property
    def num_rows(self) -> int:
        """The step's packed rows: its scored prompt positions and its sampled tokens that ask."""
        return sum(count for _, _, count in self.prompt) + len(self.output)


def step_layout(params: list, starts: list[int]) -> StepLayout:
    """The layout of a step whose row i has sampling ``params[i]`` (None: it needs no token) and
    feeds tokens ``starts[i]..starts[i + 1] - 1`` of the step."""
    asking = [(i, p) for i, p in enumerate(params) if p is not None and (p.logprobs is not None or
                                                                         p.prompt_logprobs is not None)]
    if not asking:
        return NO_LOGPROBS
    if all(p.prompt_logprobs is None for _, p in asking):   # decode steps: one comprehension, no per-row Python
        output = tuple(i for i, _ in asking)
        return StepLayout((), output, tuple(range(len(output))), max(p.logprobs for _, p in asking))
    prompt, output, order, k = [], [], [], 0
    num_prompt = sum(starts[i + 1] - starts[i] - 1 for i, p in asking if p.prompt_logprobs is not None)
    seen_prompt = 0
    for i, p in asking:
        if p.prompt_logprobs is not None and starts[i + 1] - starts[i] > 1:
            count = starts[i + 1] - starts[i] - 1
            prompt.append((i, starts[i], count))
            order += range(seen_prompt, seen_prompt + count)
            seen_prompt += count
            k = max(k, p.prompt_logprobs)
        if p.logprobs is not None:
            order.append(num_prompt + len(output))
            output.append(i)
            k = max(k, p.logprobs)
    return StepLayout(tuple(prompt), tuple(output), tuple(order), k)


#: The layout of a step in which no row asks for logprobs.
NO_LOGPROBS = StepLayout((), (), (), 0)


def pack_logprobs(kernels, logits: torch.Tensor, index: torch.Tensor | None, targets: torch.Tensor, k: int,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``[len(index), 1 + 2k]`` float32 on the device (written into ``out`` when given): for the logits
    rows ``index`` (None: every row), the log-probability of ``targets`` (a failed row's negative token
    code reads token 0), then the top ``k`` log-probabilities and their ids, by the kernel set
    ``kernels``' ``logprobs`` (contract 1.10: one launch in the shared Triton set)."""
    rows = logits if index is None else logits.index_select(0, index)
    if out is None:
        out = torch.empty((rows.shape[0], 1 + 2 * k), dtype=torch.float32, device=rows.device)
    return kernels.logprobs(rows, targets, k, out)


def pack_step(kernels, layout: StepLayout, logits: torch.Tensor, tokens: torch.Tensor,
              token_logits: torch.Tensor | None, input_ids: list[int], out: torch.Tensor | None = None) -> torch.Tensor:
    """The step's packed rows (see the module) by the kernel set ``kernels``, written into ``out``
    ([layout.num_rows, 1 + 2k]) when given: ``logits`` [rows, vocab] and ``tokens`` [rows] the sampled
    ones, ``token_logits`` [step tokens, vocab] (needed when some row scores its prompt) and
    ``input_ids`` the step's token ids (on the host: the prompts' next tokens are the targets)."""
    device = logits.device
    if not layout.prompt:        # decode steps: the sampled rows' alone, straight into ``out``
        if layout.output == tuple(range(logits.shape[0])):      # every row asks: no index to copy to the device
            return pack_logprobs(kernels, logits, None, tokens, layout.k, out)
        rows = _on_device(layout.output, device)
        return pack_logprobs(kernels, logits, rows, tokens.index_select(0, rows), layout.k, out)
    positions = [start + j for _, start, count in layout.prompt for j in range(count)]
    targets = _on_device([input_ids[p + 1] for p in positions], device)
    positions = _on_device(positions, device)
    if not layout.output:
        return pack_logprobs(kernels, token_logits, positions, targets, layout.k, out)
    rows = _on_device(layout.output, device)
    parts = (pack_logprobs(kernels, token_logits, positions, targets, layout.k),
             pack_logprobs(kernels, logits, rows, tokens.index_select(0, rows), layout.k))
    return torch.index_select(torch.cat(parts), 0, _on_device(layout.order, device), out=out)


def _on_device(values: tuple | list, device: torch.device) -> torch.Tensor:
    """``values`` as int64 on ``device``, the host not waiting for the device: torch's blocking copy
    from host memory (``torch.tensor(values, device=...)``) synchronizes the stream, which would stall
    the step loop's overlap. On CUDA the values go through pinned memory (torch's host caching
    allocator keeps the block until the copy has run)."""
    return torch.tensor(values, dtype=torch.int64, pin_memory=device.type == "cuda").to(device, non_blocking=True)


def unpack_logprobs(packed, k: int | None = None) -> list[TokenLogprobs]:
    """The host side of :func:`pack_step`: one :class:`TokenLogprobs` per packed row (a 2-d array,
    or a list of 1-d rows of any widths), each top list cut to its first ``k`` (None: all)."""
    if isinstance(packed, np.ndarray):
        return _unpack_block(packed, k)
    if len(packed) < 8:          # a streamed request's step or two: numpy's per-call cost would dominate
        return [_unpack_row(row.tolist(), k) for row in packed]
    widths = [row.shape[0] for row in packed]
    out, start = [], 0
    for end in range(1, len(packed) + 1):        # runs of rows of one width, each unpacked as one block
        if end == len(packed) or widths[end] != widths[start]:
            out += _unpack_block(np.stack(packed[start:end]), k)
            start = end
    return out


def _unpack_row(row: list[float], k: int | None) -> TokenLogprobs:
    width = (len(row) - 1) // 2
    take = width if k is None else min(k, width)
    return TokenLogprobs(row[0], tuple(zip(map(int, row[1 + width:1 + width + take]), row[1:1 + take])))


def _unpack_block(block: np.ndarray, k: int | None) -> list[TokenLogprobs]:
    width = (block.shape[1] - 1) // 2
    take = width if k is None else min(k, width)
    chosen = block[:, 0].tolist()
    values = block[:, 1:1 + take].tolist()
    ids = block[:, 1 + width:1 + width + take].astype(np.int64).tolist()
    return [TokenLogprobs(c, tuple(zip(i, v))) for c, v, i in zip(chosen, values, ids)]


class LogprobRows:
    """A sequence's output logprobs as they arrive: each token's packed row (a view of its step's
    read-back block) is kept as it is, and :class:`TokenLogprobs` are built only when read, once,
    so the step loop does no per-token object building. Read through :attr:`entries`."""

    __slots__ = ("k", "_rows", "_built")

    def __init__(self, k: int | None):
        self.k = k
        self._rows: list[np.ndarray] = []
        self._built: list[TokenLogprobs] = []

    def add(self, row: np.ndarray, k: int) -> None:
        """One more token's packed row, its top list to be cut to ``k``."""
        self.k = k
        self._rows.append(row)

    def __len__(self) -> int:
        return len(self._built) + len(self._rows)

    @property
    def entries(self) -> list[TokenLogprobs]:
        """Every token's :class:`TokenLogprobs` so far (the same list object each time, grown)."""
        if self._rows:
            self._built += unpack_logprobs(self._rows, self.k)
            self._rows = []
        return self._built
