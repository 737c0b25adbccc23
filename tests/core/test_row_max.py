"""sample_rows' greedy argmax (``row_max``) splits a few long rows into parts and reduces twice: it
must give ``torch.max``'s values and indices exactly, the first largest on ties, NaN and infinities
where torch puts them, for widths with and without a divisor to split by."""
from __future__ import annotations

import pytest
import torch

from anydev.core.sched import sampling
from anydev.core.sched.sampling import row_max


def _same_as_torch(logits):
    best, index = row_max(logits)
    want_best, want_index = logits.max(dim=-1)
    assert torch.equal(index, want_index)
    assert torch.equal(best.isnan(), want_best.isnan())
    assert torch.equal(best[~best.isnan()], want_best[~want_best.isnan()])
    assert best.dtype == logits.dtype and index.dtype == torch.int64


@pytest.mark.parametrize("width", [32000, 128256, 151936, 64 * 7, 1000])
@pytest.mark.parametrize("rows", [1, 3])
def test_random_rows_match_torch(rows, width):
    _same_as_torch(torch.randn(rows, width, generator=torch.Generator().manual_seed(width)).to(torch.bfloat16))


def test_long_rows_are_split_into_parts():
    # the split path, not torch's own max, must be what the tests above compare
    assert sampling._parts(128256) == 256 and sampling._parts(32000) == 256 and sampling._parts(64 * 7) == 7
    # no divisor, parts under 64 wide, or only parts over 512 wide (151,936 = 128 x 1187): torch's max
    assert sampling._parts(65537) == 1 and sampling._parts(100) == 1 and sampling._parts(151936) == 1


def test_ties_give_the_first_index_even_across_parts():
    logits = torch.zeros(2, 32000)
    logits[0, [31999, 7000, 126]] = 5.0          # parts of 125: the first tie is in part 1, not part 0
    logits[1, [9000, 8999]] = 3.0                 # 8999 ends part 71, 9000 begins part 72
    _same_as_torch(logits)
    assert row_max(logits)[1].tolist() == [126, 8999]


def test_nan_and_infinities_land_where_torch_puts_them():
    logits = torch.randn(4, 32000, generator=torch.Generator().manual_seed(3))
    logits[0, 20000] = float("nan")
    logits[0, 25000] = float("inf")
    logits[1, 17] = float("inf")
    logits[1, 30000] = float("inf")
    logits[2] = float("-inf")
    logits[3, [5, 31000]] = float("nan")
    _same_as_torch(logits)
    assert row_max(logits)[1].tolist()[1:3] == [17, 0]


def test_many_rows_and_strided_rows_take_torch_max():
    wide = torch.randn(sampling.SPLIT_ROWS_UP_TO + 1, 32000, generator=torch.Generator().manual_seed(4))
    _same_as_torch(wide)
    _same_as_torch(torch.randn(3, 64000, generator=torch.Generator().manual_seed(5))[:, ::2])
