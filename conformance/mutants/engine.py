"""Mutants of what an engine relies on: a zeroed KV cache, device graphs that replay."""
from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

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


@mutant("kv-memset-first-page", checks=["test_parallel_init.py::test_kv_cache_reads_back_as_zeros",
                                        "test_parallel_init.py::test_ready_only_after_device_work_finished"])
class KvMemsetFirstPageOnly(CpuRuntime):
    """memset_async writes only the first 4 KiB page of the range, run on the engine's KV-cache zero
    checks (which the cpu backend's fresh zero pages would blind unless they dirty the cache first)."""

    def memset_async(self, ptr, value, nbytes, stream):
        super().memset_async(ptr, value, min(nbytes, 4096), stream)


class _RunNow(TorchDispatchMode):
    """Inside a capture: runs dtype conversions and clones at once, unrecorded."""

    FROZEN = {torch.ops.aten._to_copy.default, torch.ops.aten.clone.default}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.FROZEN:
            with _disable_current_modes():
                return func(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


class _ConversionsFrozen(CpuGraph):
    @contextlib.contextmanager
    def capture(self, share_memory_with=None):
        with super().capture(share_memory_with), _RunNow():
            yield


@mutant("graph-freezes-conversions", checks=["test_graphs.py"])
class GraphFreezesConversions(CpuGraphRuntime):
    """A device graph that runs dtype conversions and copies (clone) at capture time instead of
    recording them: every replay reuses the values the capture saw."""

    def torch_graph(self, stream, index):
        self._check_device(index)
        return _ConversionsFrozen(self, stream)
