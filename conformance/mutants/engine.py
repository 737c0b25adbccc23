"""Mutants that the engine-level checks (parallel init, inference) must catch."""
from __future__ import annotations

from anydev.backends.cpu.runtime import CpuRuntime

from . import mutant

KV_SIZED = 32 << 20  # the conformance engine's KV caches are at least 64 MiB per rank


@mutant("kv-never-zeroed", checks=["test_parallel_init.py::test_kv_cache_reads_back_as_zeros"])
class LargeZeroMemsetsDropped(CpuRuntime):
    """memset_async of zeros over 32 MiB or more does nothing, so a KV cache is never zeroed."""

    def memset_async(self, ptr, value, nbytes, stream):
        super().memset_async(ptr, value, 0 if value == 0 and nbytes >= KV_SIZED else nbytes, stream)
