"""A serial engine init, outside the engine: the control that the parallel-init checks tell apart
from parallel init and the baseline that ``benchmarks/init_bench.py`` measures: ranks initialised one
after another (:class:`SerialExecutor`) and the KV cache zeroed from host zeros with a synchronize
after every layer (:class:`HostZeroWorker`).

Each half goes in through the engine's extension points: the executor by name once registered
(``register_executor(SerialExecutor)``, then ``EngineConfig(executor="serial")``), the worker as
``EngineConfig(worker_cls=HOST_ZERO_WORKER)``.
"""
from __future__ import annotations

import numpy as np

from anydev.core.executors.threads import ThreadExecutor
from anydev.core.rank.rank_worker import RankWorker


class SerialExecutor(ThreadExecutor):
    """The threads executor, each rank's init run alone, one rank after another."""

    name = "serial"

    def init_ranks(self, workers: list, cancel) -> None:
        """Rank r's init starts once rank r - 1's ended; after a failure the later ranks never start
        (their workers hold nothing yet: no thread, no device memory)."""
        self.workers = []
        for worker in workers:
            self.workers.append(worker)
            self.wait_init([worker.submit(worker.init)], cancel)


class HostZeroWorker(RankWorker):
    """A RankWorker that zeroes its KV cache by copying a host buffer of zeros into each layer and
    waiting after every layer."""

    def zero_kv_cache(self) -> None:
        layout, buffer = self.kv.layout, self.kv.buffer
        zeros = np.zeros(layout.layer_bytes, dtype=np.uint8)
        for layer in range(layout.num_layers):
            self.stream.memcpy_async(buffer, zeros, layout.layer_bytes, dst_offset=layer * layout.layer_bytes)
            self.stream.synchronize()


HOST_ZERO_WORKER = f"{__name__}:{HostZeroWorker.__qualname__}"
