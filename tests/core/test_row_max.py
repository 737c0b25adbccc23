"""The sampler's row maximum (core/sched/sampling.row_max) equals ``torch.max(dim=-1)``: the same
values and the same indices, the first of tied maxima, NaN and infinities as torch treats them, for
vocabularies cut into pieces and for those it leaves whole."""
import pytest
import torch

from anydev.core.sched.sampling import TWO_STAGE_MAX_ROWS, _piece_length, row_max


@pytest.mark.parametrize("width", [128256, 151936, 32000, 49152, 65537, 1000])
@pytest.mark.parametrize("rows", [1, 3, TWO_STAGE_MAX_ROWS, TWO_STAGE_MAX_ROWS + 1])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_row_max_equals_torch_max_with_ties_nan_and_infinities(width, rows, dtype):
    gen = torch.Generator().manual_seed(width + rows)
    logits = torch.randint(-3, 3, (rows, width), generator=gen).to(dtype)    # many tied maxima a row
    logits[0, width // 2] = 7.0                          # one maximum in a middle piece
    if rows > 1:
        logits[1, [5, width - 3]] = float("nan")         # NaN counts as largest, the first one's index
        logits[1, width // 3] = float("inf")
    if rows > 2:
        logits[2] = float("-inf")                        # every value -inf: index 0
        logits[-1, width - 1] = float("inf")             # the largest in the last piece's last place
    best, at = row_max(logits)
    want_best, want_at = logits.max(dim=-1)
    assert torch.equal(best.isnan(), want_best.isnan())
    assert torch.equal(best.nan_to_num(), want_best.nan_to_num()) and torch.equal(at, want_at)


def test_a_vocabulary_is_cut_into_equal_pieces_only_where_it_divides_and_is_long():
    assert _piece_length(128256) == 256 and 128256 // 256 <= 512    # Llama-3's: 501 pieces, viewed in place
    assert _piece_length(151936) == 1187                            # Qwen's: 128 pieces
    assert _piece_length(65537) is None and _piece_length(2048) is None   # a prime; a short row
