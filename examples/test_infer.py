"""Run a model on any anydev backend: the README's main command.

    python examples/test_infer.py                         # embedded demo model on the cpu backend
    python examples/test_infer.py --device nvidia --tp 2  # the demo on two GPUs, checked against cpu
    python examples/test_infer.py --device nvidia --enforce-eager   # decode without device graphs
    python examples/test_infer.py --device nvidia --model /models/Llama-3.2-1B-Instruct --prompt "Hi"
    python examples/test_infer.py --device nvidia --tp 2 --executor mp   # one process per rank
    torchrun --nproc-per-node 2 examples/test_infer.py --device nvidia --tp 2   # docs/multi-node.md

Flags follow InfiniLM's test_infer.py. Without --model the embedded demo model runs, and its greedy
tokens are checked against the cpu reference backend (float32, one rank) and, when transformers is
installed, against HF transformers' LlamaForCausalLM on the same weights; a mismatch exits with 1.
Decode steps run as device graphs where the backend has them (unless --enforce-eager), in the checked
float32 run too.
Any anydev error prints one line, ``error: ...``, and exits with 2.
"""
from __future__ import annotations

from anydev.core.exits import exit_process, run_command   # first: a Ctrl-C while torch loads is one line too
from anydev.core.process_timeline import ProcessTimeline

STARTUP = ProcessTimeline()   # the process's start to here: "interpreter"

import argparse
import os
import sys

DEFAULT_PROMPT = "Hello, world! What is a device?"


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def parse_args(argv=None) -> argparse.Namespace:
    from anydev.cli.help_format import ShownDefaultsFormatter
    from anydev.core.engine_args import add_engine_arguments

    p = _OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=ShownDefaultsFormatter)
    p.add_argument("--model", help="HF model directory or .gguf file, a local path (default: the embedded demo model)")
    p.add_argument("--enable-paged-attn", action="store_true", help="accepted for InfiniLM compatibility; paging is always on")
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="the prompt (through the chat template unless --no-chat-template)")
    p.add_argument("--batch-size", type=int, default=1, help="how many copies of the prompt to run at once")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate per prompt at most")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature; 0: greedy")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k likeliest tokens; 0: all")
    p.add_argument("--top-p", type=float, default=1.0, help="sample among the likeliest tokens holding p of the mass; 1: all")
    p.add_argument("--no-chat-template", action="store_true", help="encode the prompt as plain text")
    p.add_argument("--timeline-out", help="write the start-up timeline (process start to first token) as JSON here (default: not written)")
    # --seed (an engine flag, as serve's) also seeds each prompt's request, so all copies draw alike
    add_engine_arguments(p, default_texts={"max_num_seqs": "--batch-size"})
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run_command(lambda: run(parse_args(argv)))


def run(args) -> int:
    from anydev.core import EngineConfig, InferEngine, SamplingParams, format_timeline
    from anydev.core.engine_args import engine_config_from_args
    from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint
    from anydev.core.engine_config import validate_config
    from anydev.core.executors.registry import command_executor
    from anydev.plugin_api import load_backend

    STARTUP.mark("imports")
    config = engine_config_from_args(args, max_num_seqs=args.max_num_seqs or args.batch_size)
    executor = command_executor(args.executor, config.tp, config.pp)   # a torchrun rank other than 0 serves rank 0 from here on
    device = load_backend(config.device).name   # an unknown or unavailable device fails first
    config = _with(config, device=device, executor=executor)
    STARTUP.mark("backend open")
    is_demo = args.model is None
    checkpoint = demo_checkpoint() if is_demo else open_checkpoint(args.model)
    sampling = SamplingParams(args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed)
    sampling.validate()
    if args.batch_size < 1:
        raise_config(f"--batch-size must be >= 1, got {args.batch_size}")
    validate_config(config, checkpoint.config)   # the settings and the prompt are checked before any weights load
    prompts = [args.prompt] * args.batch_size
    use_template = not args.no_chat_template
    print(f"model: {checkpoint!r}")
    max_new_tokens = _new_tokens_that_fit(checkpoint, args, config.max_model_len, use_template)
    sampling = _with(sampling, max_new_tokens=max_new_tokens)
    STARTUP.mark("checkpoint + tokenizer")
    with InferEngine(checkpoint, config, progress=True) as engine:
        layout = f", tp {config.tp} x pp {config.pp}, eager" if config.pp > 1 else ""
        print(f"device: {device} ({engine.backend.runtime.hardware_label}) x {config.tp * config.pp} rank(s) ({executor}{layout}), dtype {str(engine.dtype).removeprefix('torch.')}, "
              f"{engine.num_blocks} KV blocks of {config.block_size} tokens per rank, init {engine.init_seconds:.3f} s, "
              f"decode graphs {'on' if engine.uses_graphs else 'off'}"
              + (f" ({len(engine.graph_buckets)} captured at start-up in {engine.capture_seconds:.3f} s)"
                 if engine.uses_graphs else ""))
        print(engine.kernels_description)
        print("\n".join(engine.weight_descriptions))
        print("init timeline:")
        print(format_timeline(engine.timeline + engine.capture_timeline))
        STARTUP.mark_engine(engine)
        outputs = engine.generate(prompts, sampling, use_chat_template=use_template)
        STARTUP.mark("first prefill", engine.first_token_at)
        stats = engine.last_stats
        for i, out in enumerate(outputs):
            print(f"--- output {i} ({len(out.token_ids)} tokens, {out.finish_reason}) ---")
            print(out.text, flush=True)
        STARTUP.mark("first token")
        print(f"start-up timeline (process start to the output; first token: {max_new_tokens} token(s) "
              f"generated):\n{STARTUP.format()}")
        if args.timeline_out:
            STARTUP.write(args.timeline_out)
        print(f"prefill: {stats.prefill_tokens} tokens, {stats.prefill_tokens_per_s:.1f} tokens/s")
        print(f"decode:  {stats.decode_tokens} tokens, {stats.decode_tokens_per_s:.1f} tokens/s")
        if not is_demo:
            return 0
        if config.quantization in ("int8", "fp8", "fp8_e4m3"):
            print(f"reference checks: skipped (weights quantized to {config.quantization}; the float references "
                  "would not give the same tokens)")
            return 0
        greedy = SamplingParams(max_new_tokens)
        if sampling.is_greedy and engine.dtype.is_floating_point and str(engine.dtype) == "torch.float32":
            tokens = [o.token_ids for o in outputs]
        else:
            tokens = None   # checked below at float32: bf16/fp16 rounding flips near-tie greedy choices
        checked_graphs = engine.uses_graphs
    if tokens is None:   # the same config (graphs included), at float32
        with InferEngine(checkpoint, _with(config, dtype="float32")) as engine:
            outputs = engine.generate(prompts, greedy, use_chat_template=use_template)
            tokens = [o.token_ids for o in outputs]
            checked_graphs = engine.uses_graphs
    match = True
    if device == "cpu" and config.tp == 1 and config.pp == 1:
        print("cpu reference: this run is the reference (cpu backend, one rank)")
    else:
        with InferEngine(demo_checkpoint(), EngineConfig(device="cpu", tp=1, dtype="float32",
                                                         max_num_seqs=args.batch_size)) as reference:
            expected = [o.token_ids for o in reference.generate(prompts, greedy, use_chat_template=use_template)]
        match = tokens == expected
        stages = f" pp={config.pp}" if config.pp > 1 else ""
        print(f"tokens match the cpu reference: {'yes' if match else 'no'} "
              f"(greedy, float32: {device} tp={config.tp}{stages} vs cpu tp=1), decode graphs {'on' if checked_graphs else 'off'}")
        _print_first_differences(tokens, expected, "cpu")
    match = _check_against_transformers(checkpoint, outputs[0].prompt_token_ids, tokens[0], max_new_tokens) and match
    return 0 if match else 1


def _new_tokens_that_fit(checkpoint, args, max_model_len: int | None, use_template: bool) -> int:
    """``--max-new-tokens``, capped (and said so) to the room the context leaves after the prompt;
    an error when it leaves none."""
    if checkpoint.tokenizer is None:
        return args.max_new_tokens   # the engine says so
    context = max_model_len or checkpoint.config.max_position_embeddings
    prompt_tokens = len(checkpoint.tokenizer.encode_prompt(args.prompt, use_template))
    room = context - prompt_tokens
    if room < 1:
        raise_config(f"the prompt has {prompt_tokens} tokens, but the context is {context} tokens (--max-model-len; "
                     "default the model's), leaving no room to generate; shorten the prompt or raise --max-model-len")
    if args.max_new_tokens <= room:
        return args.max_new_tokens
    print(f"max new tokens: {room}, not {args.max_new_tokens} (--max-new-tokens): the context of {context} tokens "
          f"leaves {room} after the prompt's {prompt_tokens}")
    return room


def _check_against_transformers(checkpoint, prompt_ids, tokens, max_new_tokens) -> bool:
    """Compare one output with HF transformers on the same weights; skipped (and said so) without it."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("tokens match HF transformers: not checked (transformers is not installed)")
        return True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_check import hf_greedy_tokens

    expected = hf_greedy_tokens(checkpoint, prompt_ids, max_new_tokens)
    match = tokens == expected
    print(f"tokens match HF transformers: {'yes' if match else 'no'} (greedy, float32, LlamaForCausalLM on the cpu)")
    _print_first_differences([tokens], [expected], "transformers")
    return match


def _print_first_differences(tokens, expected, reference: str) -> None:
    for i, (got, want) in enumerate(zip(tokens, expected)):
        if got != want:
            first = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            print(f"  output {i}: first difference at token {first}: got {got[first:first + 5]}, "
                  f"{reference} has {want[first:first + 5]}")


def _with(settings, **changes):
    """A copy of the dataclass ``settings`` with ``changes``."""
    from dataclasses import replace

    return replace(settings, **changes)


def raise_config(message: str):
    from anydev.core import EngineConfigError

    raise EngineConfigError(message)


if __name__ == "__main__":
    exit_process(main())
