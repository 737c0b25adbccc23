"""The decode hot path's shape, asserted by counts (never by time): one packed host→device copy per
step, step tensors equal to a per-token reference, fused projections that are views of the weights,
no host syncs inside the forward, sampling where the logits are."""
from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.models.fusion import fused_views
from anydev.core.sched.scheduler import Sequence, build_step

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


def reference_step(seqs, num_new=None):
    """Per token, the slow obvious way: (input ids, positions, write slots, context) per sequence."""
    rows = []
    for i, seq in enumerate(seqs):
        tokens = seq.prompt + seq.output
        end = len(tokens) if num_new is None else seq.num_cached + num_new[i]
        positions = list(range(seq.num_cached, end))
        slots = [seq.blocks[p // BLOCK] * BLOCK + p % BLOCK for p in positions]
        rows.append((tokens[seq.num_cached:end], positions, slots, end))
    return rows


CASES = {
    # unequal prompts, packed without padding
    "prefill": ([(0, 5, 0, [7, 2], 0), (1, 2, 0, [3], 0), (2, 9, 0, [0, 5, 6], 0)], None),
    # one new token each, contexts of unequal lengths
    "decode": ([(0, 5, 3, [7, 2, 4], 7), (1, 2, 1, [3], 2), (2, 9, 2, [0, 5, 6], 10)], None),
    # a prompt chunk after a cached prefix, a whole prompt and a decode in one step
    "mixed": ([(0, 9, 0, [7, 2, 4], 4), (1, 2, 0, [3], 0), (2, 9, 2, [0, 5, 6], 10)], [3, 2, 1]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_build_step_equals_the_per_token_reference(case):
    specs, num_new = CASES[case]
    seqs = [make_seq(*spec) for spec in specs]
    batch = build_step(seqs, num_new, block_size=BLOCK)
    ref = reference_step(seqs, num_new)
    assert batch.is_decode == (case == "decode")
    assert batch.T == batch.num_tokens == sum(len(r[0]) for r in ref)
    assert batch.input_ids.tolist() == [t for r in ref for t in r[0]]
    assert batch.positions.tolist() == [p for r in ref for p in r[1]]
    assert batch.slot_mapping.tolist() == [s for r in ref for s in r[2]]
    assert batch.seq_lens.tolist() == [r[3] for r in ref]
    lengths = [len(r[0]) for r in ref]
    assert batch.cu_seqlens_q.tolist() == [sum(lengths[:i]) for i in range(len(ref) + 1)]
    assert batch.last_index.tolist() == [sum(lengths[:i + 1]) - 1 for i in range(len(ref))]
    assert batch.block_tables.tolist() == [seq.blocks + [0] * (3 - len(seq.blocks)) for seq in seqs]
    assert (batch.input_ids.dtype, batch.positions.dtype, batch.slot_mapping.dtype) == (torch.int64,) * 3
    assert (batch.cu_seqlens_q.dtype, batch.seq_lens.dtype, batch.block_tables.dtype) == (torch.int32,) * 3


@pytest.mark.parametrize("num_new", [None, [1, 3]], ids=["decodes", "with-a-chunk"])
def test_a_row_whose_token_is_still_on_the_device_feeds_0_and_takes_it_from_the_previous_step(num_new):
    """A pending token (sampled by the step in flight, not read back) is fed as id 0 with its
    ``token_src`` the previous step's row, in a pure decode step and beside a prompt chunk alike."""
    pending = make_seq(0, 5, 3, [7, 2, 4], 8)
    pending.num_pending, pending.pending_row = 1, 1
    other = make_seq(1, 9, 0, [0, 5, 6], 8 if num_new is None else 4)
    batch = build_step([pending, other], num_new, block_size=BLOCK, num_prev=2)
    fed = [9 + 10 + 1 - 1] if num_new is None else list(range(10 + 1 + 4, 10 + 1 + 7))
    assert batch.input_ids.tolist() == [0] + fed
    assert batch.token_src.tolist()[0] == 1 and batch.positions.tolist()[0] == 8


def test_build_step_refuses_a_context_its_blocks_do_not_cover():
    seq = make_seq(0, 9, 0, [7], 0)
    with pytest.raises(ValueError, match="do not cover its context of 9 tokens"):
        build_step([seq], block_size=BLOCK)
    with pytest.raises(ValueError, match="cannot feed 10 token"):
        build_step([make_seq(0, 9, 0, [7, 2, 4], 0)], [10], block_size=BLOCK)


def test_a_step_moves_to_a_device_in_one_copy_and_its_fields_are_views():
    seqs = [make_seq(0, 5, 3, [7, 2, 4], 7), make_seq(1, 2, 1, [3], 2)]
    batch = build_step(seqs, max_blocks=8, block_size=BLOCK)
    assert batch.M == 8
    counter = OpCounter()
    with counter:
        moved = batch.to("meta")
    assert counter.counts["_to_copy"] == 1
    assert moved.packed.device.type == "meta"
    for name in ("input_ids", "positions", "slot_mapping", "last_index", "cu_seqlens_q", "seq_lens", "block_tables"):
        field = getattr(moved, name)
        assert field.device.type == "meta" and field.shape == getattr(batch, name).shape
        assert field.dtype == getattr(batch, name).dtype
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
        dtype, buffer, formats, tensors, row_bytes = weights.dtype, weights.buffer, {}, weights.tensors, weights.row_bytes
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
def test_a_decode_step_runs_fused_projections_and_the_kernels_without_item(engine, sampling):
    steps = counted_decode_forward(engine, sampling)
    layers = engine.checkpoint.config.num_hidden_layers
    assert len(steps) == 2
    for counts, result in steps:
        assert counts["linear"] == 4 * layers + 1          # qkv, o, gate_up, down per layer; lm_head
        assert counts["_scaled_dot_product_attention_math"] + counts["_scaled_dot_product_flash_attention_for_cpu"] \
            + counts["scaled_dot_product_attention"] >= layers   # paged decode attention, once a layer
        assert counts["_local_scalar_dense"] == 0           # no .item() inside the step
        ticket, _ = result
        assert ticket.rows == 2                             # the two rows' tokens come back, nothing else
