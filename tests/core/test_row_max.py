"""The sampler's chunked row maximum (``sampling.row_max``) against torch's argmax: the same largest
value and the first index holding it, also where a tie spans two chunks, in the short last chunk and
where a row holds NaN."""
import pytest
import torch

from anydev.core.sched.sampling import CHUNKED_MAX_ROWS, MAX_CHUNK, row_max


@pytest.mark.parametrize("rows", [1, CHUNKED_MAX_ROWS, CHUNKED_MAX_ROWS + 1])
@pytest.mark.parametrize("width", [3 * MAX_CHUNK, 3 * MAX_CHUNK + 77, MAX_CHUNK + 50])
def test_row_max_is_the_first_index_of_the_largest_value(rows, width):
    generator = torch.Generator().manual_seed(rows * width)
    logits = torch.randn(rows, width, generator=generator).to(torch.bfloat16)
    logits[0, [MAX_CHUNK + 9, width - 2]] = 40.0          # equal maxima in two chunks (the last one short)
    logits[-1, width - 1] = 41.0                          # the maximum in the short last chunk
    best, index = row_max(logits)
    assert torch.equal(index, logits.float().argmax(dim=-1))
    assert torch.equal(best, logits.max(dim=-1).values)


def test_row_max_keeps_nan():
    logits = torch.randn(2, 3 * MAX_CHUNK + 1)
    logits[1, 2 * MAX_CHUNK + 3] = float("nan")
    best, _ = row_max(logits)
    assert not best[0].isnan() and best[1].isnan()
