"""Each native kernel of a backend beside its torch reference (and, for attention, beside the strongest
torch path), measured in one run on one device; prints times and ratios.

    python benchmarks/kernel_bench.py --device nvidia                 # the 1B Llama shape, bf16
    python benchmarks/kernel_bench.py --device nvidia --out results/kernels.json
    TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1 python benchmarks/kernel_bench.py --device cpu --tiny   # smoke run

Shapes: the 1B Llama (hidden 2048, MLP 8192, 32 query / 8 KV heads of 64, block size 16):
decode at batch 1 and 32 with contexts 256 and 4096, an 8192-token prefill, a mixed step's attention
(32 decodes of context 256 beside a 480-token chunk after 2048 cached tokens: the prefill kernel over
every row, against the engine's decode + prefill + cat), and the elementwise kernels at 32 and 8192
tokens. Columns: the native kernel, the contract's torch reference (float32 math,
gathers every page: the meaning, not a fast path), for rotary_write_kv the two native kernels it fuses,
and for attention the fastest torch alternative:
decode = gather the pages and run SDPA in the model dtype (the pre-1.2 engine), prefill = SDPA with
``is_causal`` on contiguous K/V (flash attention), which cannot read pages. ``ratio`` = other time /
native time (> 1: the native kernel is faster). ``max|diff|`` is native vs reference, a sanity check.
Times are medians of ``--reps`` runs of ``--iters`` calls each, after warm-up, with the device
synchronised around each run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from anydev.plugin_api import kernels as reference
from anydev.plugin_api import load_backend


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="nvidia")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tiny", action="store_true", help="small shapes (a smoke run, e.g. under Triton's interpreter)")
    p.add_argument("--out", help="write the rows as JSON here")
    return p.parse_args(argv)


class Timer:
    def __init__(self, torch_device, iters: int, reps: int):
        self.sync = getattr(torch, torch_device.type).synchronize if torch_device.type != "cpu" else (lambda: None)
        self.iters, self.reps = iters, reps

    def __call__(self, fn) -> float:
        """Median microseconds per call of ``fn``."""
        fn()
        self.sync()
        samples = []
        for _ in range(self.reps):
            start = time.perf_counter()
            for _ in range(self.iters):
                fn()
            self.sync()
            samples.append((time.perf_counter() - start) / self.iters * 1e6)
        return statistics.median(samples)


def paged(batch: int, context: int, kv: int, d: int, block_size: int, dtype, dev, gen):
    """K/V pages holding ``batch`` sequences of ``context`` tokens (pages shuffled), tables, lengths."""
    pages = -(-context // block_size)
    num_blocks = batch * pages
    k = torch.randn(num_blocks, block_size, kv, d, generator=gen).to(dtype).to(dev)
    v = torch.randn(num_blocks, block_size, kv, d, generator=gen).to(dtype).to(dev)
    tables = torch.randperm(num_blocks, generator=gen).view(batch, pages).to(torch.int32).to(dev)
    lens = torch.full((batch,), context, dtype=torch.int32, device=dev)
    return k, v, tables, lens


def gather_sdpa_decode(q, k_cache, v_cache, tables, lens, scale):
    """The pre-1.2 engine's decode attention: gather every page of each table, masked SDPA in the dtype."""
    B, H, D = q.shape
    _, bs, KV, _ = k_cache.shape
    L = tables.shape[1] * bs
    keys = k_cache[tables.long()].reshape(B, L, KV, D).transpose(1, 2)
    values = v_cache[tables.long()].reshape(B, L, KV, D).transpose(1, 2)
    mask = (torch.arange(L, device=q.device)[None] < lens[:, None])[:, None, None]
    return F.scaled_dot_product_attention(q[:, :, None], keys, values, attn_mask=mask, scale=scale,
                                          enable_gqa=H != KV)[:, :, 0]


def cases(args, dtype, dev, kernels):
    """(kernel, case, a function making the call's arguments, [(other path, its call)])."""
    gen = torch.Generator().manual_seed(0)
    H, KV, D, hidden, inter, bs = (8, 2, 64, 256, 512, 16) if args.tiny else (32, 8, 64, 2048, 8192, 16)
    scale = D ** -0.5
    decode = [(1, 64), (4, 300)] if args.tiny else [(1, 256), (1, 4096), (32, 256), (32, 4096)]
    for batch, context in decode:
        k, v, tables, lens = paged(batch, context, KV, D, bs, dtype, dev, gen)
        q = torch.randn(batch, H, D, generator=gen).to(dtype).to(dev)
        yield ("paged_decode_attention", f"batch {batch}, context {context}",
               lambda k=k, v=v, t=tables, n=lens, q=q: (q, k, v, t, n, scale),
               [("gather+sdpa", lambda k=k, v=v, t=tables, n=lens, q=q: gather_sdpa_decode(q, k, v, t, n, scale))])
    prompt = 200 if args.tiny else 8192
    k, v, tables, lens = paged(1, prompt, KV, D, bs, dtype, dev, gen)
    q = torch.randn(prompt, H, D, generator=gen).to(dtype).to(dev)
    cu = torch.tensor([0, prompt], dtype=torch.int32, device=dev)
    kc = k.view(-1, KV, D)[(tables[0].long()[:, None] * bs + torch.arange(bs, device=dev)).reshape(-1)]
    vc = v.view(-1, KV, D)[(tables[0].long()[:, None] * bs + torch.arange(bs, device=dev)).reshape(-1)]
    qt, kt, vt = q.transpose(0, 1)[None], kc.transpose(0, 1)[None], vc.transpose(0, 1)[None]
    yield ("paged_prefill_attention", f"one prompt of {prompt}",
           lambda: (q, k, v, cu, lens, tables, scale),
           [("sdpa causal (contiguous)", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=scale,
                                                                                 enable_gqa=True))])
    yield mixed_step_attention(args, dtype, dev, kernels, (H, KV, D, bs), gen)
    for T in ((4, 64) if args.tiny else (32, 8192)):
        key = torch.randn(T, KV, D, generator=gen).to(dtype).to(dev)
        slots = torch.randperm(T * 4, generator=gen)[:T].to(dev)
        kcache = torch.zeros(T, 4, KV, D, dtype=dtype, device=dev)
        vcache = torch.zeros_like(kcache)
        yield ("write_kv", f"{T} tokens", lambda key=key, s=slots, kc=kcache, vc=vcache: (key, key, kc, vc, s), [])
        x = torch.randn(T, hidden, generator=gen).to(dtype).to(dev)
        w = torch.rand(hidden, generator=gen).to(dtype).to(dev)
        yield ("rms_norm", f"{T} x {hidden}", lambda x=x, w=w: (x, w, 1e-5), [])
        r = torch.randn(T, hidden, generator=gen).to(dtype).to(dev)
        yield ("fused_add_rms_norm", f"{T} x {hidden}", lambda x=x, r=r, w=w: (x.clone(), r.clone(), w, 1e-5), [])
        cache = reference.cos_sin_cache(torch.rand(D // 2, generator=gen), 16384).to(dev)
        pos = torch.randint(0, 16384, (T,), generator=gen).to(dev)
        qkv = torch.randn(T, H + 2 * KV, D, generator=gen).to(dtype).to(dev)
        yield ("rotary_embedding", f"{T} tokens, {H}+{KV} heads",
               lambda p=pos, qkv=qkv, c=cache: (p, qkv[:, :H], qkv[:, H:H + KV], c), [])
        q, k, v = qkv[:, :H], qkv[:, H:H + KV], qkv[:, H + KV:]
        yield ("rotary_write_kv", f"{T} tokens, {H}+{KV} heads",
               lambda p=pos, q=q, k=k, v=v, s=slots, kc=kcache, vc=vcache, c=cache: (p, q, k, v, kc, vc, s, c),
               [("native rotary_embedding + write_kv",
                 lambda p=pos, q=q, k=k, v=v, s=slots, kc=kcache, vc=vcache, c=cache:
                 (kernels.rotary_embedding(p, q, k, c), kernels.write_kv(k, v, kc, vc, s)))])
        gu = torch.randn(T, 2 * inter, generator=gen).to(dtype).to(dev)
        yield ("silu_and_mul", f"{T} x {inter}", lambda gu=gu: (gu,), [])


def mixed_step_attention(args, dtype, dev, kernels, shape, gen):
    """A mixed step's attention (one layer): decodes beside a prompt chunk after a cached prefix, as
    one prefill call over every row, beside what the engine runs, the decode attention of the decodes,
    the prefill attention of the chunk and one op joining them (the row splits made beforehand, once a
    step in the engine): the device's side of whether a mixed step's rows could go through one call."""
    H, KV, D, bs = shape
    decodes, context, chunk, prefix = (4, 64, 60, 40) if args.tiny else (32, 256, 480, 2048)
    k, v, tables, lens = paged(decodes + 1, prefix + chunk, KV, D, bs, dtype, dev, gen)
    lens[:decodes] = context
    q = torch.randn(decodes + chunk, H, D, generator=gen).to(dtype).to(dev)
    cu = torch.cat((torch.arange(decodes + 1), torch.tensor([decodes + chunk]))).to(torch.int32).to(dev)
    out = torch.empty_like(q)
    scale = D ** -0.5
    parts = ((q[:decodes], tables[:decodes], lens[:decodes]), (q[decodes:], cu[decodes:] - decodes, lens[decodes:],
                                                               tables[decodes:]))

    def split():
        (dq, dt, dl), (pq, pc, pl, pt) = parts
        torch.cat((kernels.paged_decode_attention(dq, k, v, dt, dl, scale),
                   kernels.paged_prefill_attention(pq, k, v, pc, pl, pt, scale)), out=out)

    return ("paged_prefill_attention", f"{decodes} decodes + {chunk} of a prompt",
            lambda: (q, k, v, cu, lens, tables, scale), [("decode + prefill + cat", split)])


def open_kernels(device_name: str):
    """(backend, torch device, kernels) of backend ``device_name``'s device 0, made current on this
    thread; the kernels' description printed."""
    backend = load_backend(device_name)
    device = backend.device(0)
    device.set_current()
    kernels = backend.kernels()
    print(kernels.describe())
    return backend, device.torch_device, kernels


def main(argv=None) -> int:
    args = parse_args(argv)
    backend, dev, kernels = open_kernels(args.device)
    if not kernels.native:
        print(f"'{backend.name}' offers no native kernels: nothing to compare", file=sys.stderr)
        return 1
    dtype = getattr(torch, args.dtype)
    timer = Timer(dev, args.iters, args.reps)
    rows = []
    header = f"{'kernel':24} {'case':28} {'native us':>10} {'reference us':>13} {'ratio':>7}  {'max|diff|':>9}  others"
    print(header)
    with torch.inference_mode():
        for name, case, make_args, others in cases(args, dtype, dev, kernels):
            if name not in kernels.native:
                continue
            native_fn, ref_fn = getattr(kernels, name), reference.REFERENCES[name]
            call_args = make_args()
            # references get their own copies where the kernel writes in place
            ref_args = [a.clone() if isinstance(a, torch.Tensor) and name in INPLACE else a for a in make_args()]
            got = native_fn(*call_args)
            want = ref_fn(*ref_args)
            diff = output_diff(name, got, want, call_args, ref_args)
            t_native = timer(lambda: native_fn(*call_args))
            t_ref = timer(lambda: ref_fn(*ref_args))
            row = {"kernel": name, "case": case, "dtype": args.dtype, "native_us": t_native, "reference_us": t_ref,
                   "reference_ratio": t_ref / t_native, "max_abs_diff": diff, "others": {}}
            for other_name, other in others:
                t_other = timer(other)
                row["others"][other_name] = {"us": t_other, "ratio": t_other / t_native}
            rows.append(row)
            extra = "; ".join(f"{k} {o['us']:.1f} us ({o['ratio']:.2f}x)" for k, o in row["others"].items())
            print(f"{name:24} {case:28} {t_native:10.1f} {t_ref:13.1f} {t_ref / t_native:6.2f}x  {diff:9.2e}  {extra}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": args.device, "hardware": backend.runtime.hardware_label, "torch": torch.__version__,
                       "kernels": kernels.describe(), "command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    return 0


INPLACE = {"write_kv", "fused_add_rms_norm", "rotary_embedding", "rotary_write_kv"}


def output_diff(name, got, want, call_args, ref_args) -> float:
    """Largest |native - reference| over what the kernel produces (its result, or what it wrote)."""
    if name == "write_kv":
        pairs = [(call_args[2], ref_args[2]), (call_args[3], ref_args[3])]
    elif name == "fused_add_rms_norm":
        pairs = [(call_args[0], ref_args[0]), (call_args[1], ref_args[1])]
    elif name == "rotary_embedding":
        pairs = [(call_args[1], ref_args[1]), (call_args[2], ref_args[2])]
    elif name == "rotary_write_kv":
        pairs = [(call_args[i], ref_args[i]) for i in (1, 2, 4, 5)]
    else:
        pairs = [(got, want)]
    return max((a.float() - b.float()).abs().max().item() for a, b in pairs)


if __name__ == "__main__":
    raise SystemExit(main())
