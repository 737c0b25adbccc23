"""Decode steps as device graphs, one per batch-size bucket, all captured at start-up.

A decode step launches a hundred-odd kernels; launching them from Python costs more than running
them. So, as vLLM does with CUDA graphs, each rank captures the model's decode forward once per batch
bucket (:func:`batch_buckets`) when the engine starts (every rank at once, so the collectives inside
line up), and replays it for every decode step padded to its bucket: one host→device copy of the
step into the rank's persistent input buffer (which the graphs read), one replay, sampling outside
the graph. Context length is not a
bucket: block tables have a fixed width (blocks per sequence of the longest context), and the paged
attention kernel reads only the pages a row's ``seq_lens`` covers. So the first request is as fast
as the hundredth, and nothing is captured while serving; with ``EngineConfig.lazy_graphs`` only the
smallest bucket is captured at start-up and each other one by the first step that needs it (every
rank runs that step, so every rank captures it at once).

Padding rows write no KV (slot -1) and attend nothing (``seq_lens`` 0); see
:func:`anydev.core.models.batch.pad_decode`. Graphs come from the device API
(``stream.create_graph()``, contract 1.1); every graph of a rank shares the first one's memory pool
(they replay one at a time, on one stream).
"""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

import numpy as np
import torch

from anydev.plugin_api import AnydevError

from ..models.batch import StepBatch, pad_decode


class GraphCaptureError(AnydevError):
    """Capturing a decode step as a device graph failed on a rank; the message names the bucket and
    the cause. ``EngineConfig(use_graphs=False)`` (``--enforce-eager``) runs every step eagerly."""


class GraphReplayError(AnydevError):
    """A decode step does not fit any captured graph (more rows or wider block tables than captured)."""


def batch_buckets(max_num_seqs: int) -> list[int]:
    """The graph batch sizes: powers of two below ``max_num_seqs``, and ``max_num_seqs``."""
    sizes = [1 << i for i in range(max_num_seqs.bit_length()) if 1 << i < max_num_seqs]
    return sizes + [max_num_seqs]


def batch_bucket(num_seqs: int, max_num_seqs: int) -> int:
    """The smallest bucket that holds ``num_seqs`` sequences."""
    return next(b for b in batch_buckets(max_num_seqs) if b >= num_seqs)


def idle_step(rows: int, max_blocks: int, num_prev: int = 0) -> StepBatch:
    """A decode step of ``rows`` padding rows only (writes no KV, attends nothing): the capture input."""
    empty = StepBatch.pack(dict(input_ids=np.zeros(0), positions=np.zeros(0), slot_mapping=np.zeros(0),
                                last_index=np.zeros(0), cu_seqlens_q=np.zeros(1), seq_lens=np.zeros(0),
                                block_tables=np.zeros((0, max_blocks))), max_q_len=1, num_prev=num_prev)
    return pad_decode(empty, rows, max_blocks)


class DecodeGraphs:
    """One rank's decode graphs, one per batch bucket, captured by :meth:`capture_all`.

    ``forward`` is the model's forward (a device :class:`StepBatch` → logits). ``new_graph(replay_eagerly)``
    makes an empty device-API graph on the rank's stream (the real one ignores ``replay_eagerly``; a
    test double without device graphs calls it at replay). Inputs live in the rank's persistent
    input buffer (``io``, a :class:`~anydev.core.rank.step_io.StepIO`): every step is copied there, so a
    graph captured over it reads each step's inputs. ``phase(name)`` (optional) times the parts of
    each capture (see :func:`capture_graph`). Call on the rank's thread, inside its ``torch_stream()``.
    """

    def __init__(self, rank: int, new_graph: Callable, forward: Callable[[StepBatch], torch.Tensor], io,
                 max_blocks: int, phase: Callable[[str], ContextManager] | None = None):
        self.rank = rank
        self.phase = phase
        self.max_blocks = max_blocks
        self.captures = 0
        self._new_graph = new_graph
        self._forward = forward
        self._io = io
        self._graphs: dict[int, tuple[object, torch.Tensor]] = {}
        self._pool_owner = None

    @property
    def pool_owner(self):
        """The graph whose memory pool every graph of this rank shares (None before a capture)."""
        return self._pool_owner

    @property
    def buckets(self) -> list[int]:
        """The captured batch sizes, in capture order (largest first)."""
        return list(self._graphs)

    @torch.inference_mode()
    def capture_all(self, buckets: list[int]) -> None:
        """Capture every bucket, the largest first (the shared pool is sized by it)."""
        for rows in sorted(buckets, reverse=True):
            self.capture(rows)

    def has(self, rows: int) -> bool:
        """Whether the bucket of ``rows`` sequences is captured."""
        return rows in self._graphs

    @torch.inference_mode()
    def capture(self, rows: int) -> None:
        """Capture the bucket of ``rows`` sequences (overwrites the input buffer: put the step after)."""
        static = self._io.put(idle_step(rows, self.max_blocks, self._io.num_prev))
        graph, (logits,) = capture_graph(self._new_graph, lambda: (self._forward(static),), self._pool_owner,
                                         f"rank {self.rank}: the decode step for the bucket of {rows} sequence(s)",
                                         self.phase)
        self.captures += 1
        self._pool_owner = self._pool_owner or graph
        self._graphs[rows] = (graph, logits)

    @torch.inference_mode()
    def run(self, step: StepBatch) -> torch.Tensor:
        """Logits [rows, vocab] of the padded decode step ``step``, already in the input buffer
        (``io.put``): one replay. The logits tensor is rewritten by the next run."""
        entry = self._graphs.get(step.B)
        if entry is None or step.M != self.max_blocks or not step.is_decode or step.num_prev != self._io.num_prev:
            raise GraphReplayError(
                f"rank {self.rank}: no decode graph for {step.B} rows x {step.M} blocks "
                f"(captured: {self.buckets} rows x {self.max_blocks} blocks)")
        graph, logits = entry
        graph.replay()
        return logits

    def close(self) -> None:
        """Release every graph; the first failure is raised after all were tried, the rest attached."""
        graphs = [graph for graph, _ in self._graphs.values()]
        self._graphs, self._pool_owner = {}, None
        close_graphs(graphs)


def capture_graph(new_graph: Callable, run: Callable[[], tuple], pool_owner, what: str,
                  phase: Callable[[str], ContextManager] | None = None) -> tuple[object, tuple]:
    """Run ``run`` once (torch's lazy initialisations and the kernels' compilation stay out of the
    capture), then capture it in a graph from ``new_graph(replay_eagerly)`` that shares ``pool_owner``'s
    memory pool (None: a pool of its own). ``phase(name)`` (optional) times the eager run as "kernel
    compile" and the capture as "graph capture". Returns the graph and ``run``'s outputs (a tuple of
    tensors, static: every replay rewrites them). Raises :class:`GraphCaptureError` naming ``what``
    and the way out."""
    timed = phase or (lambda name: contextlib.nullcontext())
    cell: dict[str, tuple] = {}
    graph = None
    try:
        with timed("kernel compile"):
            run()
        with timed("graph capture"):
            graph = new_graph(lambda: [out.copy_(new) for out, new in zip(cell["out"], run())])
            with graph.capture(pool_owner):
                cell["out"] = run()
    except Exception as exc:
        error = GraphCaptureError(f"{what}: capturing it as a device graph failed: {type(exc).__name__}: {exc}. "
                                  f"Run eagerly with --enforce-eager (EngineConfig(use_graphs=False))")
        if graph is not None:
            _close_after_error(graph, error)
        raise error from exc
    return graph, cell["out"]


def close_graphs(graphs: list) -> None:
    """Close ``graphs`` last first (a pool's owner is the first captured); the first failure is
    raised after all were tried, the others attached to it."""
    errors = []
    for graph in reversed(graphs):
        try:
            graph.close()
        except Exception as exc:  # raised below, after the other graphs were released
            errors.append(exc)
    if errors:
        for other in errors[1:]:
            errors[0].add_note(f"also: {type(other).__name__}: {other}")
        raise errors[0]


def _close_after_error(graph, error: Exception) -> None:
    try:
        graph.close()
    except Exception as close_error:  # attached to the capture error, which is the one raised
        error.add_note(f"closing the failed graph also failed: {type(close_error).__name__}: {close_error}")
