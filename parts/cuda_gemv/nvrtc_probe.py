"""Session 33: whether the GPU machine can compile parts/cuda_gemv/gemv.cu at run time with nvrtc (what a
kernel of the nvidia backend's own would do on a user's machine, where no nvcc is promised), and
whether the cubin it makes computes what the nvcc-built one does. Prints where libnvrtc was found,
the compile log, and the largest difference between the two cubins' q4_k outputs on one GEMM.

    python parts/cuda_gemv/nvrtc_probe.py --cubin .cubin/gemv.cubin
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Driver                                                       # noqa: E402


def find_nvrtc() -> str:
    """libnvrtc from torch's CUDA wheels, else the CUDA toolkit's."""
    places = []
    try:
        import nvidia
        places += [os.path.join(p, "cu13", "lib") for p in nvidia.__path__]
        places += [os.path.join(p, "cuda_nvrtc", "lib") for p in nvidia.__path__]
    except ImportError:
        pass
    places += ["/usr/local/cuda/lib64"]
    for place in places:
        found = sorted(glob.glob(os.path.join(place, "libnvrtc.so*")))
        found = [f for f in found if "builtins" not in f]
        if found:
            return found[0]
    raise SystemExit(f"no libnvrtc in {places}")


def include_dirs() -> list[str]:
    """Folders that may hold cuda_fp16.h / cuda_bf16.h (when nvrtc's built-in headers lack them)."""
    places = ["/usr/local/cuda/include"]
    try:
        import nvidia
        for root in nvidia.__path__:
            places += glob.glob(os.path.join(root, "*", "include"))
    except ImportError:
        pass
    return [p for p in places if os.path.exists(os.path.join(p, "cuda_fp16.h"))]


def compile_cubin(path: str, source: bytes, arch: str) -> bytes:
    nvrtc = ctypes.CDLL(path)
    prog = ctypes.c_void_p()
    status = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source, b"gemv.cu", 0, None, None)
    if status:
        raise SystemExit(f"nvrtcCreateProgram: {status}")
    options = [f"--gpu-architecture={arch}".encode(), b"--maxrregcount=128"]
    options += [f"--include-path={p}".encode() for p in include_dirs()]
    print("nvrtc options:", b" ".join(options).decode())
    status = nvrtc.nvrtcCompileProgram(prog, len(options), (ctypes.c_char_p * len(options))(*options))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    print("compile log:", log.value.decode(errors="replace").strip() or "(empty)")
    if status:
        raise SystemExit(f"nvrtcCompileProgram: {status}")
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin.raw


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cubin", required=True, help="the nvcc-built cubin, to compare with")
    args = p.parse_args()
    torch.empty(1, device="cuda")
    path = find_nvrtc()
    print("libnvrtc:", path)
    major, minor = torch.cuda.get_device_capability()
    runtime = compile_cubin(path, (Path(__file__).resolve().parent / "gemv.cu").read_bytes(), f"sm_{major}{minor}")
    print(f"nvrtc cubin: {len(runtime)} bytes")
    from linear_bench import make_weight
    N, K = 4096, 4096
    weight, _ = make_weight("q4_k", N, K, torch.device("cuda"))
    x = torch.randn(1, K, device="cuda").bfloat16()
    outs = []
    for image in (runtime, Path(args.cubin).read_bytes()):
        out = torch.empty(N, dtype=torch.bfloat16, device="cuda")
        Driver(image).launch("q4_k", "r2", weight, x, out, N, K)
        torch.cuda.synchronize()
        outs.append(out.float())
    print(f"nvrtc against nvcc cubin, q4_k r2 {N}x{K}: max |difference| {(outs[0] - outs[1]).abs().max().item():.3e}")


if __name__ == "__main__":
    main()
