"""The quantized weight formats of contract 1.5 (anydev.plugin_api.weight_formats): the torch
dequantizers read GGUF blocks exactly as the ``gguf`` package's numpy ones do (bytes written by gguf's
quantizers and by tests/support/kquants.py), the per-channel quantizer's round trip, the reference
``quantized_linear`` is ``x @ dequantize(W).T``, and malformed weights are refused saying why."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from anydev.plugin_api import InvalidArgumentError
from anydev.plugin_api import kernels as K
from anydev.plugin_api.weight_formats import (BLOCK_FORMATS, check_weight, dequantize, quantize_per_channel, row_bytes,
                                             split_planes, split_rows)

from kquants import quantize_q4_k, quantize_q6_k


def gguf_bytes(weight_format: str, rows: np.ndarray) -> np.ndarray:
    """``rows`` quantized as a GGUF file stores them, uint8 [N, row bytes]."""
    if weight_format == "q4_k":
        return quantize_q4_k(rows)
    if weight_format == "q6_k":
        return quantize_q6_k(rows)
    return quants.quantize(rows, GGMLQuantizationType[weight_format.upper()])


@pytest.mark.parametrize("weight_format", sorted(BLOCK_FORMATS))
def test_dequantize_reads_gguf_blocks_as_the_gguf_package_does(weight_format):
    rows = np.random.default_rng(0).standard_normal((6, 768)).astype(np.float32)
    stored = gguf_bytes(weight_format, rows)
    assert stored.shape == (6, row_bytes(weight_format, 768))
    want = quants.dequantize(stored, GGMLQuantizationType[weight_format.upper()])
    got = dequantize(torch.from_numpy(stored), None, weight_format, 768).numpy()
    np.testing.assert_array_equal(got, want)
    assert np.abs(got - rows).max() < 0.5          # and the bytes do hold the rows, roughly


def test_q8_0_split_rows_hold_the_blocks_codes_then_their_scales_and_the_same_values():
    """Each row: its 768 codes in input order, then its 24 float16 scales; the values (and any rows of
    the weight) dequantize exactly as the q8_0 blocks they came from."""
    rows = np.random.default_rng(4).standard_normal((6, 768)).astype(np.float32)
    stored = torch.from_numpy(gguf_bytes("q8_0", rows))
    split = split_rows(stored, "q8_0_split", 768)
    assert split.shape == stored.shape == (6, row_bytes("q8_0_split", 768)) and split.dtype == torch.uint8
    blocks = stored.view(6, 24, 34)
    codes, scales = split_planes(split, "q8_0_split", 768)
    assert torch.equal(codes, blocks[:, :, 2:].reshape(6, 768).view(torch.int8))
    assert torch.equal(scales, blocks[:, :, :2].reshape(6, 48).view(torch.float16))
    assert torch.equal(dequantize(split, None, "q8_0_split", 768), dequantize(stored, None, "q8_0", 768))
    assert torch.equal(dequantize(split[2:5], None, "q8_0_split", 768), dequantize(stored[2:5], None, "q8_0", 768))
    assert not torch.equal(split, stored)


@pytest.mark.parametrize("weight_format,bound", [("int8", 1 / 254), ("fp8_e4m3", 1 / 16)])
def test_per_channel_quantization_round_trip_is_within_half_a_step_of_each_rows_largest_value(weight_format, bound):
    weight = torch.randn(5, 64, generator=torch.Generator().manual_seed(1)) * torch.tensor([1e-3, 1, 10, 100, 0.5])[:, None]
    q, scales = quantize_per_channel(weight, weight_format)
    assert q.dtype == {"int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}[weight_format] and scales.shape == (5,)
    error = (dequantize(q, scales, weight_format, 64) - weight).abs().amax(dim=1)
    assert torch.all(error <= bound * weight.abs().amax(dim=1) * 1.01), error


def test_the_reference_quantized_linear_is_x_times_the_dequantized_matrix():
    rows = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32)
    stored = torch.from_numpy(gguf_bytes("q4_k", rows))
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(3))
    want = x @ torch.from_numpy(quants.dequantize(stored.numpy(), GGMLQuantizationType.Q4_K)).T
    torch.testing.assert_close(K.quantized_linear(x, stored, None, "q4_k"), want)
    assert K.quantized_linear(x.bfloat16(), stored, None, "q4_k").dtype == torch.bfloat16


def test_malformed_weights_are_refused_saying_what_is_expected():
    q, scales = quantize_per_channel(torch.randn(4, 32), "int8")
    with pytest.raises(InvalidArgumentError, match="unknown weight format 'q5_0'"):
        check_weight(q, scales, "q5_0", 32)
    with pytest.raises(InvalidArgumentError, match=r"scales must be float32 \[4\]"):
        check_weight(q, scales[:3], "int8", 32)
    with pytest.raises(InvalidArgumentError, match=r"q4_k weight of 256 inputs: expected a contiguous torch.uint8 \[N, 144\]"):
        check_weight(torch.zeros(2, 150, dtype=torch.uint8), None, "q4_k", 256)
    with pytest.raises(InvalidArgumentError, match="not a multiple of its 256-value blocks"):
        row_bytes("q6_k", 300)
    with pytest.raises(InvalidArgumentError, match="scales are inside the blocks"):
        check_weight(torch.zeros(2, 34, dtype=torch.uint8), torch.ones(2), "q8_0", 32)


def test_q6_k_split_rows_hold_the_blocks_values_in_their_planes():
    """The planes' codes are the blocks' 6-bit codes in value order (low nibbles of values i and i + 8
    of each 16 in one byte, top bits four values a byte), then the group scales and d; the values
    (and any rows) dequantize exactly as the q6_k blocks they came from."""
    rows = np.random.default_rng(5).standard_normal((5, 512)).astype(np.float32)
    stored = torch.from_numpy(gguf_bytes("q6_k", rows))
    split = split_rows(stored, "q6_k_split", 512)
    assert split.shape == stored.shape and not torch.equal(split, stored)
    blocks = stored.view(5, 2, 210)
    codes, scales, d = split_planes(split, "q6_k_split", 512)
    want = dequantize(stored, None, "q6_k", 512)
    assert torch.equal((codes.float() - 32).view(5, 32, 16) * (scales.float() * d.float().repeat_interleave(16, 1))[:, :, None],
                       want.view(5, 32, 16))
    assert torch.equal(scales, blocks[:, :, 192:208].reshape(5, 32).view(torch.int8))
    assert torch.equal(d, blocks[:, :, 208:].reshape(5, 4).view(torch.float16))
    assert torch.equal(split[:, :8], ((codes[:, :8] & 15) | ((codes[:, 8:16] & 15) << 4)).to(torch.uint8))
    assert torch.equal(dequantize(split, None, "q6_k_split", 512), want)
    assert torch.equal(dequantize(split[1:4], None, "q6_k_split", 512), want[1:4])
