"""Running anydev's engine in the checks: the embedded demo model, rank counts it can split over,
KV cache sizes that fit every device, and the cpu reference tokens."""
from __future__ import annotations

import functools

import pytest

from anydev.conformance.support import largest_ranks_dividing, require_devices, require_torch_bridge, run_ranks

BLOCK_SIZE = 16
DTYPE = "float32"  # every backend all-reduces float32, and the cpu reference computes in it
KV_TARGET_MIN, KV_TARGET_MAX = 64 << 20, 1 << 30


@functools.lru_cache(maxsize=None)
def demo():
    """The embedded demo checkpoint (built in code, read-only, shared by every check)."""
    from anydev.core.loading.checkpoint import demo_checkpoint

    return demo_checkpoint()


def engine_ranks(backend, request, minimum: int = 1) -> int:
    """The rank count of the engine checks, recorded for the check of ``request``: the most ranks up to
    ``--tp`` (else the device count) that split the demo model's attention heads (4 of them: on 8
    devices the engine runs at 4, on 3 at 2); skips when that is below ``minimum`` or exceeds the
    devices."""
    require_torch_bridge(backend)
    n = largest_ranks_dividing(backend, request, demo().config.num_attention_heads)
    if n < minimum:
        pytest.skip(f"needs {minimum} ranks; '{backend.name}' runs {n} here (set --tp on a machine with more devices)")
    require_devices(backend, n)
    return n


def kv_num_blocks(backend, tp: int) -> int:
    """KV blocks for a cache of 1/64 of the smallest device's free memory, within 64 MiB .. 1 GiB per
    rank: big enough that a host copy of it would stand out, small enough for a CI machine."""
    free = min(backend.device(i).memory_info().free for i in range(tp))
    target = min(max(free // 64, KV_TARGET_MIN), KV_TARGET_MAX)
    return max(1, target // kv_block_bytes(tp))


def kv_block_bytes(tp: int) -> int:
    """Bytes of one KV block of one rank (keys and values of every layer; KV heads split or replicated)."""
    config = demo().config
    kv_heads = max(1, config.num_key_value_heads // tp)
    return config.num_hidden_layers * 2 * BLOCK_SIZE * kv_heads * config.head_dim * 4  # float32


def engine_config(backend, tp: int, **overrides):
    from anydev.core import EngineConfig

    settings = dict(device=backend.name, tp=tp, dtype=DTYPE, block_size=BLOCK_SIZE, max_model_len=256, max_num_seqs=8)
    settings.update(overrides)
    return EngineConfig(**settings)


@functools.lru_cache(maxsize=None)
def moe_model():
    """A tiny random Qwen3-MoE checkpoint (2 layers, 4 heads over 2 KV heads, 8 experts of width 32,
    top 2; the demo model's vocabulary, so that :func:`prompt_ids` fit), built in code: the
    mixture-of-experts case of the engine checks."""
    from anydev.core.loading.random_weights import LLAMA_TINY, TINY_EXTRA, model_config, random_checkpoint

    shape = dict(LLAMA_TINY, **TINY_EXTRA["qwen3_moe"], vocab_size=demo().config.vocab_size)
    return random_checkpoint(model_config("qwen3_moe", max_position_embeddings=256, **shape))


@functools.lru_cache(maxsize=None)
def qwen3_model():
    """A tiny random Qwen3 checkpoint (2 layers, 4 heads of 32 over 2 KV heads, per-head q/k norms; the
    demo model's vocabulary), built in code: the case of the engine checks with q/k norms."""
    from anydev.core.loading.random_weights import LLAMA_TINY, TINY_EXTRA, model_config, random_checkpoint

    shape = dict(LLAMA_TINY, **TINY_EXTRA["qwen3"], vocab_size=demo().config.vocab_size)
    return random_checkpoint(model_config("qwen3", max_position_embeddings=256, **shape))


def start_engine(config, fail_at=None, checkpoint=None):
    """``InferEngine(checkpoint or demo, config)``, started on a helper thread so that a hang fails the
    check; ``fail_at=(rank, phase)`` injects a fault there (ranks built from :mod:`.faults`' failing
    worker)."""
    from dataclasses import replace

    from anydev.conformance.faults import failing_worker
    from anydev.core import InferEngine

    if fail_at is not None:
        config = replace(config, worker_cls=failing_worker(*fail_at))
    return run_ranks(1, lambda _: InferEngine(checkpoint or demo(), config),
                     f"engine init on {config.device} x{config.tp}")[0]


# ---- inference ------------------------------------------------------------------------------

PROMPTS = (
    "hello",
    "the model of the device is",
    "what is the token that you have from the user and the assistant, and what can we do with it in this world",
)
MAX_NEW_TOKENS = 24


@functools.lru_cache(maxsize=None)
def prompt_ids() -> tuple[tuple[int, ...], ...]:
    """The prompts as token ids (different lengths), BOS included."""
    tokenizer = demo().tokenizer
    return tuple(tuple(tokenizer.encode(p)) for p in PROMPTS)


def greedy_tokens(config, prompts=None, checkpoint=None) -> list[list[int]]:
    from anydev.core import SamplingParams

    engine = start_engine(config, checkpoint=checkpoint)
    try:
        outputs = engine.generate_ids([list(p) for p in (prompts or prompt_ids())], SamplingParams(max_new_tokens=MAX_NEW_TOKENS))
    finally:
        engine.close()
    return [o.token_ids for o in outputs]


@functools.lru_cache(maxsize=None)
def cpu_reference() -> tuple[tuple[int, ...], ...]:
    """Greedy tokens of the demo model on the cpu reference backend: one rank, float32."""
    from anydev.core import EngineConfig

    config = EngineConfig(device="cpu", tp=1, dtype=DTYPE, block_size=BLOCK_SIZE, max_model_len=256, max_num_seqs=8)
    return tuple(tuple(t) for t in greedy_tokens(config))
