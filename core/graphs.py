"""Decode steps as device graphs: each (batch, context) bucket is captured once, then replayed.

A decode step launches hundreds of small kernels; launching them from Python costs far more than
running them. So, as vLLM and nano-vllm do with CUDA graphs, the engine pads every decode step up to a
bucket (:func:`batch_bucket` sequences, :func:`context_bucket` context positions), and each rank
captures the model's forward for that bucket the first time it meets it (all ranks meet it in the
same step, so the collectives inside line up) and replays it afterwards: one host→device copy of the
step into the graph's static input, one replay, sampling outside the graph.

Padding rows read and write one scratch KV slot that no sequence owns (the engine reserves a block for
it), so they never touch a real sequence's pages; padding context positions of real rows are masked.
"""
from __future__ import annotations

from typing import Callable, Protocol

import numpy as np
import torch

from anydev.plugin_api import AnydevError, Stream

from .models.batch import StepBatch

#: Context buckets are powers of two from this size up to ``_CONTEXT_STEP``, then its multiples.
_MIN_CONTEXT = 16
_CONTEXT_STEP = 1024


class GraphCaptureError(AnydevError):
    """Capturing a decode step as a device graph failed on a rank; the message names the bucket and
    the cause. ``EngineConfig(use_graphs=False)`` (``--enforce-eager``) runs every step eagerly."""


def batch_bucket(num_seqs: int, max_num_seqs: int) -> int:
    """The graph batch size for ``num_seqs`` sequences: the next power of two, at most ``max_num_seqs``."""
    return min(1 << (num_seqs - 1).bit_length(), max_num_seqs)


def context_bucket(context: int, max_model_len: int) -> int:
    """The graph context width for a step whose longest context is ``context`` tokens: the next power
    of two (at least 16) up to 1024, then the next multiple of 1024; at most ``max_model_len``."""
    if context <= _CONTEXT_STEP:
        width = max(_MIN_CONTEXT, 1 << (context - 1).bit_length())
    else:
        width = -(-context // _CONTEXT_STEP) * _CONTEXT_STEP
    return min(width, max_model_len)


def pad_decode(batch: StepBatch, rows: int, width: int, scratch_slot: int) -> StepBatch:
    """The decode step ``batch`` padded to ``rows`` sequences and ``width`` context positions.

    Padding rows feed token 0 at position 0, attend one key, and write and read only
    ``scratch_slot``; padding positions of real rows read it too, masked out (beyond their context).
    ``real_rows`` of the result says how many rows are real.
    """
    B, L = batch.B, batch.L
    assert batch.is_decode and B <= rows and L <= width, "a decode step smaller than its bucket"

    def column(field: torch.Tensor, fill: int) -> np.ndarray:
        out = np.full(rows, fill, dtype=np.int64)
        out[:B] = field.reshape(-1).numpy()
        return out

    read_slots = np.full((rows, width), scratch_slot, dtype=np.int64)
    read_slots[:B, :L] = batch.read_slots.numpy()
    padded = StepBatch.pack(dict(
        input_ids=column(batch.input_ids, 0)[:, None], positions=column(batch.positions, 0)[:, None],
        context=column(batch.context, 1), token_index=np.arange(rows), write_slots=column(batch.write_slots, scratch_slot),
        read_slots=read_slots, last_index=np.zeros(rows, dtype=np.int64),
    ), batch.sliding_window)
    padded.real_rows = B
    return padded


class StepGraph(Protocol):
    """What :class:`DecodeGraphs` needs of a graph (tests supply one that re-runs Python)."""

    def capture(self, forward: Callable[[], torch.Tensor], share_memory_with: "StepGraph | None") -> torch.Tensor:
        """Record ``forward()``; return its output tensor, which every replay rewrites."""

    def replay(self) -> None: ...

    def close(self) -> None: ...


class DeviceGraph:
    """A :class:`StepGraph` over the device API's graph (``stream.create_graph()``, contract 1.1)."""

    def __init__(self, stream: Stream):
        self.graph = stream.create_graph()

    def capture(self, forward, share_memory_with: "DeviceGraph | None" = None) -> torch.Tensor:
        with self.graph.capture(None if share_memory_with is None else share_memory_with.graph):
            output = forward()
        return output

    def replay(self) -> None:
        self.graph.replay()

    def close(self) -> None:
        self.graph.close()


class DecodeGraphs:
    """One rank's decode graphs, one per bucket ``(rows, width)``, captured on first use.

    ``forward`` is the model's forward (a :class:`StepBatch` on the device → logits); ``new_graph()``
    makes an empty :class:`StepGraph` on the rank's stream. Every graph shares the first one's memory
    pool: they replay one at a time, on one stream. Call :meth:`run` on the rank's thread, inside its
    ``torch_stream()``.
    """

    def __init__(self, rank: int, new_graph: Callable[[], StepGraph],
                 forward: Callable[[StepBatch], torch.Tensor], device: torch.device):
        self.rank = rank
        self._new_graph = new_graph
        self._forward = forward
        self._device = device
        self._graphs: dict[tuple[int, int], tuple[StepBatch, StepGraph, torch.Tensor]] = {}
        self._pool_owner: StepGraph | None = None

    @property
    def buckets(self) -> list[tuple[int, int]]:
        """The captured buckets ``(rows, width)``, in capture order."""
        return list(self._graphs)

    @torch.inference_mode()
    def run(self, batch: StepBatch) -> torch.Tensor:
        """Logits [rows, vocab] of the padded decode step ``batch`` (on the host): one copy into the
        bucket's static input and one replay. The logits tensor is rewritten by the next run."""
        key = (batch.B, batch.L)
        if key not in self._graphs:
            return self._capture(key, batch)
        static, graph, logits = self._graphs[key]
        static.packed.copy_(batch.packed, non_blocking=True)
        graph.replay()
        return logits

    def _capture(self, key: tuple[int, int], batch: StepBatch) -> torch.Tensor:
        """Warm up eagerly on this step, capture the bucket's graph, replay it for this step."""
        static = StepBatch(batch.packed.to(self._device), batch.B, batch.S, batch.L, batch.N, batch.sliding_window)
        graph = None
        try:
            self._forward(static)    # warm-up: torch's lazy initialisations stay out of the capture
            graph = self._new_graph()
            logits = graph.capture(lambda: self._forward(static), self._pool_owner)
            graph.replay()
        except Exception as exc:
            error = GraphCaptureError(
                f"rank {self.rank}: capturing the decode step as a device graph failed for the bucket of "
                f"{key[0]} sequence(s) x {key[1]} context positions: {type(exc).__name__}: {exc}. "
                f"Run eagerly with --enforce-eager (EngineConfig(use_graphs=False))"
            )
            if graph is not None:
                _close_after_error(graph, error)
            raise error from exc
        self._pool_owner = self._pool_owner or graph
        self._graphs[key] = (static, graph, logits)
        return logits

    def close(self) -> None:
        """Release every graph; the first failure is raised after all were tried, the rest attached."""
        graphs = [graph for _, graph, _ in self._graphs.values()]
        self._graphs, self._pool_owner = {}, None
        errors = []
        for graph in reversed(graphs):   # the pool's owner last
            try:
                graph.close()
            except Exception as exc:  # raised below, after the other graphs were released
                errors.append(exc)
        if errors:
            for other in errors[1:]:
                errors[0].add_note(f"also: {type(other).__name__}: {other}")
            raise errors[0]


def _close_after_error(graph: StepGraph, error: Exception) -> None:
    try:
        graph.close()
    except Exception as close_error:  # attached to the capture error, which is the one raised
        error.add_note(f"closing the failed graph also failed: {type(close_error).__name__}: {close_error}")
