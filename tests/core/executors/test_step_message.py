"""Rank 0's messages as bytes (``anydev.core.executors.step_message``): a step's packed batch and
control fields travel without pickle and come back equal; any other message is pickled."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from anydev.core.executors import step_message
from anydev.core.executors.step_message import PICKLED, STEP, decode, encode
from anydev.core.models.batch import StepBatch, pad_decode
from anydev.core.sched.sampling import SamplingParams


def step_batch(B: int, M: int, prefill: int = 1, num_prev: int = 0) -> StepBatch:
    T = B * prefill
    rng = np.random.default_rng(B * 100 + M)
    return StepBatch.pack(dict(
        input_ids=rng.integers(0, 32000, T), positions=rng.integers(0, 4096, T), slot_mapping=rng.integers(-1, 9999, T),
        last_index=np.arange(prefill - 1, T, prefill), cu_seqlens_q=np.arange(0, T + 1, prefill),
        seq_lens=rng.integers(1, 4096, B), block_tables=rng.integers(0, 999, (B, M))), max_q_len=prefill, num_prev=num_prev)


def sent(message: tuple) -> tuple[list, tuple]:
    parts = encode(message)
    joined = bytearray(b"".join(bytes(memoryview(p).cast("B")) for p in parts))
    return parts, decode(joined)


def same_batch(a: StepBatch, b: StepBatch) -> bool:
    return (torch.equal(a.packed, b.packed)
            and (a.T, a.B, a.M, a.max_q_len, a.real_rows, a.num_prev, a.real_tokens, a.num_decodes)
            == (b.T, b.B, b.M, b.max_q_len, b.real_rows, b.num_prev, b.real_tokens, b.num_decodes))


@pytest.fixture
def no_pickle(monkeypatch):
    """Pickling or unpickling anything fails: a step must not need it."""
    def refuse(*args, **kwargs):
        raise AssertionError("a step message went through pickle")
    monkeypatch.setattr(step_message, "dumps", refuse)
    monkeypatch.setattr(step_message.pickle, "loads", refuse)


@pytest.mark.parametrize("batch", [step_batch(1, 3), step_batch(3, 5, num_prev=3), pad_decode(step_batch(3, 5), 8, 7),
                                   step_batch(2, 3, prefill=5)], ids=["decode1", "prev-tokens", "graph-padded", "prefill"])
def test_a_forward_step_comes_back_equal_without_pickle(batch, no_pickle):
    batch.real_tokens = None if batch.max_q_len == 1 else batch.T - 1
    batch.num_decodes = 1 if batch.max_q_len > 1 else 0      # (a value the receiver must not lose)
    sampling = [SamplingParams(temperature=0.7, top_k=5, top_p=0.9, seed=11, stop=["x"]), None] + [None] * (batch.B - 2) \
        if batch.B > 1 else [SamplingParams()]
    seeds = [(4, 11), None] + [None] * (batch.B - 2) if batch.B > 1 else [None]
    message = (9, False, None, "call", "forward", (batch, sampling, seeds, True, None, (2, 5)), None)
    parts, back = sent(message)
    assert parts[0] == STEP
    assert any(np.shares_memory(p, batch.packed.numpy()) for p in parts if isinstance(p, np.ndarray))   # not copied
    (seq, wants, target, kind, name, args, last) = back
    assert (seq, wants, target, kind, name, last) == (9, False, None, "call", "forward", None)
    assert same_batch(args[0], batch)
    assert args[1:] == (sampling, seeds, True, None, (2, 5))


def test_a_pipeline_step_of_micro_batches_comes_back_equal_without_pickle(no_pickle):
    batches = [step_batch(1, 3), step_batch(2, 4), step_batch(3, 1)]
    sampling = [[SamplingParams(seed=1)], [None, SamplingParams(temperature=1.0)], [None, None, None]]
    seeds = [[(1, 1)], [None, None], [None, None, None]]
    parts, back = sent((3, False, None, "call", "forward_stage", (batches, sampling, seeds, (7,)), None))
    assert parts[0] == STEP and back[4] == "forward_stage"
    got, *rest = back[5]
    assert all(same_batch(a, b) for a, b in zip(got, batches)) and len(got) == 3
    assert rest == [sampling, seeds, (7,)]


def test_a_step_with_a_token_ticket_and_other_messages_are_pickled_with_their_tensors():
    plan = {"weights": torch.arange(6, dtype=torch.float16).view(2, 3)}
    parts, back = sent((1, True, None, "setup", plan))
    assert parts[0] == PICKLED
    assert back[:4] == (1, True, None, "setup") and torch.equal(back[4]["weights"], plan["weights"])
    ticket_step = (2, False, None, "call", "forward", (step_batch(1, 1), [None], [None], False, "a ticket", ()), None)
    parts, back = sent(ticket_step)
    assert parts[0] == PICKLED and back[5][4] == "a ticket"
