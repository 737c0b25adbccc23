"""Decode and prefill speed of the engine beside HF transformers (eager, and static cache + compiled),
same random weights, same prompts, one run; with the kernels each decode step launches.

    python benchmarks/decode_bench.py --device nvidia --out results/decode.json      # the 1B llama shape
    python benchmarks/decode_bench.py --tiny --contexts 32 --new-tokens 8 --prefill-len 64 --hf eager  # cpu smoke

Cases: each batch size (--batch-sizes, default 1 and 32) at each context (--contexts, default 256 and
4096: the prompt length), decoding --new-tokens greedily; and one prefill case: a --prefill-len-token
prompt (default 8192) at batch 1, timed to its first token. The model is Llama-shaped (default: hidden
2048, 16 layers, 32 heads, 8 KV heads, MLP 8192, vocab 32000, bf16 on GPUs) with random weights made
in process; every engine generates exactly --new-tokens (no EOS). ``--shape 8b``: the Llama-3-8B shape
(hidden 4096, 32 layers, 32 heads, 8 KV heads, MLP 14336, vocab 128256); ``qwen3-8b``: Qwen3-8B's (hidden
4096, 36 layers, 32 heads of 128, 8 KV heads, MLP 12288, vocab 151936, per-head q/k norms);
``qwen3-30b-a3b``: Qwen3-30B-A3B's MoE (hidden 2048, 48 layers, 32 heads of 128, 4 KV heads, 128 experts
of width 768, 8 active, vocab 151936; ``--layers`` to run fewer). Each decode row of an unquantized
engine also says the weight bytes a step reads (every weight but the embedding table; of a MoE layer,
the experts its tokens are expected to pick, uniform routing assumed: ``E (1 - (1 - k/E)^batch)``) and
the rate that is, in GB/s, and for a MoE the active experts' bytes alone over the step time. ``--quantizations none,int8,fp8``
runs each anydev mode once per quantization of the projections (quantized while loading, on the device)
and prints each quantized engine's decode speed over the same mode's unquantized one. ``--repeats N``
builds every anydev engine N times, their order reversed on every other round (an engine built later
in the process runs a few percent slower: the order would otherwise favour the first), and reports
each case's median over the rounds; the JSON's ``order`` lists each round's engines. ``--plans FILE``
(a ``linear_bench.py --table-out`` file) runs the anydev engines with those plans added to the recorded ones.

Engines: "anydev graphs" (decode graphs, captured at start-up; step N+1 built and launched while the
device runs step N), "anydev graphs-sync" (the same without the overlap: each step's tokens read back
before the next is built, to show what the overlap gains), "anydev eager" (--enforce-eager),
"transformers eager" (its dynamic cache, sdpa) and "transformers compiled" (HF's documented fast path:
``generate(..., cache_implementation="static")``, which compiles the forward itself with its
``CompileConfig``: fullgraph, mode "reduce-overhead", i.e. CUDA graphs; the run fails if it did not).
Every engine runs each case once untimed first (graph captures, compilation, autotuning stay out of
the timed run). A transformers mode that fails is reported and makes the exit status 1; the other
rows are still printed and written.

"kernels/step" is measured with torch.profiler: the device kernels of a generate of --new-tokens
tokens minus those of a generate of 1 token, over the decode steps between (so prefill cancels out; the
same two generate shapes as the timing, so the compiled model does not recompile while profiled). On the cpu it counts top-level aten ops instead
(there are no device kernels), labelled "ops/step". Decode tok/s: generated tokens after the first
over the time after the first (anydev: pure decode steps, from its step statistics).
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch

from anydev.core import EngineConfigError, InferEngine, SamplingParams
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.exits import exit_process, run_command
from anydev.core.loading.random_weights import (LLAMA_1B, LLAMA_8B, LLAMA_TINY, QWEN3_8B, QWEN3_30B_A3B,
                                               TINY_EXTRA, model_config, random_checkpoint)
from anydev.core.models.registry import family_of

#: --shape: (family, shape).
SHAPES = {"1b": ("llama", LLAMA_1B), "8b": ("llama", LLAMA_8B), "qwen3-8b": ("qwen3", QWEN3_8B),
          "qwen3-30b-a3b": ("qwen3_moe", QWEN3_30B_A3B)}
ENGINES = ("graphs", "graphs-sync", "eager")
HF_MODES = ("eager", "compiled")

#: The settings every case of the benchmark sets itself (--modes, --executors, --quantizations and the sizes).
CASE_FIELDS = ("executor", "quantization", "max_model_len", "max_num_seqs", "use_graphs", "enable_chunked_prefill",
               "enable_prefix_caching", "max_num_batched_tokens")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # The engine's flags but those each case sets (the lists below, and the sizes the cases need).
    add_engine_arguments(p.add_argument_group("engine"), exclude=CASE_FIELDS, defaults=dict(device="cpu", tp=1, block_size=16, kernels="native"))
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--contexts", default="256,4096", help="prompt lengths of the decode cases")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prefill-len", type=int, default=8192, help="the prefill case's prompt (0: no prefill case)")
    p.add_argument("--layers", type=int, default=None, help="default: 16 (2 with --tiny)")
    p.add_argument("--shape", default="1b", choices=tuple(SHAPES), help="the model's shape (default 1b, llama)")
    p.add_argument("--quantizations", default="none", help="comma list of none, int8, fp8 (anydev engines)")
    p.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, vocab 256: host overhead, cpu smoke")
    p.add_argument("--modes", default="graphs,graphs-sync,eager", help="anydev modes: graphs, graphs-sync, eager")
    p.add_argument("--executors", default="threads",
                   help="where anydev's ranks run, each a row: threads, mp (a process per rank); e.g. threads,mp")
    p.add_argument("--hf", default="eager,compiled", help="transformers modes: eager, compiled ('' or none: skip)")
    p.add_argument("--repeats", type=int, default=1,
                   help="rounds of the anydev engines, the order reversed every other round; medians reported")
    p.add_argument("--no-kernel-count", action="store_true", help="skip the profiled runs that count kernels/step")
    p.add_argument("--plans", action="append", default=[],
                   help="a linear_bench --table-out file whose plans the anydev engines take for this run "
                        "(merged into linear_plans.RECORDED; the threads executor only); repeatable")
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def _list(text: str, allowed, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip() and t.strip() != "none"]
    if set(items) - set(allowed):
        raise EngineConfigError(f"{what} takes {', '.join(allowed)}; got {text!r}")
    return items


def run(args) -> int:
    executors = _list(args.executors, ("threads", "mp"), "--executors")
    if args.plans:
        if "mp" in executors:
            raise EngineConfigError("--plans reaches the engines of this process only: pass --executors threads")
        from linear_bench import merge_plans   # the script beside this one

        merge_plans(args.plans)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    modes, hf_modes = _list(args.modes, ENGINES, "--modes"), _list(args.hf, HF_MODES, "--hf")
    arch, shape = SHAPES[args.shape]
    if hf_modes and arch != "llama":
        raise EngineConfigError(f"--hf runs transformers on the llama shapes only; pass --hf none with --shape {args.shape}")
    args.layers = args.layers or (2 if args.tiny else shape["num_hidden_layers"])
    longest = max(contexts + [args.prefill_len]) + args.new_tokens + 16
    tiny = dict(LLAMA_TINY, **TINY_EXTRA.get(arch, {})) if args.tiny else {}
    model = model_config(arch, max_position_embeddings=longest, **{**shape, **tiny, "num_hidden_layers": args.layers})
    checkpoint = random_checkpoint(model)
    generator = torch.Generator().manual_seed(0)
    prompts = {n: torch.randint(2, model.vocab_size, (max(batch_sizes), n), generator=generator).tolist()
               for n in contexts}
    cases = [("decode", b, n) for n in contexts for b in batch_sizes]
    if args.prefill_len:
        prompts[args.prefill_len] = torch.randint(2, model.vocab_size, (1, args.prefill_len), generator=generator).tolist()
        cases.append(("prefill", 1, args.prefill_len))
    rows, dtype, torch_device, info = [], None, None, {}
    quantizations = [q.strip() for q in args.quantizations.split(",") if q.strip()]
    if set(quantizations) - {"none", "int8", "fp8"}:
        raise EngineConfigError(f"--quantizations takes none, int8, fp8; got {args.quantizations!r}")
    engines = [(m, e, q) for m in modes for e in executors for q in quantizations]
    order = [engines if r % 2 == 0 else engines[::-1] for r in range(args.repeats)]
    rounds = {}                     # (engine, case, batch, context) -> the rounds' rows
    for repeat, (mode, executor, quantization) in ((r, engine) for r, engines_of_round in enumerate(order)
                                                   for engine in engines_of_round):
        name = _engine_name(mode, executor, quantization)
        config = engine_config_from_args(args, executor=executor, quantization=None if quantization == "none" else quantization,
                                         max_model_len=longest, max_num_seqs=max(batch_sizes), use_graphs=mode != "eager",
                                         async_steps=mode != "graphs-sync", enable_chunked_prefill=False,
                                         enable_prefix_caching=False, max_num_batched_tokens=longest)
        with InferEngine(checkpoint, config) as engine:
            dtype, torch_device = engine.dtype, engine.backend.device(0).torch_device
            print(f"model: {checkpoint!r}, {args.device} x {args.tp}, {str(dtype).removeprefix('torch.')}, {name}")
            print(f"  {engine.kernels_description}")
            print("  " + "\n  ".join(engine.weight_descriptions))
            if mode != "eager" and not engine.uses_graphs:
                print(f"  skipped: backend '{args.device}' has no device graphs (torch_graph)")
                continue
            if engine.uses_graphs:
                print(f"  graphs captured at start-up: batch buckets {engine.graph_buckets} in {engine.capture_seconds:.2f} s")
            info[name] = dict(kernels=engine.kernels_description, init_seconds=engine.init_seconds,
                                          capture_seconds=getattr(engine, "capture_seconds", 0.0))
            for kind, batch, context in cases:
                row = anydev_case(engine, name, kind, prompts[context][:batch], args, count_kernels=repeat == 0)
                if kind == "decode" and quantization == "none":
                    row.update(weight_reads(model, batch, dtype.itemsize, row["decode_step_ms"]))
                rounds.setdefault((name, kind, batch, context), []).append(row)
                print(_row(row), flush=True)
                if "weights_gbps" in row:
                    print(_reads(row), flush=True)
    rows += [_median_row(runs) for runs in rounds.values()]
    failed = {}
    for hf_mode in hf_modes:
        try:
            rows += hf_cases(checkpoint, prompts, cases, args, hf_mode, torch_device, dtype)
        except Exception as exc:   # reported below and in the JSON; the exit status says it
            failed[f"transformers {hf_mode}"] = f"{type(exc).__name__}: {exc}"
            print(f"transformers {hf_mode} FAILED: {failed[f'transformers {hf_mode}']}", file=sys.stderr)
    print()
    print(_header())
    for row in sorted(rows, key=lambda r: (r["case"] == "prefill", r["context"], r["batch"], r["engine"])):
        print(_row(row))
        if "weights_gbps" in row:
            print(_reads(row))
    ratios = _ratios(rows)
    for line in ratios:
        print(line)
    if args.out:
        report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), host=platform.node(), command=" ".join(sys.argv),
                      device=args.device, device_name=_device_name(torch_device), tp=args.tp,
                      order=[[_engine_name(*engine) for engine in engines_of_round] for engines_of_round in order],
                      dtype=str(dtype).removeprefix("torch."), new_tokens=args.new_tokens, layers=args.layers,
                      architecture=arch, shape={k: getattr(model, k) for k in {**LLAMA_1B, **shape, **tiny}},
                      engines=info, rows=rows, ratios=ratios,
                      failed=failed)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    for name, error in failed.items():
        print(f"{name} failed: {error}")
    return 1 if failed else 0


# ---- anydev -------------------------------------------------------------------------------------

def _engine_name(mode: str, executor: str, quantization: str) -> str:
    return f"anydev {mode}" + ("" if executor == "threads" else f" {executor}") \
        + ("" if quantization == "none" else f" {quantization}")


def weight_reads(config, batch: int, itemsize: int, step_ms: float) -> dict:
    """The weight bytes one decode step of ``batch`` rows reads (all but the embedding table; of each MoE
    layer the experts expected under uniform routing) and their rate over ``step_ms``; for a MoE, the
    active experts' bytes and rate alone."""
    family = family_of(config)
    experts, top_k = getattr(config, "num_experts", 0), getattr(config, "num_experts_per_tok", 0)
    active = experts * (1 - (1 - top_k / experts) ** batch) if experts else 0.0
    dense = expert = 0
    for name in family.tensor_names(config):
        numel = math.prod(family.full_shape(name, config)) * itemsize
        if ".mlp.experts." in name:
            expert += numel
        elif name != "model.embed_tokens.weight":
            dense += numel
    expert_bytes = expert * active / experts if experts else 0.0
    seconds = step_ms / 1000 if step_ms else float("nan")
    reads = dict(weights_gb_per_step=(dense + expert_bytes) / 1e9, weights_gbps=(dense + expert_bytes) / 1e9 / seconds)
    if experts:
        reads.update(active_experts=active, experts_gb_per_step=expert_bytes / 1e9,
                     experts_gbps=expert_bytes / 1e9 / seconds)
    return reads


def _reads(row: dict) -> str:
    line = f"{'':>22}  reads {row['weights_gb_per_step']:.3f} GB of weights a step: {row['weights_gbps']:.1f} GB/s"
    if "experts_gbps" in row:
        line += (f"; active experts {row['active_experts']:.1f} a layer, {row['experts_gb_per_step']:.3f} GB a step: "
                 f"{row['experts_gbps']:.1f} GB/s")
    return line


def _median_row(runs: list[dict]) -> dict:
    """One case's row over the rounds: each timing the median of the rounds' (the first round's kernel count)."""
    row = dict(runs[0], repeats=len(runs))
    for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "decode_step_ms", "build_ms"):
        values = [run[key] for run in runs]
        row[key] = statistics.median(values) if None not in values else None
    if "weights_gb_per_step" in row and row["decode_step_ms"]:     # the rates at the median step time
        for rate, size in (("weights_gbps", "weights_gb_per_step"), ("experts_gbps", "experts_gb_per_step")):
            if rate in row:
                row[rate] = row[size] / (row["decode_step_ms"] / 1000)
    return row


def anydev_case(engine: InferEngine, name: str, kind: str, prompts, args, count_kernels: bool = True) -> dict:
    new_tokens = 1 if kind == "prefill" else args.new_tokens
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    engine.generate_ids(prompts, sampling)                      # warm-up
    engine.generate_ids(prompts, sampling)
    s = engine.last_stats
    row = dict(engine=name, case=kind, batch=len(prompts), context=len(prompts[0]),
               prefill_tokens_per_s=s.prefill_tokens_per_s, decode_tokens_per_s=s.decode_tokens_per_s,
               decode_step_ms=s.decode_step_ms, build_ms=s.decode_build_ms)
    if kind == "decode" and count_kernels and not args.no_kernel_count:
        row["kernels_per_step"] = kernels_per_step(
            lambda n: engine.generate_ids(prompts, SamplingParams(max_new_tokens=n, ignore_eos=True)),
            args.new_tokens)
    return row


# ---- transformers -------------------------------------------------------------------------------

def hf_cases(checkpoint, prompts, cases, args, mode: str, torch_device, dtype) -> list[dict]:
    """The same model in HF transformers (sdpa attention), each case timed like the engine's."""
    import transformers

    c = checkpoint.config
    hf_config = transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        max_position_embeddings=c.max_position_embeddings, rope_theta=c.rope_theta, tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    with torch.device(torch_device):
        model = transformers.LlamaForCausalLM(hf_config).to(dtype).eval()
    model.load_state_dict({name: checkpoint.load(name) for name in checkpoint.tensor_names()})
    extra = {}
    if mode == "compiled":   # generate compiles the forward itself for a static cache (its CompileConfig)
        model.generation_config.disable_compile = False
        extra = dict(cache_implementation="static")
    name = f"transformers {mode}"
    compile_config = getattr(model.generation_config, "compile_config", None)
    print(f"{name}: {transformers.__version__}, {str(dtype).removeprefix('torch.')}"
          + (f", static cache, compiled by generate ({compile_config})" if extra else ", dynamic cache"))

    def generate(ids: torch.Tensor, new_tokens: int) -> float:
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, **extra)
        out.tolist()   # waits for the device
        return time.perf_counter() - start

    rows = []
    with torch.inference_mode():
        for kind, batch, context in cases:
            ids = torch.tensor(prompts[context][:batch], device=torch_device)
            if kind == "prefill":
                generate(ids, 1)                                      # warm-up (compilation)
                seconds = generate(ids, 1)
                rows.append(dict(engine=name, case=kind, batch=batch, context=context,
                                 prefill_tokens_per_s=batch * context / seconds, decode_tokens_per_s=0.0,
                                 decode_step_ms=0.0))
            else:
                generate(ids, args.new_tokens)                        # warm-up (compilation): both shapes
                generate(ids, 1)
                if extra and not hasattr(model, "_compiled_call"):
                    raise RuntimeError("transformers' generate did not compile the forward (no _compiled_call): "
                                       "this row would not be the compiled configuration")
                prefill = generate(ids, 1)
                full = generate(ids, args.new_tokens)
                decode = max(full - prefill, 1e-9)
                rows.append(dict(engine=name, case=kind, batch=batch, context=context,
                                 prefill_tokens_per_s=batch * context / prefill,
                                 decode_tokens_per_s=batch * (args.new_tokens - 1) / decode,
                                 decode_step_ms=1000 * decode / (args.new_tokens - 1)))
                if not args.no_kernel_count:
                    rows[-1]["kernels_per_step"] = kernels_per_step(lambda n: generate(ids, n), args.new_tokens)
            print(_row(rows[-1]), flush=True)
    del model
    return rows


# ---- kernels per decode step ----------------------------------------------------------------------

def kernels_per_step(generate, new_tokens: int) -> float:
    """Device kernels of ``generate(new_tokens)`` minus those of ``generate(1)``, per decode step."""
    return (_count(lambda: generate(new_tokens)) - _count(lambda: generate(1))) / (new_tokens - 1)


def _count(fn) -> int:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    try:   # the engine's ranks run on their own threads: profile those too (torch >= 2.7)
        from torch._C._profiler import _ExperimentalConfig

        extra = dict(experimental_config=_ExperimentalConfig(profile_all_threads=True))
    except (ImportError, TypeError):
        extra = {}
    with profile(activities=activities, **extra) as prof:
        fn()
        if gpu:
            torch.cuda.synchronize()
    events = prof.events()
    if gpu:
        return sum(1 for e in events if e.device_type == DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset", "[memory]")))
    return sum(1 for e in events if e.name.startswith("aten::")
               and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))


# ---- report ---------------------------------------------------------------------------------------

def _header() -> str:
    unit = "kernels/step" if torch.cuda.is_available() else "ops/step"
    return (f"{'engine':>22}  {'case':>7}  {'batch':>5}  {'context':>7}  {'prefill tok/s':>13}  "
            f"{'decode tok/s':>12}  {'step ms':>8}  {unit:>12}")


def _row(row: dict) -> str:
    kernels = f"{row['kernels_per_step']:>12.1f}" if "kernels_per_step" in row else f"{'-':>12}"
    decode = f"{row['decode_tokens_per_s']:>12.1f}" if row["case"] == "decode" else f"{'-':>12}"
    step = f"{row['decode_step_ms']:>8.3f}" if row["case"] == "decode" else f"{'-':>8}"
    return (f"{row['engine']:>22}  {row['case']:>7}  {row['batch']:>5}  {row['context']:>7}  "
            f"{row['prefill_tokens_per_s']:>13.1f}  {decode}  {step}  {kernels}")


def _ratios(rows: list[dict]) -> list[str]:
    """anydev's best mode over each transformers mode, case by case (decode tok/s; prefill tok/s)."""
    lines = []
    keyed = {(r["engine"], r["case"], r["batch"], r["context"]): r for r in rows}
    for (engine, case, batch, context), row in sorted(keyed.items()):
        if not engine.startswith("transformers"):
            continue
        metric = "decode_tokens_per_s" if case == "decode" else "prefill_tokens_per_s"
        ours = [keyed[(e, case, batch, context)] for e in ("anydev graphs", "anydev graphs-sync", "anydev eager")
                if (e, case, batch, context) in keyed]
        if ours and row[metric]:
            best = max(ours, key=lambda r: r[metric])
            lines.append(f"{best['engine']} / {engine}, {case} batch {batch} context {context}: "
                         f"{best[metric] / row[metric]:.2f}x ({metric})")
    for (engine, case, batch, context), row in sorted(keyed.items()):   # quantized against unquantized
        plain = keyed.get((engine.rsplit(" ", 1)[0], case, batch, context))
        if engine.endswith((" int8", " fp8")) and plain and plain["decode_tokens_per_s"] and case == "decode":
            lines.append(f"{engine} / {plain['engine']}, {case} batch {batch} context {context}: "
                         f"{row['decode_tokens_per_s'] / plain['decode_tokens_per_s']:.2f}x (decode_tokens_per_s)")
    for (engine, case, batch, context), row in sorted(keyed.items()):   # processes against threads
        threads = keyed.get((engine.removesuffix(" mp"), case, batch, context))
        metric = "decode_tokens_per_s" if case == "decode" else "prefill_tokens_per_s"
        if engine.endswith(" mp") and threads and threads[metric]:
            lines.append(f"{engine} / {threads['engine']}, {case} batch {batch} context {context}: "
                         f"{row[metric] / threads[metric]:.2f}x ({metric})")
    return lines


def _device_name(torch_device) -> str:
    if torch_device is not None and torch_device.type == "cuda":
        return torch.cuda.get_device_name(torch_device)
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    exit_process(main())
