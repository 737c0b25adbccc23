"""Decode attention split over the most partitions (``attention_decode.MAX_SPLITS``): the last program
to finish reads every partition that holds keys, four at a time, and merges them; the outputs equal
the torch reference for query groups of 1, 3 (not a power of two), 4 and 8 heads, for a context that
fills all 16 partitions and one that fills few of a wide table, and a repeated call gives the same
(the merge counters are zero again). Under Triton's interpreter, in a process of its own."""
from __future__ import annotations

import pytest

from anydev.backends.triton_kernels import triton_importable
from interpreted import run_interpreted

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")


def test_a_context_over_sixteen_partitions_merges_to_the_reference():
    run_interpreted("""
        import torch
        from anydev.backends.triton_kernels import attention_decode
        from anydev.plugin_api import kernels as reference
        cpu = torch.device("cpu")
        gen = torch.Generator().manual_seed(0)
        block_size, D, pages = 16, 32, 80
        tables = torch.randperm(pages, generator=gen)[:72].to(torch.int32).view(1, 72)     # 1,152 slots
        assert attention_decode.num_splits(1, 1, 72 * block_size, cpu) == attention_decode.MAX_SPLITS == 16
        for group in (1, 3, 4, 8):
            k = torch.randn(pages, block_size, 1, D, generator=gen)
            v = torch.randn(pages, block_size, 1, D, generator=gen)
            q = torch.randn(1, group, D, generator=gen)
            for length in (1000, 130):      # every partition holds keys; three of 16 do
                lens = torch.tensor([length], dtype=torch.int32)
                got = attention_decode.paged_decode_attention(q, k, v, tables, lens, D ** -0.5)
                want = reference.paged_decode_attention(q, k, v, tables, lens, D ** -0.5)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                again = attention_decode.paged_decode_attention(q, k, v, tables, lens, D ** -0.5)
                assert torch.equal(got, again), (group, length)
        print("ok")
    """)


def test_short_sequences_of_a_split_launch_are_read_whole_beside_split_ones():
    """A batch that splits (a long sequence) holds a sequence short enough to be read whole by its
    first partition (90 keys, at most ``WHOLE_KEYS_PER_DIM`` x 32) and a padding row: every row equals
    the reference, and again on a second call (no counter left non-zero by the whole rows)."""
    run_interpreted("""
        import torch
        from anydev.backends.triton_kernels import attention_decode
        from anydev.plugin_api import kernels as reference
        cpu = torch.device("cpu")
        gen = torch.Generator().manual_seed(1)
        block_size, D, pages, width = 16, 32, 240, 72
        assert 90 <= attention_decode.WHOLE_KEYS_PER_DIM * D < 1000
        tables = torch.randperm(pages, generator=gen)[:3 * width].to(torch.int32).view(3, width)
        assert attention_decode.num_splits(3, 2, width * block_size, cpu) > 1
        k = torch.randn(pages, block_size, 2, D, generator=gen)
        v = torch.randn(pages, block_size, 2, D, generator=gen)
        q = torch.randn(3, 8, D, generator=gen)
        lens = torch.tensor([1000, 90, 0], dtype=torch.int32)
        for window in (None, 80):           # a window of 80 keys makes the long row whole too
            want = reference.paged_decode_attention(q, k, v, tables, lens, D ** -0.5, window)
            for _ in range(2):
                got = attention_decode.paged_decode_attention(q, k, v, tables, lens, D ** -0.5, window)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        print("ok")
    """)
