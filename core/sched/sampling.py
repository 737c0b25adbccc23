"""The next-token choice (greedy, temperature, top-k, top-p, min-p; a request's logit bias and
penalties first: :mod:`.logits_processors`), per row of a step, by :mod:`.sampling_params`.

A row whose token cannot be drawn (its logits hold NaN or infinity, its seed seeds no generator)
gets a negative code instead of a token (:data:`ROW_FAILURES`): the engine fails that request alone,
and the other rows of the step are drawn as if it were not there. Only errors raised (the device's,
a collective's) stop the step."""
from __future__ import annotations

import functools

import torch

from .logits_processors import changes_logits, apply_to_row, min_p_filter
from .grammar_matchers import apply_token_bitmask
from .sampling_params import GREEDY_BELOW, MAX_SEED, SamplingParams  # noqa: F401  (the engine's names for them)


#: The token code of a row whose logits hold NaN or infinity (the model overflowed its dtype).
NON_FINITE_LOGITS = -1
#: The token code of a row whose seed seeds no generator (changed after the request was validated).
UNSEEDABLE = -2
#: The token code of a row whose grammar rejected a token it sampled (a bug in the mask: never expected).
GRAMMAR_REJECTED = -3
#: Why a row failed, by its code: what the engine tells the request's caller.
ROW_FAILURES = {
    NON_FINITE_LOGITS: "sampling failed: the model's logits for this request hold NaN or infinity (an overflow "
                       "in the model's dtype on this input; a wider dtype such as float32 may avoid it)",
    UNSEEDABLE: f"sampling failed: the request's seed seeds no generator (it must stay in 0..{MAX_SEED})",
    GRAMMAR_REJECTED: "sampling failed: a token was drawn that the request's structured output does not allow "
                      "(a bug in anydev's token mask; please report it)",
}


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Next token of each row of ``logits`` [B, V] (float32): temperature, then top-k, then top-p,
    as HF transformers orders its warpers. Returns [B] int64."""
    if params.is_greedy:
        return logits.argmax(dim=-1)
    logits = logits / params.temperature
    if params.top_k > 0:
        k = min(params.top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[:, -1:]                 # [B, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative - sorted_logits.softmax(dim=-1) >= params.top_p
        drop[..., 0] = False        # the likeliest token always stays (a top_p that rounds to 0 included)
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    if params.min_p > 0:
        logits = min_p_filter(logits, torch.tensor([[params.min_p]], device=logits.device))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def sample_rows(logits: torch.Tensor, params: list[SamplingParams | None],
                generators: list, histories: list | None = None, masks: tuple | None = None) -> torch.Tensor:
    """Next token of each row of ``logits`` [B, V] with that row's own parameters (a row whose
    params are None needs no token, e.g. a prefill chunk short of its prompt's end: it gets the
    argmax). Greedy rows take one argmax together; sampled rows without a generator are drawn together
    with per-row temperature, top-k and top-p; a row with its own generator (a request's seed, so its
    tokens do not depend on what shares the step) is drawn alone. A row whose logits hold NaN or
    +inf, or only -inf, gets :data:`NON_FINITE_LOGITS`, one whose generator is :data:`UNSEEDED` gets
    :data:`UNSEEDABLE`; the engine ignores the codes of rows that need no token. The check is on the
    device (no host sync) and reads only each row's largest logit, which NaN and +inf always are:
    greedy decoding, the hot path, pays three tiny kernels for it. A row whose request biases or
    penalizes its logits has them changed first (``histories[i]``: its token record, see
    :class:`~.logits_processors.TokenHistory`), and a row with structured output has the tokens its
    grammar does not allow masked out last (``masks``: the rows [R] or None for all, and their bitmask
    [R, words] on the device, see :func:`~.grammar_matchers.apply_token_bitmask`). Returns [B] int64."""
    changed = [i for i, p in enumerate(params) if p is not None and changes_logits(p)]
    if changed or masks is not None:
        logits = logits.to(torch.float32, copy=True)     # the model's logits stay as they are (logprobs read them)
        for i in changed:
            logits[i] = apply_to_row(logits[i], params[i], histories[i] if histories else None)
        if masks is not None:
            apply_token_bitmask(logits, *masks)
    best, tokens = row_max(logits)
    failed = (best - best).isnan()     # inf - inf and NaN - NaN are NaN: the fewest host ops found
    sampled = [i for i, p in enumerate(params) if p is not None and not p.is_greedy]
    if not sampled:
        return tokens.masked_fill_(failed, NON_FINITE_LOGITS)
    # a failed row's draw is thrown away: uniform logits keep torch.multinomial from raising
    logits = logits.masked_fill(failed[:, None], 0.0)
    shared = [i for i in sampled if generators[i] is None]
    for row in sampled:
        if generators[row] is UNSEEDED:
            tokens[row] = UNSEEDABLE
        elif generators[row] is not None:
            tokens[row] = sample(logits[row:row + 1].float(), params[row], generators[row])[0]
    if shared:
        rows = torch.tensor(shared, device=logits.device)
        tokens[rows] = _sample_together(logits[rows].float(), [params[i] for i in shared])
    return tokens.masked_fill_(failed, NON_FINITE_LOGITS)


#: Rows up to which :func:`row_max` splits each row (more rows fill the device by themselves).
SPLIT_ROWS_UP_TO = 16
#: :func:`row_max` splits a row into at most this many parts (a divisor of its width).
ROW_PARTS = 256


def row_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits.max(dim=-1)`` of a [B, V] tensor, the same values and indices (the first largest;
    NaN wins, as in torch), in two passes for a few long rows: at some widths torch reduces such a row
    in one thread block, tens of microseconds on a GPU for a 128K vocabulary. Each row is viewed as
    many short parts (:func:`_parts`), each part reduced, then the parts' maxima. A width without such
    parts keeps torch's max: with fewer, longer parts the two passes are the slower."""
    rows, width = logits.shape
    parts = _parts(width)
    if rows > SPLIT_ROWS_UP_TO or parts == 1 or not logits.is_contiguous():
        return logits.max(dim=-1)
    size = width // parts
    part_best, part_index = logits.view(rows, parts, size).max(dim=-1)            # [B, parts]
    best, part = part_best.max(dim=-1)                                             # the first best part
    index = torch.add(part_index.gather(1, part[:, None]).squeeze(1), part, alpha=size)
    return best, index


@functools.lru_cache(maxsize=None)
def _parts(width: int) -> int:
    """The largest divisor of ``width`` up to :data:`ROW_PARTS` that makes parts 64 to 512 wide
    (1: none)."""
    for parts in range(min(ROW_PARTS, width // 64), 1, -1):
        if width % parts == 0 and width // parts <= 512:
            return parts
    return 1


#: The generator of a row whose seed seeds none (see :class:`SeededGenerators`).
UNSEEDED = object()
#: The seed in a row's ``(sequence id, seed)`` key of a sequence without a seed (its key names it
#: for its token record: see :class:`~.logits_processors.TokenHistory`).
NO_SEED = -1


class SeededGenerators:
    """The sampling rank's generators of seeded requests, by sequence id. A sequence's generator is
    made from its request's seed the first time it samples and kept until the engine says the
    sequence ended, so its draws continue across steps and preemption, whatever shares its steps."""

    def __init__(self, device: torch.device):
        self.device = device
        self._by_seq: dict[int, torch.Generator] = {}

    def rows(self, seeds: list[tuple[int, int] | None]) -> list:
        """Each row's generator: its ``(sequence id, seed)``, or None for torch's default one (no key,
        or the key of an unseeded sequence, seed -1, sent for its token record); :data:`UNSEEDED`
        where the seed seeds none (that row fails, not the step)."""
        return [None if key is None or key[1] == NO_SEED else self._get(*key) for key in seeds]

    def _get(self, seq_id: int, seed: int):
        generator = self._by_seq.get(seq_id)
        if generator is None:
            generator = torch.Generator(device=self.device)
            try:
                generator.manual_seed(seed)
            except (ValueError, OverflowError, TypeError):   # the seed, not the device: a host-side conversion
                return UNSEEDED
            self._by_seq[seq_id] = generator
        return generator

    def drop(self, seq_ids) -> None:
        """Forget the generators of sequences that ended (ids it never saw are fine)."""
        for seq_id in seq_ids:
            self._by_seq.pop(seq_id, None)

    def seq_ids(self) -> list[int]:
        return sorted(self._by_seq)


def _sample_together(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """:func:`sample` for rows with parameters of their own, in one pass (torch's default generator)."""
    device, vocab = logits.device, logits.shape[-1]
    logits = logits / torch.tensor([p.temperature for p in params], device=device)[:, None]
    top_k = [min(p.top_k, vocab) for p in params]
    if any(top_k):
        k = torch.tensor([max(k, 1) for k in top_k], device=device)[:, None]
        values = torch.topk(logits, max(top_k), dim=-1).values                   # [R, max k]
        kth = values.gather(1, k - 1)                                             # [R, 1]
        kth = kth.masked_fill(torch.tensor([k == 0 for k in top_k], device=device)[:, None], float("-inf"))
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if any(p.top_p < 1.0 for p in params):
        top_p = torch.tensor([p.top_p for p in params], device=device)[:, None]
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs >= top_p
        drop[:, 0] = False          # the likeliest token always stays (a top_p that rounds to 0 included)
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    if any(p.min_p > 0 for p in params):
        logits = min_p_filter(logits, torch.tensor([p.min_p for p in params], device=device)[:, None])
    return torch.multinomial(logits.softmax(dim=-1), num_samples=1).squeeze(-1)
