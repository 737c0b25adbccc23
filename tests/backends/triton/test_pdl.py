"""Programmatic dependent launch (``ANYDEV_TRITON_PDL``) is asked for only where it exists: an NVIDIA
GPU of compute capability 9.0 or later, in the mode the variable names, mode 3 where it is unset."""
from __future__ import annotations

import pytest
import torch

from anydev.backends.triton_kernels import triton_importable

pytestmark = pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")


def test_pdl_stays_off_on_cpu_tensors_even_when_asked(monkeypatch):
    from anydev.backends.triton_kernels import _common

    _common._pdl_mode.cache_clear()
    monkeypatch.setenv(_common.PDL_ENV, "1")
    try:
        assert _common.pdl(torch.device("cpu")) == {"USE_PDL": 0}
    finally:
        _common._pdl_mode.cache_clear()


def test_pdl_is_on_for_a_capability_9_cuda_device_in_the_mode_asked_for(monkeypatch):
    from anydev.backends.triton_kernels import _common

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(_common, "_triton_has_pdl", lambda: True)
    for value, want in (("1", {"USE_PDL": 1, "launch_pdl": True}), ("2", {"USE_PDL": 2, "launch_pdl": True}),
                        ("3", {"USE_PDL": 3, "launch_pdl": True}), ("0", {"USE_PDL": 0})):
        _common._pdl_mode.cache_clear()
        monkeypatch.setenv(_common.PDL_ENV, value)
        assert _common.pdl(torch.device("cuda", 0)) == want, value
    _common._pdl_mode.cache_clear()
    monkeypatch.delenv(_common.PDL_ENV)
    assert _common.pdl(torch.device("cuda", 0)) == {"USE_PDL": 3, "launch_pdl": True}    # unset: the default
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    for value in ("1", None):
        _common._pdl_mode.cache_clear()
        if value is None:
            monkeypatch.delenv(_common.PDL_ENV)
        else:
            monkeypatch.setenv(_common.PDL_ENV, value)
        assert _common.pdl(torch.device("cuda", 0)) == {"USE_PDL": 0}, value
    _common._pdl_mode.cache_clear()


def test_pdl_stays_off_on_cpu_tensors_by_default(monkeypatch):
    from anydev.backends.triton_kernels import _common

    _common._pdl_mode.cache_clear()
    monkeypatch.delenv(_common.PDL_ENV, raising=False)
    try:
        assert _common.pdl(torch.device("cpu")) == {"USE_PDL": 0}
    finally:
        _common._pdl_mode.cache_clear()


def test_an_unknown_pdl_mode_is_refused_naming_the_variable(monkeypatch):
    from anydev.backends.triton_kernels import _common
    from anydev.plugin_api.errors import InvalidArgumentError

    _common._pdl_mode.cache_clear()
    monkeypatch.setenv(_common.PDL_ENV, "yes")
    try:
        with pytest.raises(InvalidArgumentError, match="ANYDEV_TRITON_PDL"):
            _common.pdl(torch.device("cpu"))
    finally:
        _common._pdl_mode.cache_clear()


def test_a_linear_program_prefetches_its_first_tile_of_each_row():
    """``ANYDEV_TRITON_PDL=3``: the lines of each row's first ``block_k`` inputs, at most MAX_PREFETCH_LINES."""
    from anydev.backends.triton_kernels import linear
    from anydev.plugin_api.weight_formats import row_bytes

    q4_k = linear.Plan.sliced(1, 4096, 1, 64, 256, 2)          # 256 inputs: one 144-byte super-block
    assert linear._prefetch_lines(q4_k, row_bytes("q4_k", 4096), 1, 4096) == 2
    dense = linear.Plan.sliced(1, 4096, 1, 16, 512, 1)         # 512 bf16 inputs: 1,024 bytes
    assert linear._prefetch_lines(dense, 4096, 2, 4096) == 8
    wide = linear.Plan.sliced(1, 4096, 1, 16, 2048, 1)
    assert linear._prefetch_lines(wide, 4096, 2, 4096) == linear.MAX_PREFETCH_LINES


def test_a_triton_without_pdl_turns_the_default_off_and_refuses_an_asked_mode(monkeypatch):
    from anydev.backends.triton_kernels import _common
    from anydev.plugin_api.errors import NotSupportedError

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(_common, "_triton_has_pdl", lambda: False)
    try:
        _common._pdl_mode.cache_clear()
        monkeypatch.delenv(_common.PDL_ENV, raising=False)
        assert _common.pdl(torch.device("cuda", 0)) == {"USE_PDL": 0}
        _common._pdl_mode.cache_clear()
        monkeypatch.setenv(_common.PDL_ENV, "0")
        assert _common.pdl(torch.device("cuda", 0)) == {"USE_PDL": 0}
        _common._pdl_mode.cache_clear()
        monkeypatch.setenv(_common.PDL_ENV, "3")
        with pytest.raises(NotSupportedError, match="gdc_wait"):
            _common.pdl(torch.device("cuda", 0))
    finally:
        _common._pdl_mode.cache_clear()
