"""Weight prefetch into L2 (``ANYDEV_TRITON_PREFETCH``) is asked for only where the device has it (an
NVIDIA GPU of compute capability 9.0 or later), at the distance the variable names; every plan of the
linear family carries that distance, and a prefetching plan is refused elsewhere. (That the kernel
then issues the prefetches, and only then, is checked by its sm_90 compile.)"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from anydev.backends.triton_kernels import triton_importable

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")


@pytest.fixture
def common():
    from anydev.backends.triton_kernels import _common

    def clear():
        _common.prefetch_distance.cache_clear()
        _common.bulk_prefetch.cache_clear()

    clear()
    yield _common
    clear()


def test_no_prefetch_on_cpu_tensors_even_when_asked(common, monkeypatch):
    monkeypatch.setenv(common.PREFETCH_ENV, "2")
    assert common.prefetch_distance(torch.device("cpu")) == 0


def test_the_distance_asked_for_on_a_capability_9_cuda_device_only(common, monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for value, want in (("0", 0), ("2", 2), ("16", 16)):
        common.prefetch_distance.cache_clear()
        monkeypatch.setenv(common.PREFETCH_ENV, value)
        assert common.prefetch_distance(torch.device("cuda", 0)) == want, value
    monkeypatch.delenv(common.PREFETCH_ENV)
    common.prefetch_distance.cache_clear()
    assert common.prefetch_distance(torch.device("cuda", 0)) == common.DEFAULT_PREFETCH
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    common.prefetch_distance.cache_clear()
    common.bulk_prefetch.cache_clear()
    monkeypatch.setenv(common.PREFETCH_ENV, "2")
    assert common.prefetch_distance(torch.device("cuda", 0)) == 0


@pytest.mark.parametrize("value", ["yes", "-1", "17", ""])
def test_a_distance_that_is_not_0_to_16_is_refused_naming_the_variable(common, monkeypatch, value):
    from anydev.plugin_api.errors import InvalidArgumentError

    monkeypatch.setenv(common.PREFETCH_ENV, value)
    with pytest.raises(InvalidArgumentError, match="ANYDEV_TRITON_PREFETCH"):
        common.prefetch_distance(torch.device("cpu"))


def test_every_plan_carries_the_distance_and_nothing_else_changes(monkeypatch):
    from anydev.backends.triton_kernels import linear

    cpu = torch.device("cpu")
    calls = [(1, 4096, 4096, "q8_0", torch.bfloat16), (1, 512, 1024, "dense", torch.bfloat16),
             (32, 512, 1024, "q4_k", torch.bfloat16), (1, 512, 1024, "int8", torch.float16)]
    plain = {call: linear.plan(*call[:4], cpu, call[4]) for call in calls}
    assert all(p.prefetch == 0 for p in plain.values())
    monkeypatch.setattr(linear, "prefetch_distance", lambda device: 3)
    for call, p in plain.items():
        assert linear.plan(*call[:4], cpu, call[4]) == dataclasses.replace(p, prefetch=3), call


def test_a_prefetching_plan_is_refused_where_the_device_cannot():
    from anydev.backends.triton_kernels import linear
    from anydev.plugin_api.errors import InvalidArgumentError

    x, w = torch.randn(1, 256), torch.randn(64, 256)
    p = dataclasses.replace(linear.plan(1, 64, 256, "dense", x.device, x.dtype), prefetch=2)
    with pytest.raises(InvalidArgumentError, match="compute capability 9.0"):
        linear.run(x, w, None, "dense", p)


def test_one_piece_of_a_row_a_thread_and_the_format_s_block_units():
    from anydev.backends.triton_kernels import linear

    gemv = linear.Plan.sliced(1, 4096, 1, 16, 512, 1, num_warps=8, prefetch=2)
    chunks = linear.Plan.sliced(1, 4096, 1, 128, 256, 1, num_warps=4, int_dot=True, int_chunks=True, prefetch=1)
    assert linear._prefetch_args(gemv, "dense") == {"PREFETCH": 2, "VALUES": 1, "UNITS": 1, "PARTS": 16}
    assert linear._prefetch_args(chunks, "q8_0") == {"PREFETCH": 1, "VALUES": 32, "UNITS": 34, "PARTS": 1}
    assert linear._prefetch_args(dataclasses.replace(gemv, prefetch=0), "dense") == {}
