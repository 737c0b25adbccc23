"""quantized_embedding (contract 1.9, see ``anydev.plugin_api.kernels``): the rows of a quantized token
table looked up and dequantized in one launch, by the linear kernel family's tiles. A program writes 256
values of one row: one super-block of ``q4_k``/``q6_k``, eight 32-value blocks of the others, or 256
one-byte values of ``int8``/``fp8_e4m3`` times the row's scale."""
from __future__ import annotations

import torch

from anydev.plugin_api.errors import InvalidArgumentError
from anydev.plugin_api.weight_formats import CHANNEL_FORMATS, check_weight, row_bytes

from ._common import tl, triton
from ._gguf_tiles import block32_values, k_quant_tile
from ._weight_tiles import CODES, weight_tile

#: The values one program writes: a k-quant super-block (and eight 32-value blocks).
VALUES = 256


@triton.jit
def _embedding_kernel(ids_ptr, w_ptr, scales_ptr, out_ptr, N, K, ROW_BYTES, FORMAT: tl.constexpr):
    t, kb = tl.program_id(0), tl.program_id(1)
    n = tl.load(ids_ptr + t).to(tl.int64) + tl.zeros([1], dtype=tl.int64)        # [1]: the row
    k = kb.to(tl.int64) * 256 + tl.arange(0, 256)
    if FORMAT == 6 or FORMAT == 7:                                                   # q4_k, q6_k (CODES)
        values = tl.reshape(k_quant_tile(w_ptr, n, kb, N, ROW_BYTES, FORMAT, 1), (256,))
    elif FORMAT == 3 or FORMAT == 4 or FORMAT == 5:                                  # q8_0, q4_0, q4_1
        values = tl.reshape(block32_values(w_ptr, n, kb * 256, N, K, ROW_BYTES, FORMAT, 1, 8), (256,))
    else:                                                                            # int8, fp8_e4m3
        stored = tl.reshape(weight_tile(w_ptr, n[None, :], k[:, None], N, K, FORMAT), (256,))
        values = stored * tl.load(scales_ptr + n)
    tl.store(out_ptr + t.to(tl.int64) * K + k, values.to(out_ptr.dtype.element_ty), mask=k < K)


def quantized_embedding(ids: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, weight_format: str,
                        hidden: int, dtype: torch.dtype) -> torch.Tensor:
    check_weight(weight, scales, weight_format, hidden)
    if ids.dim() != 1 or ids.dtype != torch.int64:
        raise InvalidArgumentError(f"ids must be [T] int64, got {ids.dtype} {tuple(ids.shape)}")
    out = torch.empty((ids.shape[0], hidden), dtype=dtype, device=weight.device)
    if ids.shape[0] == 0 or hidden == 0:
        return out
    grid = (ids.shape[0], triton.cdiv(hidden, VALUES))
    _embedding_kernel[grid](ids, weight, scales if weight_format in CHANNEL_FORMATS else weight, out,
                            weight.shape[0], hidden, row_bytes(weight_format, hidden), FORMAT=CODES[weight_format])
    return out
