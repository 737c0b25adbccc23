"""What a request does to its logits before a token is drawn, on the device: ``logit_bias``, the
repetition penalty (HF's, over the prompt and the output), the frequency and presence penalties
(OpenAI's, over the output), and, after the temperature, ``min_p``.

The penalties need each sequence's tokens so far. The sampling rank keeps them
(:class:`TokenHistory`, by sequence id, as it keeps seeded generators): the output's token counts,
grown on the device from each step's sampled tokens (no host copy), and the prompt's tokens as a
mask, made from the step that computes the prompt (a request with a repetition penalty computes its
prompt whole: ``Sequence.computes_prompt_whole``). The engine says when a sequence ended.
"""
from __future__ import annotations

import torch


def uses_history(params) -> bool:
    """The request's penalties need its tokens so far."""
    return params.repetition_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0


def changes_logits(params) -> bool:
    """Anything here applies to the request's logits before its token is chosen (``min_p`` aside)."""
    return uses_history(params) or bool(params.logit_bias)


class TokenHistory:
    """The sampling rank's record of each penalized sequence: output token counts [vocab] (int32) and
    the prompt's tokens [vocab] (bool), on the device."""

    def __init__(self, vocab_size: int, device: torch.device):
        self.vocab_size, self.device = vocab_size, device
        self._counts: dict[int, torch.Tensor] = {}
        self._prompt: dict[int, torch.Tensor] = {}

    def see(self, seq_id: int, prompt_ids: list[int]) -> None:
        """Start ``seq_id``'s record (once: at its first sampled step, whose tokens are its prompt)."""
        if seq_id in self._counts:
            return
        self._counts[seq_id] = torch.zeros(self.vocab_size, dtype=torch.int32, device=self.device)
        mask = torch.zeros(self.vocab_size, dtype=torch.bool, device=self.device)
        if prompt_ids:
            mask[torch.tensor(prompt_ids, device=self.device)] = True
        self._prompt[seq_id] = mask

    def counts(self, seq_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._counts[seq_id], self._prompt[seq_id]

    def record(self, seq_id: int, token: torch.Tensor) -> None:
        """Count ``token`` (a 1-element device tensor; a failed row's negative code counts nothing)."""
        counts = self._counts[seq_id]
        counts.index_add_(0, token.clamp(min=0).view(1), (token >= 0).to(torch.int32).view(1))

    def drop(self, seq_ids) -> None:
        for seq_id in seq_ids:
            self._counts.pop(seq_id, None)
            self._prompt.pop(seq_id, None)

    def seq_ids(self) -> list[int]:
        return sorted(self._counts)


def apply_to_row(logits: torch.Tensor, params, history: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """One row's logits [V] (float32) after its bias and penalties (a new tensor)."""
    logits = logits.float().clone()
    if params.logit_bias:
        ids = torch.tensor(list(params.logit_bias), device=logits.device)
        logits.index_add_(0, ids, torch.tensor(list(params.logit_bias.values()), device=logits.device))
    if history is not None:
        counts, prompt = history
        if params.repetition_penalty != 1.0:
            seen = prompt | (counts > 0)
            penalized = torch.where(logits > 0, logits / params.repetition_penalty, logits * params.repetition_penalty)
            logits = torch.where(seen, penalized, logits)
        if params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
            logits = logits - params.frequency_penalty * counts - params.presence_penalty * (counts > 0)
    return logits


def min_p_filter(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """``logits`` [R, V] (after the temperature) with the tokens less likely than ``min_p`` [R, 1] times
    the likeliest one's probability masked to -inf (HF's MinPLogitsWarper; the likeliest always stays)."""
    probs = logits.softmax(dim=-1)
    threshold = min_p * probs.max(dim=-1, keepdim=True).values
    return logits.masked_fill(probs < threshold, float("-inf"))
