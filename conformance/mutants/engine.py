"""Mutants of what an engine relies on: a zeroed KV cache, device graphs that replay."""
from __future__ import annotations

from anydev.backends.cpu.graphs import CpuGraph
from anydev.backends.cpu.runtime import CpuGraphRuntime, CpuRuntime

from . import mutant

KV_SIZED = 32 << 20  # the conformance engine's KV caches are at least 64 MiB per rank


@mutant("kv-never-zeroed", checks=["test_parallel_init.py::test_kv_cache_reads_back_as_zeros"])
class LargeZeroMemsetsDropped(CpuRuntime):
    """memset_async of zeros over 32 MiB or more does nothing, so a KV cache is never zeroed."""

    def memset_async(self, ptr, value, nbytes, stream):
        super().memset_async(ptr, value, 0 if value == 0 and nbytes >= KV_SIZED else nbytes, stream)


class _FirstReplayOnly(CpuGraph):
    def replay(self):
        if not getattr(self, "_replayed", False):
            self._replayed = True
            super().replay()


@mutant("graph-replay-stale", checks=["test_graphs.py"])
class GraphReplayIgnoresChangedInputs(CpuGraphRuntime):
    """A device graph whose replay ignores changed inputs: only the first replay computes, later
    ones leave the first result in place."""

    def torch_graph(self, stream, index):
        self._check_device(index)
        return _FirstReplayOnly(self, stream)
