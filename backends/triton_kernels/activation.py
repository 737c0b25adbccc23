"""silu_and_mul (see ``anydev.plugin_api.kernels.silu_and_mul``), with HF's rounding: silu rounded to
the dtype, then the multiply rounded."""
from __future__ import annotations

import torch

from ._common import check_last_dim_contiguous, pdl, pdl_wait, tl, triton

BLOCK = 1024


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, I, stride_x, stride_o, BLOCK: tl.constexpr, USE_PDL: tl.constexpr = 0):
    pdl_wait(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < I
    gate = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + I + offs, mask=mask, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_o + offs, (silu * up).to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    check_last_dim_contiguous("x", x)
    T, two_i = x.shape
    I = two_i // 2
    out = torch.empty((T, I), dtype=x.dtype, device=x.device)
    if T and I:
        _silu_and_mul_kernel[(T, triton.cdiv(I, BLOCK))](x, out, I, x.stride(0), out.stride(0), BLOCK=BLOCK, num_warps=4,
                                                            **pdl(x.device))
    return out
