"""Log-probabilities of the sampled tokens, computed on the device by the sampling rank, packed small.

Only what an answer needs comes back to the host: for each row that asks, the log-probability of its
sampled token and its ``k`` likeliest tokens with theirs (``k`` the most any row of the step asks),
as one float32 row ``[chosen, top values (k), top ids (k)]`` (ids below 2**24 are exact in float32).
The log-softmax is of the model's logits as they are (before temperature, top-k and top-p), as
vLLM's and OpenAI's logprobs are.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: The most alternatives a request may ask for (OpenAI's top_logprobs maximum).
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class TokenLogprobs:
    """One token's log-probability and its step's likeliest tokens (id, log-probability), best first."""

    logprob: float
    top: tuple[tuple[int, float], ...]


def logprob_rows(params: list) -> tuple[list[int], int]:
    """The rows of a step whose requests ask for logprobs, and the width ``k`` of the step's top lists."""
    rows = [i for i, p in enumerate(params) if p is not None and p.logprobs is not None]
    return rows, max((params[i].logprobs for i in rows), default=0)


def pack_logprobs(logits: torch.Tensor, tokens: torch.Tensor, rows: list[int], k: int) -> torch.Tensor:
    """``[len(rows), 1 + 2k]`` float32 on the device: each row's chosen token's log-probability, then
    its top ``k`` log-probabilities and their ids (a failed row's negative token code reads token 0)."""
    index = torch.tensor(rows, device=logits.device)
    logp = logits.index_select(0, index).float().log_softmax(dim=-1)
    chosen = logp.gather(1, tokens.index_select(0, index).clamp(min=0)[:, None])
    if k == 0:
        return chosen
    top = logp.topk(k, dim=-1)
    return torch.cat((chosen, top.values, top.indices.float()), dim=1)


def unpack_logprobs(packed: np.ndarray, k: int) -> list[TokenLogprobs]:
    """The host side of :func:`pack_logprobs`: one :class:`TokenLogprobs` per packed row."""
    out = []
    for row in packed.tolist():
        top = tuple((int(i), v) for v, i in zip(row[1:1 + k], row[1 + k:1 + 2 * k]))
        out.append(TokenLogprobs(row[0], top))
    return out
