"""Checkpoints of the registry's families (llama, qwen3, qwen3_moe) with random weights made in process (benchmarks; nothing on disk).

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
from ..models.registry import family_of
from .gguf_writing import gguf_model_writer, write_gguf

#: The ~1B Llama shape of the decode benchmark.
LLAMA_1B = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8)
#: The Llama-3-8B shape (the decode targets' model).
LLAMA_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8)
#: A llama shape too small to keep any device busy (its step time is host work), 2 layers.
LLAMA_TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)


#: The Qwen3-8B shape (dense; q/k norms, heads of 128).
QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128)
#: The Qwen3-30B-A3B shape: 48 layers, 128 experts of width 768, 8 active per token.
QWEN3_30B_A3B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                     num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                     num_experts_per_tok=8, moe_intermediate_size=768)
#: Tiny shapes of those families (cpu smoke runs): LLAMA_TINY's, with their own fields.
TINY_EXTRA = {"qwen3": dict(head_dim=32), "qwen3_moe": dict(head_dim=32, num_experts=8, num_experts_per_tok=2,
                                                          moe_intermediate_size=32)}


def model_config(architecture: str = "llama", max_position_embeddings: int = 4096, **shape):
    """A ModelConfig of ``architecture`` (llama: :func:`llama_config`; qwen3, qwen3_moe: the shape's
    fields, ``head_dim`` among them; a qwen3_moe's every layer sparse, its top-k renormalised)."""
    if architecture == "llama":
        return llama_config(max_position_embeddings, **shape)
    family = family_of(architecture)
    extra = {}
    if "num_experts" in shape:
        extra = dict(norm_topk_prob=True, moe_layers=tuple(range(shape["num_hidden_layers"])))
    return family.config_class(
        architecture=architecture, rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=False, attention_bias=False,
        torch_dtype="bfloat16", bos_token_id=0, eos_token_ids=[], **shape, **extra)


def llama_config(max_position_embeddings: int = 4096, **shape):
    """A llama ModelConfig of the given shape (defaults: :data:`LLAMA_1B`)."""
    from .checkpoint import ModelConfig

    dims = {**LLAMA_1B, **shape}
    return ModelConfig(
        architecture="llama", head_dim=dims["hidden_size"] // dims["num_attention_heads"], rms_norm_eps=1e-5,
        rope_theta=500000.0, rope_scaling=None, max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False, attention_bias=False, torch_dtype="bfloat16", bos_token_id=0,
        eos_token_ids=[], **dims,   # no EOS: generation always runs to max_new_tokens
    )


def add_shape_arguments(parser) -> None:
    """``--layers --hidden --heads --kv-heads --intermediate --vocab`` (defaults: :data:`LLAMA_1B`), and
    ``--arch`` (llama, qwen3, qwen3_moe) with ``--head-dim``, ``--experts``, ``--experts-per-token``,
    ``--moe-intermediate`` for qwen3/qwen3_moe."""
    parser.add_argument("--arch", default="llama", choices=("llama", "qwen3", "qwen3_moe"))
    parser.add_argument("--head-dim", type=int, default=None, help="default: hidden / heads")
    parser.add_argument("--experts", type=int, default=128, help="qwen3_moe: experts a layer (default 128)")
    parser.add_argument("--experts-per-token", type=int, default=8, help="qwen3_moe: top k (default 8)")
    parser.add_argument("--moe-intermediate", type=int, default=768, help="qwen3_moe: expert width (default 768)")
    parser.add_argument("--layers", type=int, default=LLAMA_1B["num_hidden_layers"])
    parser.add_argument("--hidden", type=int, default=LLAMA_1B["hidden_size"])
    parser.add_argument("--heads", type=int, default=LLAMA_1B["num_attention_heads"])
    parser.add_argument("--kv-heads", type=int, default=LLAMA_1B["num_key_value_heads"])
    parser.add_argument("--intermediate", type=int, default=None, help="default: 4 x hidden")
    parser.add_argument("--vocab", type=int, default=LLAMA_1B["vocab_size"])


def config_from_arguments(args):
    """The ModelConfig that :func:`add_shape_arguments`' options describe."""
    shape = dict(num_hidden_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                 num_key_value_heads=args.kv_heads, intermediate_size=args.intermediate or 4 * args.hidden,
                 vocab_size=args.vocab)
    if args.arch == "llama":
        return llama_config(**shape)
    shape["head_dim"] = args.head_dim or args.hidden // args.heads
    if args.arch == "qwen3_moe":
        shape.update(num_experts=args.experts, num_experts_per_tok=args.experts_per_token,
                     moe_intermediate_size=args.moe_intermediate)
    return model_config(args.arch, **shape)


class RandomStore:
    """A TensorStore (see :mod:`anydev.core.loading.checkpoint`) of seeded random weights, made on demand."""

    def __init__(self, config, seed: int = 0):
        shape_of = family_of(config).full_shape
        self.shapes = {name: shape_of(name, config) for name in expected_tensor_names(config)}
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
    from .checkpoint import Checkpoint
    from .demo_model import build_demo_model

    config = config or llama_config()
    tokenizer = build_demo_model()[1] if with_tokenizer else None
    checkpoint = Checkpoint(config, tokenizer, RandomStore(config, seed), f"random weights ({config.num_hidden_layers} "
                            f"layers, hidden {config.hidden_size})")
    checkpoint.recipe = (random_checkpoint, (config, seed, with_tokenizer))   # how another rank process rebuilds it
    return checkpoint


def save_random_model(directory, config, dtype: torch.dtype = torch.bfloat16, shard_bytes: int = 5 << 30,
                      seed: int = 0) -> int:
    """Write a random ``config`` model as an HF directory, the way transformers saves one: weights in
    ``dtype`` split into safetensors files of at most ``shard_bytes`` (``model-0000i-of-0000n``, with
    ``model.safetensors.index.json``; one ``model.safetensors`` when it all fits), config.json,
    generation_config.json and the demo model's tokenizer. One file's tensors are in memory at a time.
    Returns the number of parameters."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    from .demo_model import BOS, DEMO_CHAT_TEMPLATE, EOS, build_demo_tokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    store = RandomStore(config, seed)
    itemsize = torch.empty((), dtype=dtype).element_size()
    groups: list[list[str]] = [[]]
    size = 0
    for name, shape in store.shapes.items():
        nbytes = math.prod(shape) * itemsize
        if groups[-1] and size + nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    files = ["model.safetensors"] if len(groups) == 1 else \
        [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    for file, names in zip(files, groups):
        save_file({name: store.load(name).to(dtype).contiguous() for name in names}, str(directory / file),
                  metadata={"format": "pt"})
    if len(files) > 1:
        total = sum(math.prod(store.shapes[n]) * itemsize for n in store.shapes)
        index = {"metadata": {"total_size": total},
                 "weight_map": {name: file for file, names in zip(files, groups) for name in names}}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    hf_config = {
        "architectures": list(family_of(config).hf_architectures[:1]), "model_type": config.architecture,
        "head_dim": config.head_dim, "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads, "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta, "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": False, "torch_dtype": str(dtype).removeprefix("torch."), "bos_token_id": 0,
        "eos_token_id": 1,
    }
    if getattr(config, "num_experts", 0):
        hf_config.update(num_experts=config.num_experts, num_experts_per_tok=config.num_experts_per_tok,
                         moe_intermediate_size=config.moe_intermediate_size, norm_topk_prob=config.norm_topk_prob,
                         decoder_sparse_step=1, mlp_only_layers=[i for i in range(config.num_hidden_layers)
                                                                 if i not in config.moe_layers])
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    build_demo_tokenizer().save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "chat_template": DEMO_CHAT_TEMPLATE}))
    return sum(math.prod(shape) for shape in store.shapes.values())


#: GGUF tensor types :func:`save_random_gguf` writes.
#: Per GGUF block format of :func:`save_random_gguf`: the byte offsets of its float16 fields, and the
#: largest code magnitude its scale multiplies (the scale is 1 / (that x sqrt(fan_in))).
_RANDOM_BLOCKS = {"Q8_0": ((0,), 127), "Q4_0": ((0,), 8), "Q4_1": ((0, 2), 15), "Q4_K": ((0, 2), 63 * 15),
                  "Q6_K": ((208,), 127 * 32)}
GGUF_TYPES = ("F32", "F16", *_RANDOM_BLOCKS)


#: GGUF's token type of a token no text encodes to (llama.cpp's ``LLAMA_TOKEN_TYPE_UNUSED``).
_UNUSED_TOKEN = 5


def gguf_writer(path, config, pad_tokens: bool = False):
    """A ``gguf.GGUFWriter`` for ``path`` holding the metadata of a llama ``config`` model with the demo
    tokenizer; the caller adds the tensors (HF names through ``gguf_loader.gguf_name``; llama.cpp's
    q/k row order) and writes the file (``write_gguf``). ``pad_tokens``: the token list padded with
    unused tokens to ``config.vocab_size``, as llama.cpp needs (it sizes the token embedding from the
    list)."""
    import json

    from .demo_model import BOS, EOS, build_demo_tokenizer

    tokenizer = json.loads(build_demo_tokenizer().to_str())["model"]
    tokens = sorted(tokenizer["vocab"], key=tokenizer["vocab"].get)
    types = [3 if t in (BOS, EOS) else 1 for t in tokens]
    if pad_tokens and config.vocab_size > len(tokens):
        padding = [f"<unused_{i}>" for i in range(len(tokens), config.vocab_size)]
        tokens, types = tokens + padding, types + [_UNUSED_TOKEN] * len(padding)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["merges"]]
    writer = gguf_model_writer(path, "llama", config, rope_theta=config.rope_theta, head_dim=config.head_dim)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer["vocab"][BOS])
    writer.add_eos_token_id(tokenizer["vocab"][EOS])
    return writer


def save_random_gguf(path, config, tensor_type: str = "Q8_0", seed: int = 0) -> int:
    """Write a random ``config`` model as a GGUF file (llama architecture, the demo tokenizer, its token
    list padded to the vocabulary so that llama.cpp reads the file too): 2-D
    weights in ``tensor_type``, norms in F32. Quantized blocks are drawn directly (random bytes, their
    fp16 scale fields 1/(largest code x sqrt(fan_in))), so even an 8B shape is written in seconds; the
    file is for timing the loader and the kernels, not a model of anything. Returns the number of
    parameters."""
    import gguf
    import numpy as np

    from anydev.plugin_api.weight_formats import BLOCK_FORMATS

    from .gguf_loader import gguf_name

    if tensor_type not in GGUF_TYPES:
        raise ValueError(f"tensor type {tensor_type!r}: use one of {GGUF_TYPES}")
    writer = gguf_writer(path, config, pad_tokens=True)

    store = RandomStore(config, seed)
    rng = np.random.default_rng(seed)
    for name, shape in store.shapes.items():
        if len(shape) == 1 or tensor_type == "F32":
            writer.add_tensor(gguf_name(name), store.load(name).numpy().astype(np.float32))
        elif tensor_type == "F16":
            writer.add_tensor(gguf_name(name), store.load(name).numpy().astype(np.float16))
        else:
            rows, cols = shape
            block = BLOCK_FORMATS[tensor_type.lower()]
            fields, largest = _RANDOM_BLOCKS[tensor_type]
            blocks = rng.integers(0, 256, size=(rows, cols // block.elems, block.bytes), dtype=np.uint8)
            scale = np.frombuffer(np.float16(1.0 / (largest * math.sqrt(cols))).tobytes(), dtype=np.uint8)
            for at in fields:
                blocks[..., at:at + 2] = scale
            writer.add_tensor(gguf_name(name), blocks.reshape(rows, -1), raw_dtype=gguf.GGMLQuantizationType[tensor_type])
    write_gguf(writer)
    return sum(math.prod(shape) for shape in store.shapes.values())
