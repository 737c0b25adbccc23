"""Steps that are not pure decodes (prefill chunks, mixed with decodes) as piecewise device graphs.

A step launches ~200 kernels; run eagerly from Python that costs several milliseconds whatever the
step's size, so a step that mixes decodes with a prompt chunk would stall the running decodes even
when the chunk is small. As in vLLM's piecewise graphs, everything but the attentions is captured:
for each token bucket (:func:`token_buckets`), L + 1 graphs, one for each stretch of the model
between two paged attentions (``LlamaRank.first_piece``, ``middle_piece``, ``last_piece``), all at
start-up. A step padded to its bucket replays them in turn, running each layer's attention eagerly
between them over the real tokens only (its inputs, the ragged sequences, are no graph shape).

The pieces read the step's per-token fields (ids, positions, slots) from the rank's input buffer,
where they lie at offsets that depend on the bucket only (:mod:`.models.batch`); padding tokens write
no KV. Each piece's outputs are static tensors: layer i's q for the eager attention, whose output is
written into one static tensor the next piece reads (by the op that joins a mixed step's decode and
prefill attentions: no copy of its own), and the residual stream, updated in place.
"""
from __future__ import annotations

from typing import Callable, ContextManager

import numpy as np
import torch

from .graphs import GraphReplayError, capture_graph, close_graphs
from ..models.batch import StepBatch

SMALLEST_BUCKET = 16


def token_buckets(max_tokens: int) -> list[int]:
    """Token counts the piecewise graphs are captured for: powers of two from 16 up to ``max_tokens``
    (and ``max_tokens`` itself)."""
    sizes = [1 << i for i in range(SMALLEST_BUCKET.bit_length() - 1, max_tokens.bit_length()) if 1 << i < max_tokens]
    return sizes + [max_tokens]


def token_bucket(num_tokens: int, buckets: list[int]) -> int | None:
    """The smallest bucket that holds ``num_tokens`` tokens, None when none does."""
    return next((b for b in buckets if b >= num_tokens), None)


def idle_tokens(num_tokens: int, max_blocks: int, num_prev: int) -> StepBatch:
    """A step of ``num_tokens`` padding tokens in no sequence: the capture input."""
    return StepBatch.pack(dict(
        input_ids=np.zeros(num_tokens), positions=np.zeros(num_tokens), slot_mapping=np.full(num_tokens, -1),
        last_index=np.zeros(0), cu_seqlens_q=np.zeros(1), seq_lens=np.zeros(0), block_tables=np.zeros((0, max_blocks)),
    ), max_q_len=2, num_prev=num_prev)


class _Bucket:
    """The graphs of one token bucket and the static tensors between them."""

    def __init__(self, tokens: int):
        self.tokens = tokens
        self.graphs: list = []
        self.queries: list[torch.Tensor] = []    # layer i's q, made by graph i
        self.residual: torch.Tensor | None = None
        self.attn: torch.Tensor | None = None    # the eager attention's output, read by graphs 1..L
        self.hidden: torch.Tensor | None = None  # the last graph's output: every token, normalised


class PiecewiseGraphs:
    """One rank's piecewise graphs (see the module). ``new_graph(replay_eagerly)`` makes an empty
    device-API graph on the rank's stream (as for :class:`.graphs.DecodeGraphs`); ``model`` is the
    rank's ``LlamaRank``; ``io`` its :class:`~anydev.core.rank.step_io.StepIO`; ``phase`` times the
    captures' parts (as for :class:`.graphs.DecodeGraphs`). Call on the rank's thread, inside its
    ``torch_stream()``."""

    def __init__(self, rank: int, new_graph: Callable, model, io, max_blocks: int, share_pool_with=None,
                 phase: Callable[[str], ContextManager] | None = None):
        self.rank = rank
        self.phase = phase
        self.model = model
        self.max_blocks = max_blocks
        self.captures = 0
        self._new_graph = new_graph
        self._io = io
        self._pool_owner = share_pool_with
        self._buckets: dict[int, _Bucket] = {}

    @property
    def buckets(self) -> list[int]:
        return sorted(self._buckets)

    @torch.inference_mode()
    def capture_all(self, buckets: list[int]) -> None:
        """Capture every bucket, the largest first."""
        for tokens in sorted(buckets, reverse=True):
            self.capture_bucket(tokens)

    def has(self, tokens: int) -> bool:
        """Whether the bucket of ``tokens`` tokens is captured."""
        return tokens in self._buckets

    @torch.inference_mode()
    def capture_bucket(self, tokens: int) -> None:
        """Capture the bucket of ``tokens`` tokens (overwrites the input buffer: put the step after)."""
        model, bucket = self.model, _Bucket(tokens)
        static = self._io.put(idle_tokens(tokens, self.max_blocks, self._io.num_prev))
        layers = len(model.layers)
        heads = model.shard.num_heads * model.shard.head_dim
        self._buckets[tokens] = bucket      # (so that close() frees its graphs even if a capture fails)
        q, bucket.residual = self._capture(bucket, 0, lambda: model.first_piece(static))
        bucket.queries.append(q)
        bucket.attn = torch.zeros((tokens, heads), dtype=q.dtype, device=q.device)
        for i in range(1, layers):
            bucket.queries.append(self._capture(bucket, i, lambda i=i: (
                model.middle_piece(i, bucket.attn, bucket.residual, static),))[0])
        bucket.hidden = self._capture(bucket, layers, lambda: (model.last_piece(bucket.attn, bucket.residual),))[0]

    def _capture(self, bucket: _Bucket, piece: int, run: Callable[[], tuple]) -> tuple:
        """Capture ``run`` as the bucket's next graph; returns its outputs (static)."""
        graph, outputs = capture_graph(self._new_graph, run, self._pool_owner,
                                       f"rank {self.rank}: piece {piece} of the {bucket.tokens}-token step", self.phase)
        self.captures += 1
        self._pool_owner = self._pool_owner or graph
        bucket.graphs.append(graph)
        return outputs

    @torch.inference_mode()
    def run(self, step: StepBatch) -> torch.Tensor:
        """Logits [B, vocab] of ``step``, padded to a bucket and already in the input buffer
        (``io.put``): the pieces replayed in turn, each layer's attention run eagerly between them."""
        bucket = self._buckets.get(step.T)
        if bucket is None or len(bucket.graphs) != len(self.model.layers) + 1 or step.real_tokens is None \
                or step.is_decode:
            raise GraphReplayError(f"rank {self.rank}: no piecewise graphs for a step of {step.T} tokens "
                                   f"(captured: {self.buckets})")
        model, real = self.model, step.real_tokens
        attn = bucket.attn[:real]
        for i, graph in enumerate(bucket.graphs[:-1]):
            graph.replay()
            model.attend(i, bucket.queries[i][:real], step, out=attn)
        bucket.graphs[-1].replay()
        return model.logits(bucket.hidden[:real].index_select(0, step.last_index))

    def close(self) -> None:
        """Release every graph; the first failure is raised after all were tried."""
        graphs = [g for bucket in self._buckets.values() for g in bucket.graphs]
        self._buckets = {}
        close_graphs(graphs)
