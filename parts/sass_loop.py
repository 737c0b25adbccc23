"""The sm_90 SASS of the linear kernel's batch-1 step, compiled on this CPU (Triton's compiler and the
ptxas and cuobjdump its wheel ships; no GPU): the main loop's instructions a thread, per weight value,
and by opcode. A static view of what a GEMV spends its issue slots on, between GPU calls.

    python parts/sass_loop.py q4_k --block-n 64 --block-k 256 --warps 4 --int-dot

Counts come from the local Triton, which may differ from the GPU machine's.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
from collections import Counter

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from anydev.backends.triton_kernels import linear
from anydev.backends.triton_kernels._weight_tiles import CODES

WEIGHT_TYPES = {"dense": "*bf16", "int8": "*i8", "fp8_e4m3": "*fp8e4nv"}
ADDRESS = re.compile(r"\s+/\*([0-9a-f]{4})\*/")


def compile_step(fmt: str, block_n: int, block_k: int, int_dot: bool, warps: int) -> str:
    """The SASS of ``_linear_kernel`` at batch 1 (``M`` the constant 1, no PDL) for these constants."""
    kernel = linear._linear_kernel
    signature = {"x_ptr": "*bf16", "w_ptr": WEIGHT_TYPES.get(fmt, "*u8"), "scales_ptr": "*fp32", "out_ptr": "*bf16",
                 "partial_ptr": "*fp32", "counters_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32",
                 "stride_xm": "i32", "ROW_BYTES": "i32", "K_PER_SPLIT": "i32"}
    constants = dict(FORMAT=CODES[fmt], CHANNEL_SCALES=fmt in ("int8", "fp8_e4m3"), BLOCK_M=1, BLOCK_N=block_n,
                     BLOCK_K=block_k, SLICES=4, PRECISION=None, UPCAST=False, INT_DOT=int_dot, INT_CHUNKS=False,
                     ASM=True, WEIGHTS_FIRST=False, USE_PDL=0, PREFETCH_LINES=4, M=1)
    signature.update({name: "constexpr" for name in constants})
    index = {name: i for i, name in enumerate(kernel.arg_names)}
    attrs = {(index[name],): [["tt.divisibility", 16]] for name, kind in signature.items()
             if kind != "constexpr" and name not in ("M", "N", "K", "stride_xm")}   # as Triton specializes them
    source = ASTSource(fn=kernel, signature=signature, constexprs={(index[k],): v for k, v in constants.items()},
                       attrs=attrs)
    cubin = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["cubin"]
    path = "/tmp/sass_loop.cubin"
    with open(path, "wb") as f:
        f.write(cubin)
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    return subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout


def main_loop(sass: str) -> list[str]:
    """The instructions between the last backward branch and its target (the K loop)."""
    code = [line for line in sass.splitlines() if ADDRESS.match(line)]
    address = lambda line: int(ADDRESS.match(line).group(1), 16)
    loop = None
    for line in code:
        branch = re.search(r"BRA\s+0x([0-9a-f]+)", line)
        if branch and int(branch.group(1), 16) < address(line):
            loop = (int(branch.group(1), 16), address(line))
    if loop is None:
        raise SystemExit("no loop found in the SASS")
    return [line for line in code if loop[0] <= address(line) <= loop[1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("format", choices=sorted(CODES))
    parser.add_argument("--block-n", type=int, default=32)
    parser.add_argument("--block-k", type=int, default=256)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--int-dot", action="store_true", help="the GGUF integer-dot step (dp4a)")
    args = parser.parse_args()
    body = main_loop(compile_step(args.format, args.block_n, args.block_k, args.int_dot, args.warps))
    values = args.block_n * args.block_k / (32 * args.warps)     # weight values a thread a step
    opcodes = Counter(re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9]+)", line).group(1) for line in body)
    print(f"{args.format} {'int-dot' if args.int_dot else 'float'} BLOCK_N {args.block_n} BLOCK_K {args.block_k} "
          f"{args.warps} warps: {len(body)} instructions a thread a step, {len(body) / values:.2f} a value")
    print("  " + ", ".join(f"{op} {count}" for op, count in opcodes.most_common()))


if __name__ == "__main__":
    main()
