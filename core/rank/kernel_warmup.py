"""The kernels a rank's steps need, compiled while its weights load (``EngineConfig.warm_kernels``).

The first run of a step compiles its kernels (Triton: one compilation per kernel and specialisation,
seconds on a fresh machine). The weights' device buffer exists before a byte of them is read, so a
rank can run its own model over that buffer, on padding steps of every graph bucket and token bucket
(the steps the graph captures run: same kernels, same shapes), while the weights are still being
copied in: the compilations overlap the load. The outputs are read from half-loaded weights and
dropped; nothing is written that a real step reads (padding rows write no KV and attend nothing, and
the warm-up has KV pages of its own). Each step runs in a thread pool of its own, on a stream of its
own (the kernels' scratch counters are per thread and per stream, so none is shared with the rank's
stream), and the rank waits for all of them before its KV cache is sized (:meth:`KernelWarmup.wait`).
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from anydev.plugin_api import AnydevError

from ..models.fusion import fused_views
from ..models.registry import family_of
from .graphs import idle_step
from .kv_cache import KVLayout, PagedKVCache
from .piecewise import idle_tokens
from .step_io import StepIO

#: Threads compiling at once on one rank (each runs one padding step; Triton's compiler and ptxas run
#: beside the weights' copies).
WARMUP_THREADS = 4


class KernelWarmupError(AnydevError):
    """Running a padding step to compile its kernels failed; the message names the step and the way
    out (``EngineConfig(warm_kernels=False)``, no ``--kernel-warmup``: the kernels then compile at
    the first capture or step, as a real step would run them)."""


def warmup_steps(setup, buckets: tuple[int, ...], token_buckets: tuple[int, ...]) -> list[tuple[str, object]]:
    """(what, padding step) for each decode bucket then each token bucket, the largest first."""
    steps = [(f"the decode step of {rows} sequence(s)", idle_step(rows, setup.max_blocks, setup.max_step_rows))
             for rows in sorted(buckets, reverse=True)]
    steps += [(f"the {tokens}-token step", idle_tokens(tokens, setup.max_blocks, setup.max_step_rows))
              for tokens in sorted(token_buckets, reverse=True)]
    return steps


class KernelWarmup:
    """Runs each of ``steps`` (see :func:`warmup_steps`) through the model of rank ``setup`` over
    ``weights`` (a :class:`~anydev.core.loading.weights.RankWeights`, still loading) in a thread pool;
    :meth:`wait` joins them. ``rotary`` is the rank's cos/sin table; ``stage`` its pipeline stage."""

    def __init__(self, setup, weights, stage, rotary: torch.Tensor, steps: list[tuple[str, object]],
                 threads: int = WARMUP_THREADS):
        self.setup = setup
        self.steps_run: list[int] = []      # the bucket sizes run, in the order they finished
        config = setup.checkpoint.config
        layout = KVLayout(len(stage.layers), 1, setup.kv.block_size, setup.shard.num_kv_heads, config.head_dim,
                          setup.dtype)
        self._kv = PagedKVCache(setup.device, layout)   # one block: padding steps read and write none
        self._family = family_of(config)
        self._weights = {**weights.tensors, **fused_views(weights, stage.layers, self._family.fusions)}
        self._rotary, self._stage = rotary, stage
        self._pool = ThreadPoolExecutor(max(1, min(threads, len(steps))),
                                        thread_name_prefix=f"anydev-rank{setup.rank}-warmup")
        self._futures: list[tuple[str, Future]] = [(what, self._pool.submit(self._run, step)) for what, step in steps]

    def _run(self, step) -> None:
        s = self.setup
        s.device.set_current()
        stream = s.device.create_stream()
        io = None
        try:
            io = StepIO(s.device, stream, s.max_step_rows, step.packed.numel())
            kv_layers = [self._kv.layer(i) for i in range(len(self._stage.layers))]
            # the collectives skipped: the ranks' warm-ups do not line up, and partial sums run the same kernels
            tp = s.shard.tp > 1
            model = self._family.rank_class(s.checkpoint.config, s.shard, self._weights, kv_layers, self._rotary,
                                            s.kernels, s.kv.block_size, _skip if tp else None,
                                            _skip if tp else None, self._stage, dtype=s.dtype)
            with torch.inference_mode(), stream.torch_stream():
                model.forward(io.put(step))
            stream.synchronize()
            self.steps_run.append(step.num_tokens)
        finally:
            if io is not None:
                io.close()
            stream.close()

    def wait(self) -> None:
        """Wait for every step; raises :class:`KernelWarmupError` naming the first that failed."""
        try:
            for what, future in self._futures:
                exc = future.exception()
                if exc is not None:
                    raise KernelWarmupError(
                        f"rank {self.setup.rank}: compiling the kernels of {what} failed: {type(exc).__name__}: "
                        f"{exc}. Start without the warm-up (leave out --kernel-warmup) "
                        f"(EngineConfig(warm_kernels=False))") from exc
        finally:
            self.close()
        # the activations the steps left in torch's allocator go back to the device before the KV
        # cache is sized from its free memory (no rank captures yet: nothing is in a capture)
        accelerator = getattr(torch, self.setup.device.torch_device.type, None)
        if hasattr(accelerator, "empty_cache"):
            accelerator.empty_cache()

    def close(self) -> None:
        """Wait for the threads and free the warm-up's KV pages (idempotent)."""
        self._pool.shutdown(wait=True)
        if self._kv is not None:
            self._kv.close()
            self._kv = None
        self._weights = {}


def _skip(*tensors: torch.Tensor) -> None:
    """A collective left out (the warm-up's all-reduce and all-gather)."""
