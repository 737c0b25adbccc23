"""Tensor-parallel sharding, gpt-fast style: the model code only sees its rank's local shapes; this
module says which slice of each HF tensor a rank holds.

q/k/v and gate/up are column-parallel (a rank holds some heads / some intermediate rows), o_proj and
down_proj are row-parallel (the matching input columns; their outputs are summed by all_reduce).
The lm_head is split by vocabulary rows when ``tp`` divides the vocabulary (each rank's logits are
all-gathered); embeddings, norms and the o_proj bias are replicated. When ``tp`` exceeds the KV heads, each KV head is
replicated on the ``tp // num_kv_heads`` ranks whose query heads use it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import EngineConfigError


@dataclass(frozen=True)
class RankShard:
    """What rank ``rank`` of ``tp`` holds: local head counts and where its slices start."""

    tp: int
    rank: int
    num_heads: int           # local query heads
    num_kv_heads: int        # local KV heads
    head_dim: int
    intermediate_size: int   # local MLP width
    first_head: int
    first_kv_head: int
    vocab_part: int = 0      # lm_head rows this rank holds (rank * vocab_part ...); 0: all of them
    moe_intermediate_size: int = 0   # local width of each expert (MoE families; every rank holds every expert)


def check_tp(config, tp: int) -> None:
    """Raise :class:`EngineConfigError` when ``tp`` cannot split this model evenly."""
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise EngineConfigError(f"tp must be an integer >= 1, got {tp!r}")
    if heads % tp:
        raise EngineConfigError(
            f"tp={tp} does not divide the model's {heads} attention heads; "
            f"use one of {[d for d in range(1, heads + 1) if heads % d == 0]}"
        )
    if kv_heads % tp and tp % kv_heads:
        raise EngineConfigError(
            f"tp={tp} and the model's {kv_heads} KV heads: one must divide the other to share KV heads evenly"
        )
    if config.intermediate_size % tp:
        raise EngineConfigError(f"tp={tp} does not divide the MLP width {config.intermediate_size}")
    experts_width = getattr(config, "moe_intermediate_size", 0)
    if experts_width % tp:
        raise EngineConfigError(f"tp={tp} does not divide the experts' width {experts_width} (each rank holds "
                                "every expert, split by its intermediate dimension)")


def rank_shard(config, tp: int, rank: int) -> RankShard:
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    local_heads = heads // tp
    if tp <= kv_heads:
        local_kv, first_kv = kv_heads // tp, rank * (kv_heads // tp)
    else:  # KV heads replicated: this rank's query heads all use one KV head
        local_kv, first_kv = 1, rank * kv_heads // tp
    vocab_part = config.vocab_size // tp if tp > 1 and config.vocab_size % tp == 0 else 0
    return RankShard(tp, rank, local_heads, local_kv, config.head_dim, config.intermediate_size // tp,
                     rank * local_heads, first_kv, vocab_part, getattr(config, "moe_intermediate_size", 0) // tp)


def full_shape(name: str, config) -> tuple[int, ...]:
    """The shape of ``name`` in the checkpoint (HF layout, [out, in])."""
    h, d = config.hidden_size, config.head_dim
    q, kv, inter = config.num_attention_heads * d, config.num_key_value_heads * d, config.intermediate_size
    kind = name.rsplit(".", 2)[-2]
    shapes = {
        "embed_tokens": (config.vocab_size, h), "lm_head": (config.vocab_size, h),
        "q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
        "gate_proj": (inter, h), "up_proj": (inter, h), "down_proj": (h, inter),
    }
    shape = shapes.get(kind, (h,))
    return shape[:1] if name.endswith(".bias") else shape


def _slice(name: str, shard: RankShard) -> tuple[int, int, int] | None:
    """(dim, start, length) of the rank's slice of ``name``, or None when replicated."""
    d = shard.head_dim
    kind = name.rsplit(".", 2)[-2]
    if name.endswith(".bias") and kind in ("o_proj", "down_proj"):
        return None   # a row-parallel bias is added once, after the all-reduce
    if kind == "q_proj":
        return 0, shard.first_head * d, shard.num_heads * d
    if kind in ("k_proj", "v_proj"):
        return 0, shard.first_kv_head * d, shard.num_kv_heads * d
    if kind in ("gate_proj", "up_proj"):
        return 0, shard.rank * shard.intermediate_size, shard.intermediate_size
    if kind == "o_proj":
        return 1, shard.first_head * d, shard.num_heads * d
    if kind == "down_proj":
        return 1, shard.rank * shard.intermediate_size, shard.intermediate_size
    if kind == "lm_head" and shard.vocab_part:
        return 0, shard.rank * shard.vocab_part, shard.vocab_part
    return None


def local_shape(name: str, config, shard: RankShard) -> tuple[int, ...]:
    shape = list(full_shape(name, config))
    cut = _slice(name, shard)
    if cut is not None:
        shape[cut[0]] = cut[2]
    return tuple(shape)


def slice_of(name: str, shard: RankShard) -> tuple[int, int, int] | None:
    """(dim, start, length) of the part of checkpoint tensor ``name`` that the rank holds, or None
    when it holds all of it: what the loader reads for the rank, and nothing else."""
    return _slice(name, shard)
