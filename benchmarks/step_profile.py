"""Where a decode step's time goes: the kernels of a few decode steps of the engine, by device time
(torch.profiler), for a random-weight model of decode_bench's shapes (``--shape``, default the 1B llama;
``--model``: a checkpoint, e.g. a GGUF file; ``--logprobs N``: every request asks for top-N logprobs).

    python benchmarks/step_profile.py --device nvidia --batch-sizes 1,32 --context 256
    python benchmarks/step_profile.py --tiny --context 16 --steps 2                       # cpu smoke

For each batch size: the kernels per step (the whole profile's device kernels over the steps), and
by name (how many launches of each a step makes), then
torch.profiler's table of the kernels sorted by device time (on the cpu: the aten ops by cpu time).
The engine runs eagerly here (``--graphs`` replays its decode graphs instead: the same kernels, one
launch), so every kernel is attributed to its op. (``launch_count.py`` counts the launches of a step per
layer without a GPU, deterministically: on the cpu backend under Triton's interpreter.)

``--mixed N`` profiles mixed steps too: once the batch decodes, a request with an N-token prompt
arrives, and the steps that prefill it (chunks of ``--max-num-batched-tokens`` beside the batch's
decodes) are profiled the same way. Two such prompts go before the profiled one, unprofiled: the
first warms up (its steps compile the prefill kernels), the second's steps are timed, as are the
decode steps before them, so the mixed/decode step ratio comes without the profiler's host overhead.
On a GPU each profile says how much of a step the device is busy and how much is host time (building
the step, launching, reading back) that the device waits for:

    python benchmarks/step_profile.py --device nvidia --batch-sizes 32,64 --context 256 --mixed 3072 \
        --max-num-batched-tokens 512 --graphs
"""
from __future__ import annotations

import argparse
import collections
import time

import torch

from anydev.core import InferEngine, SamplingParams
from anydev.core.engine_args import add_engine_arguments, engine_config_from_args
from anydev.core.exits import exit_process, run_command
from anydev.core.loading.random_weights import LLAMA_TINY, TINY_EXTRA, model_config, random_checkpoint
from decode_bench import SHAPES

_MIXED_STEPS = 64    # at most this many mixed steps are profiled
#: The settings the profile sets itself (from --context, --batch-sizes and --graphs).
CASE_FIELDS = ("max_model_len", "max_num_seqs", "use_graphs", "enable_prefix_caching")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(p.add_argument_group("engine"), exclude=CASE_FIELDS, defaults=dict(device="cpu"))
    p.add_argument("--batch-sizes", default="1")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--steps", type=int, default=4, help="decode steps profiled")
    p.add_argument("--graphs", action="store_true", help="replay decode graphs (default: eager)")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--shape", default="1b", choices=tuple(SHAPES), help="the random model's shape (decode_bench's)")
    p.add_argument("--layers", type=int, default=None, help="of the random model (default: the shape's)")
    p.add_argument("--logprobs", type=int, default=None, help="each request asks for this many top logprobs a token")
    p.add_argument("--model", help="profile this checkpoint (an HF directory or a .gguf file) instead of random weights")
    p.add_argument("--rows", type=int, default=25, help="table rows")
    p.add_argument("--mixed", type=int, default=0,
                   help="also profile the mixed steps that prefill a prompt of this many tokens beside the decodes")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(run, parse_args(argv))


def run(args) -> int:
    from torch.profiler import ProfilerActivity

    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    # the decodes keep running through the timed decode steps and the three prompts' mixed steps
    extra = args.steps + 3 * (_MIXED_STEPS + 2) if args.mixed else 0
    context = max(args.context + extra, args.mixed) + args.steps + 32
    if args.model:
        from anydev.core.loading.checkpoint import open_checkpoint

        checkpoint = open_checkpoint(args.model)
        model = checkpoint.config
    else:
        family, shape = SHAPES[args.shape]
        tiny = dict(LLAMA_TINY, **TINY_EXTRA.get(family, {})) if args.tiny else {}
        layers = {"num_hidden_layers": args.layers} if args.layers else {}
        model = model_config(family, max_position_embeddings=context, **{**shape, **tiny, **layers})
        checkpoint = random_checkpoint(model)
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, model.vocab_size, (max(batch_sizes), args.context), generator=generator).tolist()
    long_prompt = torch.randint(2, model.vocab_size, (args.mixed,), generator=generator).tolist()
    config = engine_config_from_args(args, max_model_len=context, max_num_seqs=max(batch_sizes) + 1,
                                     use_graphs=args.graphs, enable_prefix_caching=False)
    gpu = torch.cuda.is_available() and config.device != "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with InferEngine(checkpoint, config) as engine:
        print(f"model: {checkpoint!r}; {engine.kernels_description}; graphs {'on' if engine.uses_graphs else 'off'}")
        for batch in batch_sizes:
            params = SamplingParams(max_new_tokens=args.steps + 2 + extra, ignore_eos=True, logprobs=args.logprobs)
            seqs = [engine.add_request(p, params)
                    for p in prompts[:batch]]
            while any(seq.num_cached < len(seq.prompt) for seq in seqs):   # prefill, and one decode to warm up
                engine.step()
            engine.step()
            steps = [engine.step for _ in range(args.steps)]
            _profile(args, activities, gpu, steps, f"batch {batch}, context {args.context}", "decode")
            if args.mixed:
                decode_ms = _step_ms(engine, gpu, lambda steps: steps < args.steps)[0]
                _prompt_steps(engine, long_prompt, lambda run: _step_ms(engine, gpu, run))        # warm-up
                mixed_ms, chunks = _prompt_steps(engine, long_prompt, lambda run: _step_ms(engine, gpu, run))
                print(f"\n== batch {batch}, unprofiled: decode step {decode_ms:.3f} ms, mixed step {mixed_ms:.3f} ms "
                      f"(mean of {chunks}): mixed / decode {mixed_ms / decode_ms:.2f}x")

                def profiled(run):
                    chunks = 0
                    while run(chunks):
                        chunks += 1
                        _profile(args, activities, gpu, [engine.step],
                                 f"batch {batch} decoding + a {args.mixed}-token prompt, chunk {chunks}", "mixed")
                    return None, chunks

                _prompt_steps(engine, long_prompt, profiled)
            while engine.has_unfinished:
                engine.step()
    return 0


def _prompt_steps(engine, prompt: list[int], run_steps):
    """Add a request of ``prompt`` and run the steps that prefill it (at most ``_MIXED_STEPS``) by
    ``run_steps(more)``, where ``more(steps run)`` says whether another step is due; then the steps
    until it has finished (so that the next prompt's steps do not carry it). Returns what
    ``run_steps`` returns."""
    long = engine.add_request(prompt, SamplingParams(max_new_tokens=1, ignore_eos=True))
    result = run_steps(lambda steps: long.num_cached < len(long.prompt) and steps < _MIXED_STEPS)
    while not long.is_finished:
        engine.step()
    return result


def _step_ms(engine, gpu: bool, more) -> tuple[float, int]:
    """(mean wall ms of the engine steps run while ``more(steps run)``, how many), unprofiled: the
    steps overlap as they do in serving, one device synchronisation at the end."""
    steps, start = 0, time.perf_counter()
    while more(steps):
        engine.step()
        steps += 1
    if gpu:
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - start) / max(steps, 1), steps


def _profile(args, activities, gpu: bool, steps: list, title: str, kind: str) -> None:
    """Profile ``steps`` (each a call that runs one engine step) and print what they spent."""
    from torch.autograd import DeviceType
    from torch.profiler import profile

    with profile(activities=activities, **_all_threads()) as prof:
        start = time.perf_counter()
        for step in steps:
            step()
        if gpu:
            torch.cuda.synchronize()
        wall_ms = 1000 * (time.perf_counter() - start) / len(steps)
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))] if gpu else []
    print(f"\n== {title}: {len(kernels) / len(steps):.1f} kernels per {kind} step" if gpu
          else f"\n== {title} (cpu: aten ops by cpu time; {kind} step wall {wall_ms:.3f} ms, profiled)")
    if gpu:   # which kernels make up the count (e.g. the fused rotary_write_kv: one launch a layer)
        for name, n in collections.Counter(e.name for e in kernels).most_common():
            print(f"  {n / len(steps):6.1f} per step  {name[:100]}")
        # how much of a step the device is busy: the rest is host time the device waits for
        busy_ms = sum(e.device_time_total for e in kernels) / 1000 / len(steps)
        print(f"{kind} step wall {wall_ms:.3f} ms (profiled), device kernels {busy_ms:.3f} ms: device busy "
              f"{100 * busy_ms / wall_ms:.0f}% of the step, host (device waiting) {wall_ms - busy_ms:.3f} ms")
    sort = "self_cuda_time_total" if gpu else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=args.rows, max_name_column_width=60))


def _all_threads() -> dict:
    """Profile the engine's rank threads too (torch >= 2.7; device kernels are seen either way)."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return dict(experimental_config=_ExperimentalConfig(profile_all_threads=True))
    except (ImportError, TypeError):
        return {}


if __name__ == "__main__":
    exit_process(main())
