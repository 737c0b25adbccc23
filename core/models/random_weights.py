"""Llama-shaped checkpoints with random weights made in process (benchmarks; nothing on disk).

Weights are slices of one seeded normal pool, scaled per tensor (std 1/sqrt(fan_in) for projections,
1 for embeddings, 1 +- 0.1 for norms), so a 1B-parameter model is ready in about a second. Tensors
overlap in the pool: fine for timing, not a model of anything. With ``with_tokenizer`` the demo
model's tokenizer comes along (its EOS then stops generation).
"""
from __future__ import annotations

import math
import zlib

import torch

from ..config import expected_tensor_names
from .sharding import full_shape

#: The ~1B Llama shape of the decode benchmark.
LLAMA_1B = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8)


def llama_config(max_position_embeddings: int = 4096, **shape):
    """A llama ModelConfig of the given shape (defaults: :data:`LLAMA_1B`)."""
    from ..checkpoint import ModelConfig

    dims = {**LLAMA_1B, **shape}
    return ModelConfig(
        architecture="llama", head_dim=dims["hidden_size"] // dims["num_attention_heads"], rms_norm_eps=1e-5,
        rope_theta=500000.0, rope_scaling=None, max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False, attention_bias=False, torch_dtype="bfloat16", bos_token_id=0,
        eos_token_ids=[], **dims,   # no EOS: generation always runs to max_new_tokens
    )


def add_shape_arguments(parser) -> None:
    """``--layers --hidden --heads --kv-heads --intermediate --vocab`` (defaults: :data:`LLAMA_1B`)."""
    parser.add_argument("--layers", type=int, default=LLAMA_1B["num_hidden_layers"])
    parser.add_argument("--hidden", type=int, default=LLAMA_1B["hidden_size"])
    parser.add_argument("--heads", type=int, default=LLAMA_1B["num_attention_heads"])
    parser.add_argument("--kv-heads", type=int, default=LLAMA_1B["num_key_value_heads"])
    parser.add_argument("--intermediate", type=int, default=None, help="default: 4 x hidden")
    parser.add_argument("--vocab", type=int, default=LLAMA_1B["vocab_size"])


def config_from_arguments(args):
    """The llama ModelConfig that :func:`add_shape_arguments`' options describe."""
    return llama_config(num_hidden_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                        num_key_value_heads=args.kv_heads, intermediate_size=args.intermediate or 4 * args.hidden,
                        vocab_size=args.vocab)


class RandomStore:
    """A TensorStore (see :mod:`anydev.core.checkpoint`) of seeded random weights, made on demand."""

    def __init__(self, config, seed: int = 0):
        self.shapes = {name: full_shape(name, config) for name in expected_tensor_names(config)}
        largest = max(math.prod(s) for s in self.shapes.values())
        generator = torch.Generator().manual_seed(seed)
        self._pool = torch.randn(2 * largest, generator=generator)

    def names(self) -> list[str]:
        return list(self.shapes)

    def load(self, name: str) -> torch.Tensor:
        shape = self.shapes[name]
        numel = math.prod(shape)
        start = zlib.crc32(name.encode()) % (self._pool.numel() - numel + 1)
        noise = self._pool[start:start + numel].view(shape)
        if name.endswith("norm.weight"):
            return 1.0 + 0.1 * noise
        if "embed_tokens" in name:
            return noise.clone()
        return noise / math.sqrt(shape[-1])

    def close(self) -> None:
        self._pool = None


def random_checkpoint(config=None, seed: int = 0, with_tokenizer: bool = False):
    """A Checkpoint of ``config`` (default: the ~1B llama shape) with random weights."""
    from ..checkpoint import Checkpoint
    from ..demo_model import build_demo_model

    config = config or llama_config()
    tokenizer = build_demo_model()[1] if with_tokenizer else None
    return Checkpoint(config, tokenizer, RandomStore(config, seed), f"random weights ({config.num_hidden_layers} layers, "
                      f"hidden {config.hidden_size})")
