"""The decode hot path's shape, asserted by counts (never by time): one packed host→device copy per
step, step tensors equal to a per-token reference, fused projections that are views of the weights,
no host syncs inside the forward, sampling where the logits are."""
from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.checkpoint import demo_checkpoint
from anydev.core.models.fusion import fused_views
from anydev.core.scheduler import Sequence, build_step

BLOCK = 4


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def make_seq(index, prompt_len, output_len, blocks, num_cached):
    seq = Sequence(index, list(range(10 + index, 10 + index + prompt_len)), 20)
    seq.output = [100 + index + i for i in range(output_len)]
    seq.assign_blocks(blocks, BLOCK)
    seq.num_cached = num_cached
    return seq


def reference_step(seqs):
    """Per token, the slow obvious way: (input ids, positions, write slots, context) per sequence."""
    rows = []
    for seq in seqs:
        tokens = seq.prompt + seq.output
        positions = list(range(seq.num_cached, len(tokens)))
        slots = [seq.blocks[p // BLOCK] * BLOCK + p % BLOCK for p in positions]
        rows.append((tokens[seq.num_cached:], positions, slots, len(tokens)))
    return rows


@pytest.mark.parametrize("case", ["prefill", "decode"])
def test_build_step_equals_the_per_token_reference(case):
    if case == "prefill":   # unequal prompts: padding to skip
        seqs = [make_seq(0, 5, 0, [7, 2], 0), make_seq(1, 2, 0, [3], 0), make_seq(2, 9, 0, [0, 5, 6], 0)]
    else:                   # one new token each, contexts of unequal lengths
        seqs = [make_seq(0, 5, 3, [7, 2, 4], 7), make_seq(1, 2, 1, [3], 2), make_seq(2, 9, 2, [0, 5, 6], 10)]
    batch = build_step(seqs)
    ref = reference_step(seqs)
    assert batch.is_decode == (case == "decode")
    assert batch.N == sum(len(r[0]) for r in ref)
    assert batch.write_slots.tolist() == [s for r in ref for s in r[2]]
    flat_ids, flat_pos = batch.input_ids.flatten(), batch.positions.flatten()
    assert flat_ids[batch.token_index].tolist() == [t for r in ref for t in r[0]]
    assert flat_pos[batch.token_index].tolist() == [p for r in ref for p in r[1]]
    assert batch.last_index.tolist() == [len(r[0]) - 1 for r in ref]
    mask = batch.attention_mask()
    for row, (seq, (tokens, positions, _, context)) in enumerate(zip(seqs, ref)):
        for s, position in enumerate(positions):
            allowed = mask[row, 0, s].nonzero().flatten().tolist()
            assert allowed == list(range(position + 1))             # causal, inside the context
            read = batch.read_slots[row, allowed].tolist()
            assert read == [seq.blocks[p // BLOCK] * BLOCK + p % BLOCK for p in allowed]


def test_sliding_window_masks_keys_older_than_the_window():
    seqs = [make_seq(0, 5, 3, [7, 2, 4], 7)]
    batch = build_step(seqs, sliding_window=3)
    assert batch.attention_mask()[0, 0, 0].nonzero().flatten().tolist() == [5, 6, 7]


def test_a_step_moves_to_a_device_in_one_copy_and_its_fields_are_views():
    seqs = [make_seq(0, 5, 3, [7, 2, 4], 7), make_seq(1, 2, 1, [3], 2)]
    batch = build_step(seqs)
    counter = OpCounter()
    with counter:
        moved = batch.to("meta")
    assert counter.counts["_to_copy"] == 1
    assert moved.packed.device.type == "meta"
    for name in ("input_ids", "positions", "read_slots", "write_slots", "token_index", "last_index", "context"):
        field = getattr(moved, name)
        assert field.device.type == "meta" and field.shape == getattr(batch, name).shape
        assert field.untyped_storage().data_ptr() == moved.packed.untyped_storage().data_ptr()


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(max_num_seqs=4, max_model_len=64, block_size=BLOCK)) as engine:
        yield engine


def test_fused_projections_are_views_over_the_parts(engine):
    worker = engine.workers[0]
    layers = engine.checkpoint.config.num_hidden_layers
    views = fused_views(worker.weights, layers)
    assert len(views) == 2 * layers     # qkv and gate_up of every layer (no attention bias in the demo)
    parts = worker.weights.tensors
    for i in range(layers):
        qkv = views[f"model.layers.{i}.self_attn.qkv_proj.weight"]
        q, k, v = (parts[f"model.layers.{i}.self_attn.{p}_proj.weight"] for p in "qkv")
        assert qkv.data_ptr() == q.data_ptr()
        assert torch.equal(qkv, torch.cat((q, k, v)))
        gate_up = views[f"model.layers.{i}.mlp.gate_up_proj.weight"]
        gate, up = (parts[f"model.layers.{i}.mlp.{p}_proj.weight"] for p in ("gate", "up"))
        assert gate_up.data_ptr() == gate.data_ptr() and torch.equal(gate_up, torch.cat((gate, up)))


def test_no_fused_view_when_the_parts_are_not_back_to_back(engine):
    weights = engine.workers[0].weights

    class Moved:   # the same weights with k_proj of layer 0 said to live elsewhere
        dtype, buffer = weights.dtype, weights.buffer
        offsets = dict(weights.offsets)
        name = "model.layers.0.self_attn.k_proj.weight"
        offsets[name] = (offsets[name][0] + 256, offsets[name][1])

    views = fused_views(Moved, engine.checkpoint.config.num_hidden_layers)
    assert "model.layers.0.self_attn.qkv_proj.weight" not in views
    assert "model.layers.0.mlp.gate_up_proj.weight" in views


def counted_decode_forward(engine, sampling):
    """The ops of one decode forward (batch 2) on rank 0, run through the engine."""
    worker = engine.workers[0]
    forward, seen = worker.forward, []

    def counting(batch, *args):
        counter = OpCounter()
        with counter:
            result = forward(batch, *args)
        seen.append((batch.is_decode, counter.counts, result))
        return result

    worker.forward = counting
    try:
        engine.generate_ids([[5, 6, 7], [8, 9]], sampling)
    finally:
        worker.forward = forward
    return [(counts, result) for is_decode, counts, result in seen if is_decode]


@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=3),
                                      SamplingParams(max_new_tokens=3, temperature=1.0, top_k=5, top_p=0.9, seed=1)])
def test_a_decode_step_runs_fused_projections_and_never_syncs_inside(engine, sampling):
    steps = counted_decode_forward(engine, sampling)
    layers = engine.checkpoint.config.num_hidden_layers
    assert len(steps) == 2
    for counts, result in steps:
        assert counts["linear"] == 4 * layers + 1          # qkv, o, gate_up, down per layer; lm_head
        assert counts["index_copy_"] == 2 * layers          # K and V writes
        assert counts["index"] == 2 * layers                # K and V gathers
        assert counts["_local_scalar_dense"] == 0           # no .item() inside the step
        assert counts["nonzero"] == 0                       # no data-dependent shapes (a device sync)
        assert result.dtype == torch.int64 and result.shape == (2,)   # only the token ids come back
