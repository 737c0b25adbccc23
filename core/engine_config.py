"""The engine's settings (:class:`EngineConfig`) and their validation, checked before any weights load."""
from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import EngineConfigError
from .loading.quantization_names import QUANTIZATIONS
from .rank.kernel_choice import KERNEL_MODES
from .rank.worker_class import DEFAULT_WORKER
from .sched.sampling_params import MAX_SEED

# No torch here (the HTTP front ends build an EngineConfig for the engine core): validate_config
# imports the modules that load it.

#: ``dtype``'s accepted names and the torch dtype (its name in ``torch``) each means.
DTYPES = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
}


@dataclass
class EngineConfig:
    device: str | None = None         # backend name; default: $ANYDEV_DEVICE, else cpu
    tp: int = 1
    #: Pipeline stages (layers split in ``pp`` contiguous stages, TP inside each; tp x pp ranks).
    #: At pp > 1 steps run eagerly and synchronously (no decode graphs, no overlapped steps); decode
    #: batches of 2 rows or more are split into min(pp, rows) micro-batches so that the stages overlap.
    pp: int = 1
    dtype: str | None = None          # default: bfloat16 on accelerators, float32 on cpu
    block_size: int = 16
    num_blocks: int | None = None     # default: what fits in free memory x memory_fraction, capped
    memory_fraction: float = 0.9      # share of the memory left after weights the KV cache may take
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    max_num_seqs: int = 32
    #: Tokens one step may feed (decodes plus prefill chunks); default 2048 (at least max_model_len
    #: when chunked prefill is off, since a prompt then goes in whole).
    max_num_batched_tokens: int | None = None
    #: Split long prompts over steps, beside the running decodes (off: a step prefills or decodes).
    enable_chunked_prefill: bool = True
    #: Reuse the KV blocks of a cached prompt prefix (see :mod:`.block_manager`).
    enable_prefix_caching: bool = True
    #: Decode through device graphs where the backend supports them (``--enforce-eager`` turns it
    #: off): one capture per batch bucket, all at start-up.
    use_graphs: bool = True
    #: "native": the backend's kernels where it offers them (the references elsewhere); "unfused": the
    #: same with every fused kernel run as its parts (to measure a fusion); "reference": the
    #: contract's torch references only (to compare greedy tokens with and without).
    kernels: str = "native"
    #: Pinned host memory per rank for loading the weights (two buffers): all the host memory a
    #: rank's load holds, whatever the model's size.
    weight_staging_bytes: int = 128 << 20
    #: Threads per rank reading the checkpoint (default: the host's cores shared by the ranks, at most 8).
    weight_read_threads: int | None = None
    #: With decode graphs on, also capture the steps that are not pure decodes (prompt chunks, mixed
    #: steps) as piecewise graphs around the attentions, per token bucket up to this many tokens
    #: (0: such steps run eagerly).
    piecewise_max_tokens: int = 2048
    #: With decode graphs on, capture at start-up only the smallest batch bucket and the smallest
    #: token bucket; every other bucket is captured by the first step that needs it (the same graphs,
    #: so the same tokens: start-up is shorter, that first step longer).
    lazy_graphs: bool = False
    #: With decode graphs on, every rank runs a padding step of each graph bucket and token bucket
    #: in a thread pool while its weights load, so the kernels compile beside the load, not at the
    #: captures (:mod:`anydev.core.rank.kernel_warmup`; the tokens are the same either way). Off by
    #: default: torch keeps a cuBLAS workspace for every (thread, stream) the steps ran on, so on a
    #: CUDA device a failed start leaves some 32 MiB a warm-up step behind (the conformance suite's
    #: leak check on the H200).
    warm_kernels: bool = False
    #: Build and launch step N+1 while the device runs step N, reading N's tokens back afterwards
    #: (off: each step's tokens are read back before the next step is planned).
    async_steps: bool = True
    #: Where the ranks run (:mod:`.executors.registry`): "threads" (one process), "mp" (one process per rank on
    #: this machine, started here) or "torchrun" (one process per rank started by torchrun; build the
    #: engine on RANK 0, the other ranks run ``anydev.core.executors.rank_process.follow``).
    executor: str = "threads"
    #: Projection weights on the device: None keeps what the checkpoint stores (GGUF blocks that
    #: ``quantized_linear`` reads stay quantized); "int8" or "fp8" quantize a float checkpoint per
    #: output channel while it loads, on each rank's device; "dequantize" turns GGUF blocks into
    #: ``dtype`` (the reference to compare with). See :mod:`.weights`.
    quantization: str | None = None
    #: The class every rank is built from, "package.module:Class": a subclass of
    #: :class:`~.rank.rank_worker.RankWorker` that every rank process can import (see
    #: :mod:`.rank.worker_class`; the extension points are RankWorker's).
    worker_cls: str = DEFAULT_WORKER
    #: The seed of the sampling rank's random state, which requests without a seed of their own draw
    #: from: the same requests in the same order draw the same tokens again (vLLM's ``--seed``).
    #: None: torch's state as the process has it.
    seed: int | None = None


def default_read_threads(tp: int) -> int:
    """Reader threads per rank: the host's cores shared among the ranks, 1 to 8."""
    return max(1, min(8, (os.cpu_count() or 1) // tp))


def validate_config(config: EngineConfig, model) -> None:
    """Raise :class:`EngineConfigError` for the first bad setting of ``config`` for a model of
    config ``model`` (checked before any weights load), the executor's and the worker class's
    own checks included."""
    from .executors.registry import validate_executor
    from .models.pipeline import RankLayout
    from .models.registry import UnknownModelFamilyError, family_of
    from .rank.worker_class import worker_class

    try:
        family_of(model)
    except UnknownModelFamilyError as exc:
        raise EngineConfigError(str(exc)) from None
    RankLayout(config.tp, config.pp).check_model(model)
    for name in ("block_size", "max_num_seqs"):
        value = getattr(config, name)
        if not _positive_int(value):
            raise EngineConfigError(f"{name} must be an integer >= 1, got {value!r}")
    if not _positive_int(config.weight_staging_bytes) or config.weight_staging_bytes < 2:
        raise EngineConfigError(f"weight_staging_bytes must be an integer >= 2 (two buffers), "
                                f"got {config.weight_staging_bytes!r}")
    if config.weight_read_threads is not None and not _positive_int(config.weight_read_threads):
        raise EngineConfigError(f"weight_read_threads must be an integer >= 1 or None, got {config.weight_read_threads!r}")
    if config.seed is not None and (isinstance(config.seed, bool) or not isinstance(config.seed, int)
                                    or not 0 <= config.seed <= MAX_SEED):
        raise EngineConfigError(f"seed must be an integer in 0..2**64-1 or None, got {config.seed!r}")
    if config.num_blocks is not None and not _positive_int(config.num_blocks):
        raise EngineConfigError(f"num_blocks must be an integer >= 1 or None, got {config.num_blocks!r}")
    if not isinstance(config.memory_fraction, (int, float)) or not 0 < config.memory_fraction <= 1:
        raise EngineConfigError(f"memory_fraction must be in (0, 1], got {config.memory_fraction!r}")
    if config.max_model_len is not None:
        if not _positive_int(config.max_model_len) or config.max_model_len < 2:
            raise EngineConfigError(f"max_model_len must be an integer >= 2 or None, got {config.max_model_len!r}")
        if config.max_model_len > model.max_position_embeddings:
            raise EngineConfigError(
                f"max_model_len {config.max_model_len} exceeds the model's context of "
                f"{model.max_position_embeddings} tokens (max_position_embeddings)"
            )
    context = config.max_model_len or model.max_position_embeddings
    if config.block_size > context:
        raise EngineConfigError(
            f"block_size {config.block_size} is larger than the context of {context} tokens (max_model_len; "
            f"default the model's); use a block_size of at most {context}"
        )
    if config.dtype is not None and config.dtype not in DTYPES:
        raise EngineConfigError(f"dtype {config.dtype!r} is not supported; use one of {sorted(set(DTYPES))}")
    if not isinstance(config.piecewise_max_tokens, int) or isinstance(config.piecewise_max_tokens, bool) \
            or config.piecewise_max_tokens < 0:
        raise EngineConfigError(f"piecewise_max_tokens must be an integer >= 0, got {config.piecewise_max_tokens!r}")
    if not isinstance(config.lazy_graphs, bool):
        raise EngineConfigError(f"lazy_graphs must be True or False, got {config.lazy_graphs!r}")
    if not isinstance(config.warm_kernels, bool):
        raise EngineConfigError(f"warm_kernels must be True or False, got {config.warm_kernels!r}")
    if config.quantization is not None and config.quantization not in QUANTIZATIONS:
        raise EngineConfigError(f"quantization {config.quantization!r} is not supported; use one of "
                                f"{', '.join(QUANTIZATIONS)} (or none: the checkpoint's own format)")
    if not isinstance(config.async_steps, bool):
        raise EngineConfigError(f"async_steps must be true or false, got {config.async_steps!r}")
    validate_executor(config)
    if config.kernels not in KERNEL_MODES:
        raise EngineConfigError(f"kernels must be one of {KERNEL_MODES}, got {config.kernels!r}")
    worker_class(config.worker_cls).check_config(config)


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype a :data:`DTYPES` name means."""
    import torch

    return getattr(torch, DTYPES[name])


def resolve_dtype(config: EngineConfig, backend) -> torch.dtype:
    """The torch dtype ``config`` asks for (default: bfloat16 on accelerators, float32 on the cpu);
    :class:`EngineConfigError` when ranks must exchange it and the backend's collectives cannot."""
    if config.dtype is not None:
        name = DTYPES[config.dtype]
    else:
        name = "float32" if backend.torch_device_type == "cpu" else "bfloat16"
    dtype = torch_dtype(name)
    if (config.tp > 1 or config.pp > 1) and name not in backend.runtime.collective_dtypes:
        raise EngineConfigError(
            f"backend '{backend.name}' cannot all-reduce {name}; choose a dtype among "
            f"{', '.join(backend.runtime.collective_dtypes)}"
        )
    return dtype
