"""rms_norm and fused_add_rms_norm (see ``anydev.plugin_api.kernels``): one program per row, the row in
registers, float32 statistics, HF's rounding (normalise, round to the dtype, then the weight multiply)."""
from __future__ import annotations

import torch

from ._common import check_last_dim_contiguous, next_power_of_2, pdl, pdl_wait, tl, triton


@triton.jit
def _rms_norm_kernel(x_ptr, residual_ptr, out_ptr, weight_ptr, eps, N,
                     stride_x, stride_r, stride_o,
                     ADD_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, USE_PDL: tl.constexpr = 0):
    pdl_wait(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if ADD_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)   # rounded, as torch adds
        tl.store(residual_ptr + row * stride_r + offs, x, mask=mask)
    x32 = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=0) / N + eps)
    normed = (x32 * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(weight_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + offs, (w * normed).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(x, residual, out, weight, eps):
    T, N = x.shape
    if T == 0:
        return
    block = next_power_of_2(N)
    _rms_norm_kernel[(T,)](
        x, residual if residual is not None else x, out, weight, float(eps), N,
        x.stride(0), (residual if residual is not None else x).stride(0), out.stride(0),
        ADD_RESIDUAL=residual is not None, BLOCK=block,
        num_warps=min(max(block // 256, 1), 16), **pdl(x.device),
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_last_dim_contiguous("x", x)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    _launch(x, None, out, weight, eps)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    check_last_dim_contiguous("x", x)
    check_last_dim_contiguous("residual", residual)
    _launch(x, residual, x, weight, eps)
