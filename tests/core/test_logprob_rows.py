"""The logprobs path's host and device halves on their own: the packed rows (``sched.logprobs``) hold
the float32 log-softmax of the logits as they come (bfloat16 included), a sequence keeps its rows as
read back and builds its TokenLogprobs only when read (the step loop builds none), and rows of steps
of different widths unpack, cut to what the request asked, to what each row says."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from anydev.core import InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.sched import logprobs as lp
from anydev.plugin_api.kernels import KernelSet


def reference_rows(logits: torch.Tensor, targets: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logp = logits.float().log_softmax(dim=-1)
    values, ids = logp.sort(dim=-1, descending=True, stable=True)       # equal logits: the lower id first
    return logp.gather(1, targets[:, None])[:, 0], values[:, :k], ids[:, :k]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_rows_hold_the_float32_log_softmax_of_the_logits(dtype):
    logits = (torch.randn(6, 300, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
    targets = torch.tensor([0, 5, 299, 17, 3, 100])
    packed = lp.pack_logprobs(KernelSet.reference(), logits, None, targets, 4)
    assert packed.dtype == torch.float32 and packed.shape == (6, 9)
    chosen, values, ids = reference_rows(logits, targets, 4)
    torch.testing.assert_close(packed[:, 0], chosen, rtol=0, atol=1e-6)
    torch.testing.assert_close(packed[:, 1:5], values, rtol=0, atol=1e-6)
    assert torch.equal(packed[:, 5:].long(), ids)
    some = lp.pack_logprobs(KernelSet.reference(), logits, torch.tensor([4, 1]), targets[[4, 1]], 0)
    torch.testing.assert_close(some[:, 0], chosen[[4, 1]], rtol=0, atol=1e-6)


def row(chosen: float, top: list[tuple[int, float]], width: int) -> np.ndarray:
    """One packed row of ``width`` alternatives (the step's widest ask), ``top`` filling its first ones."""
    values = [v for _, v in top] + [-np.inf] * (width - len(top))
    ids = [i for i, _ in top] + [0] * (width - len(top))
    return np.array([chosen, *values, *ids], dtype=np.float32)


def test_rows_of_steps_of_different_widths_unpack_cut_to_the_ask():
    tops = [[(7, -0.5), (3, -1.25), (9, -2.0)], [(1, -0.25), (2, -3.5)], [(4, -0.75), (8, -1.5), (6, -4.0)]]
    rows = [row(-0.5, tops[0], 5), row(-3.5, tops[1], 2), row(-1.5, tops[2], 5)]
    expected = [lp.TokenLogprobs(c, tuple(t[:2])) for c, t in zip((-0.5, -3.5, -1.5), tops)]
    assert lp.unpack_logprobs(rows, 2) == expected
    assert lp.unpack_logprobs(rows * 2 + [rows[0]] * 4 + rows, 2) == expected * 2 + [expected[0]] * 4 + expected  # as blocks
    block = lp.unpack_logprobs(np.stack([rows[0], rows[2]]))
    assert [len(e.top) for e in block] == [5, 5] and block[1].top[:3] == tuple(tops[2])


def test_a_sequence_builds_its_logprobs_once_when_read():
    rows = lp.LogprobRows(None)
    rows.add(row(-0.5, [(7, -0.5), (3, -1.0)], 3), 1)
    assert len(rows) == 1
    first = rows.entries
    rows.add(row(-1.0, [(2, -1.0), (7, -2.0)], 2), 1)
    assert len(rows) == 2 and rows.entries is first
    assert first == [lp.TokenLogprobs(-0.5, ((7, -0.5),)), lp.TokenLogprobs(-1.0, ((2, -1.0),))]


def test_the_step_loop_builds_no_logprobs_objects_for_output_tokens(monkeypatch):
    built = []
    token_logprobs = lp.TokenLogprobs
    monkeypatch.setattr(lp, "TokenLogprobs", lambda *a: built.append(a) or token_logprobs(*a))
    with InferEngine(demo_checkpoint()) as engine:
        seqs = [engine.add_request([5, 9, 33], SamplingParams(max_new_tokens=6, ignore_eos=True, logprobs=k))
                for k in (3, 0, None)]
        while not all(s.is_finished for s in seqs):
            engine.step()
        assert built == []
        assert [len(s.logprobs) for s in seqs] == [6, 6, 0] and len(built) == 12
        assert {len(e.top) for e in seqs[0].logprobs} == {3} and {len(e.top) for e in seqs[1].logprobs} == {0}
        for token, entry in zip(seqs[0].output, seqs[0].logprobs):
            assert entry.top[0][0] == token and entry.logprob == entry.top[0][1]   # greedy: its token is the top one


def test_logprobs_add_no_host_wait_and_no_copy_back_to_a_step(monkeypatch):
    """The packed rows come back in the tokens' copy, behind the same event: through the device API
    the host waits on the device (an event, a stream, the device) and copies from it as often with
    logprobs as without."""
    from anydev.plugin_api.objects import device, event, stream
    from anydev.plugin_api.objects.memory import DeviceBuffer

    waits, copies = [], []
    for cls, name in ((event.Event, "synchronize"), (event.Event, "query"), (stream.Stream, "synchronize"),
                      (device.Device, "synchronize")):
        original = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self, *a, _f=original, _n=name, **kw: waits.append(_n) or _f(self, *a, **kw))
    memcpy = stream.Stream.memcpy_async
    monkeypatch.setattr(stream.Stream, "memcpy_async", lambda self, dst, src, *a, **kw: (
        copies.append(1) if isinstance(src, DeviceBuffer) and not isinstance(dst, DeviceBuffer) else None,
        memcpy(self, dst, src, *a, **kw))[1])
    counts = {}
    with InferEngine(demo_checkpoint()) as engine:
        prompts = [[5, 9, 33], [7, 1, 2, 4], [11, 12]]
        engine.generate_ids(prompts, SamplingParams(max_new_tokens=2, ignore_eos=True, logprobs=2))   # warm
        for k in (None, 5, None, 5):
            waits.clear()
            copies.clear()
            engine.generate_ids(prompts, SamplingParams(max_new_tokens=12, ignore_eos=True, logprobs=k))
            counts.setdefault(k, []).append((len(waits), len(copies)))
    assert counts[None][0][0] >= 12 and counts[None][0][1] >= 12     # a wait and a copy per step's tokens
    assert counts[5] == counts[None]                                  # no more with logprobs


class LogprobsSpy:
    """A rank's kernel set that notes the (rows, vocabulary, k) of each ``logprobs`` call."""

    def __init__(self, kernels, calls: list):
        self._kernels, self._calls = kernels, calls

    def __getattr__(self, name):
        return getattr(self._kernels, name)

    def logprobs(self, logits, targets, k, out):
        self._calls.append((*logits.shape, k))
        return self._kernels.logprobs(logits, targets, k, out)


def test_the_sampling_rank_packs_the_rows_by_its_kernel_sets_logprobs():
    """Decode steps' rows, and a scored prompt's, are packed by the model's kernel set's ``logprobs``
    (contract 1.10), whose answer is what the request gets."""
    calls = []
    with InferEngine(demo_checkpoint()) as engine:
        engine.workers[0].model.kernels = LogprobsSpy(engine.workers[0].model.kernels, calls)
        seqs = [engine.add_request([5, 9, 33], SamplingParams(max_new_tokens=4, ignore_eos=True, logprobs=3)),
                engine.add_request([7, 1, 2, 4], SamplingParams(max_new_tokens=4, ignore_eos=True, logprobs=1,
                                                               prompt_logprobs=2))]
        while not all(s.is_finished for s in seqs):
            engine.step()
        vocab = engine.workers[0].model.config.vocab_size
    assert calls and {v for _, v, _ in calls} == {vocab}
    assert (3, vocab, 3) in calls                                    # the scored prompt's 3 positions, k the step's widest
    assert {k for _, _, k in calls} == {3} and len(seqs[0].logprobs) == 4 and len(seqs[1].prompt_logprobs) == 3
