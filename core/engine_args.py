"""The engine's command-line options, one source for ``anydev serve``, ``examples/test_infer.py`` and
the benchmarks.

    add_engine_arguments(parser)                 # the flags, each an EngineConfig field
    config = engine_config_from_args(args)       # the EngineConfig they give

One flag per :class:`~.engine_config.EngineConfig` field, with vLLM's name where vLLM has the option
(``--max-model-len``, ``--max-num-seqs``, ``--enforce-eager``...) and otherwise the field's name with
dashes; InfiniLM's ``--max-cache-len`` (its test_infer.py) is accepted as an alias of
``--max-model-len``. The engine's messages name the config field; :data:`FLAGS` gives its flag.
A flag left out is None in the namespace, and the field keeps EngineConfig's default.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import fields

from .engine_config import EngineConfig
from .executors.registry import EXECUTORS
from .loading.quantization_names import QUANTIZATIONS
from .rank.kernel_choice import KERNEL_MODES


def registered_executor(name: str) -> str:
    """``--executor``'s value, checked against the executors registered when the command line is parsed
    (an executor ``register_executor`` adds after this module is imported is accepted too)."""
    if name not in EXECUTORS:
        raise argparse.ArgumentTypeError(f"no executor named {name!r}; registered: {', '.join(EXECUTORS)}")
    return name


#: field -> (flags, the rest of ``add_argument``'s arguments). The first flag is the option's name.
OPTIONS: dict[str, tuple[tuple[str, ...], dict]] = {
    "device": (("--device",), dict(help="anydev backend: cpu, nvidia, moore, metax, ... "
                                        "(default: $ANYDEV_DEVICE, else cpu)")),
    "tp": (("--tp", "--tensor-parallel-size"), dict(type=int, help="tensor-parallel ranks")),
    "pp": (("--pp", "--pipeline-parallel-size"),
           dict(type=int, help="pipeline stages; --tp T --pp K runs on T x K devices (PP runs eagerly)")),
    "executor": (("--executor",), dict(
        type=registered_executor,
        help="where the ranks run: threads of this process, mp (a process per rank, started here), torchrun "
             "(this process is rank 0; the default when torchrun started it) or one registered with "
             "register_executor")),
    "dtype": (("--dtype",), dict(help="float32, bfloat16 or float16 (default: bf16 on GPUs, float32 on cpu)")),
    "max_model_len": (("--max-model-len", "--max-cache-len"), dict(
        type=int, help="context length in tokens (default: the model's); --max-cache-len: InfiniLM's name")),
    "block_size": (("--block-size",), dict(type=int, help="tokens per KV block")),
    "num_blocks": (("--num-blocks",), dict(type=int, help="KV blocks per rank (default: from free memory)")),
    "memory_fraction": (("--memory-fraction",), dict(
        type=float, help="share of the memory left after the weights the KV cache may take")),
    "max_num_seqs": (("--max-num-seqs",), dict(type=int, help="requests running at once")),
    "max_num_batched_tokens": (("--max-num-batched-tokens",),
                               dict(type=int, help="tokens per step, decodes plus prefill chunks (default: 2048, and at least "
                                         "--max-model-len with --no-chunked-prefill)")),
    "enable_prefix_caching": (("--no-prefix-caching",), dict(action="store_false", help="turn prefix caching off")),
    "enable_chunked_prefill": (("--no-chunked-prefill",), dict(
        action="store_false", help="prefill whole prompts in steps of their own (decodes wait for them)")),
    "use_graphs": (("--enforce-eager",), dict(action="store_false", help="decode eagerly, without device graphs")),
    "lazy_graphs": (("--lazy-graphs",), dict(
        action="store_true", help="capture only the smallest graph buckets at start-up, the others when first needed")),
    "warm_kernels": (("--kernel-warmup",), dict(
        action="store_true",
        help="compile the kernels while the weights load, not at the first capture or step (off: on a CUDA "
             "device its steps' streams leave cuBLAS workspaces in torch that a failed start does not give back)")),
    "kernels": (("--kernels",), dict(
        choices=KERNEL_MODES,
        help="native: the backend's kernels where it has them; unfused: those, with each fused kernel run as "
             "its parts; reference: the torch references")),
    "quantization": (("--quantization",), dict(
        choices=tuple(QUANTIZATIONS),
        help="int8, fp8 (e4m3): quantize a float checkpoint per output channel while loading; dequantize: GGUF "
             "blocks to --dtype (default: the checkpoint's own format, GGUF blocks kept)")),
    "worker_cls": (("--worker-cls",), dict(
        help="the class every rank is built from, package.module:Class (a subclass of anydev's RankWorker)")),
    "seed": (("--seed",), dict(
        type=int, help="the seed of the sampler's random state, which requests without a seed of their own draw "
                       "from: the same requests in the same order draw the same tokens again, as vLLM's --seed "
                       "(default: not seeded)")),
}

#: field -> its flag, for saying a config message in command-line terms.
FLAGS = {field: flags[0] for field, (flags, _) in OPTIONS.items()}


def add_engine_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                         exclude: tuple[str, ...] = (), defaults: dict | None = None,
                         default_texts: dict[str, str] | None = None) -> None:
    """Add the engine's flags (those of :data:`OPTIONS` not in ``exclude``). A flag not given is
    None, so the field keeps EngineConfig's default, and its help ends with that default; or, for
    this command, ``defaults[field]`` (the flag's default, and its help says so) or what
    ``default_texts[field]`` says (the flag stays None; the command fills the field itself)."""
    defaults, default_texts = defaults or {}, default_texts or {}
    for field, (flags, kwargs) in OPTIONS.items():
        if field in exclude:
            continue
        kwargs = dict(kwargs)
        if field in defaults or field in default_texts:     # the command's default, in place of the field's
            kwargs["help"] = re.sub(r"\s*\(default[^)]*\)", "", kwargs["help"])
        shown = default_texts.get(field, defaults.get(field, _FIELD_DEFAULTS[field]))
        if "(default" not in kwargs["help"] and kwargs.get("action") is None and shown is not None:
            kwargs["help"] += f" (default: {shown})"
        parser.add_argument(*flags, dest=field, default=defaults.get(field), **kwargs)


_FIELD_DEFAULTS = {f.name: f.default for f in fields(EngineConfig)}


def engine_config_from_args(args: argparse.Namespace, **overrides) -> EngineConfig:
    """The EngineConfig of parsed flags: every field the namespace has (None: the field's default),
    then ``overrides``."""
    values = {f.name: getattr(args, f.name) for f in fields(EngineConfig)
              if getattr(args, f.name, None) is not None}
    return EngineConfig(**{**values, **overrides})


def engine_argv(args: argparse.Namespace) -> list[str]:
    """The flags that give the engine settings of ``args`` again (to start another command with them,
    as a benchmark starts ``anydev serve``)."""
    argv = []
    for field, (flags, kwargs) in OPTIONS.items():
        value = getattr(args, field, None)
        if value is None:
            continue
        if kwargs.get("action") in ("store_false", "store_true"):
            argv += [flags[0]] if value is (kwargs["action"] == "store_true") else []
        else:
            argv += [flags[0], str(value)]
    return argv
