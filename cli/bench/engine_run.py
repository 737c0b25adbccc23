"""The engine side shared by ``anydev bench latency`` and ``throughput``: their flags and the engine."""
from __future__ import annotations

import argparse


def add_engine_arguments(parser: argparse.ArgumentParser, input_len: int, output_len: int) -> None:
    from anydev.core.engine_args import add_engine_arguments as engine_flags

    parser.add_argument("--model", help="HF model directory or .gguf file (default: the embedded demo model)")
    parser.add_argument("--input-len", type=int, default=input_len, help="tokens of each random prompt")
    parser.add_argument("--output-len", type=int, default=output_len,
                        help="tokens generated for each prompt (the end-of-sequence token ignored)")
    parser.add_argument("--output-json", help="write the figures as JSON to this file")
    # one --seed, as vLLM's bench: the engine's sampler and the random prompts
    engine_flags(parser.add_argument_group("engine"), defaults={"seed": 0})


def open_engine(args: argparse.Namespace, prompts_at_once: int):
    """(engine, vocab size) for the flags; ``--max-num-seqs`` not given: ``prompts_at_once``."""
    from anydev.core import InferEngine
    from anydev.core.engine_args import engine_config_from_args
    from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint

    checkpoint = demo_checkpoint() if args.model is None else open_checkpoint(args.model)
    sizes = {} if args.max_num_seqs is not None else {"max_num_seqs": prompts_at_once}
    engine = InferEngine(checkpoint, engine_config_from_args(args, **sizes))
    return engine, checkpoint.config.vocab_size


def generated_tokens(outputs) -> int:
    """Tokens the engine generated for ``outputs``; failed requests are an error, not a figure."""
    from anydev.core.errors import EngineConfigError

    failed = [o.error for o in outputs if o.finish_reason == "error"]
    if failed:
        raise EngineConfigError(f"{len(failed)} of {len(outputs)} benchmark requests failed: {failed[0]}")
    return sum(len(o.token_ids) for o in outputs)
