"""A packed step's fields (``StepBatch``): each reads its own bytes of ``packed``, made when first read,
in the step as packed, in a copy over other bytes and placed after the previous step's token slots."""
import numpy as np
import pytest
import torch

from anydev.core.models.batch import StepBatch


def fields(T=3, B=2, M=4):
    return dict(input_ids=np.arange(10, 10 + T), positions=np.arange(T), slot_mapping=np.arange(20, 20 + T),
                last_index=np.array([0, T - 1]), cu_seqlens_q=np.array([0, 1, T]), seq_lens=np.array([5, 6]),
                block_tables=np.arange(B * M).reshape(B, M))


def assert_fields(step: StepBatch, want: dict):
    for name, array in want.items():
        got = getattr(step, name)
        assert got.dtype == (torch.int32 if name in ("cu_seqlens_q", "seq_lens", "block_tables") else torch.int64)
        assert got.tolist() == array.tolist(), name


def test_each_field_reads_its_bytes_in_every_copy_of_a_step():
    want = fields()
    step = StepBatch.pack(want, max_q_len=2, num_prev=2)
    assert_fields(step, want)
    copy = step.view_of(step.packed.clone())
    copy.packed.zero_()                       # the copy's fields are its own bytes', not the original's
    assert copy.seq_lens.tolist() == [0, 0] and step.seq_lens.tolist() == [5, 6]
    buffer = torch.zeros(8 * 2 + step.packed.numel(), dtype=torch.uint8)
    buffer[16:] = step.packed
    placed = step.placed(buffer)
    assert_fields(placed, want)
    assert placed.token_pool.shape == (2 + 3,)


def test_an_unknown_attribute_is_an_attribute_error():
    step = StepBatch.pack(fields(), max_q_len=2)
    assert not hasattr(step, "no_such_field")
    with pytest.raises(AttributeError, match="no_such_field"):
        step.no_such_field
