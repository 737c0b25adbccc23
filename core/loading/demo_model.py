"""The embedded demo model: a small llama-shaped model built entirely in code.

Weights come from ``torch.rand`` on a seeded CPU ``torch.Generator`` (uniform, float32), which gives
the same bits on every machine; the tokenizer is a byte-level BPE whose merges are spelled out below.
Four heads over two KV heads, so tensor parallelism over 2 and 4 ranks works.
"""
from __future__ import annotations

import math

import torch
from tokenizers import AddedToken, Tokenizer as BackendTokenizer, decoders, models, pre_tokenizers, processors

from .checkpoint_errors import ModelLoadError
from ..config import ModelConfig
from .tensor_store import InMemoryStore
from .tokenizer import Tokenizer

BOS, EOS = "<s>", "</s>"
# Each word becomes a chain of merges ("Ġt"+"h", "Ġth"+"e", ...), so these strings encode to one token.
_WORDS = [
    " the", " and", " of", " to", " in", " is", " you", " that", " it", " for", " on", " with", " as",
    " are", " this", " be", " at", " have", " from", " or", " one", " by", " not", " but", " what",
    " all", " we", " can", " there", " hello", " world", " model", " device", " token", " user",
    " assistant", "user", "assistant", "ing", "ed", "er", "es", "en", "th", "he", "an", "re", "on",
    ": ", ".\n", ", ",
]
# Like HF templates, it writes the BOS itself: encode the rendered text with add_special_tokens=False.
DEMO_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
DEMO_SHAPE = dict(vocab_size=384, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character table (what ByteLevel pre-tokenizes into)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


def build_demo_tokenizer() -> BackendTokenizer:
    spell = _bytes_to_unicode()
    vocab = {BOS: 0, EOS: 1}
    vocab.update({spell[b]: 2 + b for b in range(256)})
    merges: list[tuple[str, str]] = []
    for word in _WORDS:
        spelled = "".join(spell[b] for b in word.encode("utf-8"))
        for end in range(2, len(spelled) + 1):
            if spelled[:end] not in vocab:
                merges.append((spelled[:end - 1], spelled[end - 1]))
                vocab[spelled[:end]] = len(vocab)
    backend = BackendTokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)])
    backend.add_special_tokens([AddedToken(BOS, special=True), AddedToken(EOS, special=True)])
    return backend


def demo_config() -> ModelConfig:
    return ModelConfig(
        architecture="llama", head_dim=DEMO_SHAPE["hidden_size"] // DEMO_SHAPE["num_attention_heads"],
        rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None, max_position_embeddings=1024,
        tie_word_embeddings=False, attention_bias=False, torch_dtype="float32",
        bos_token_id=0, eos_token_ids=[1], **DEMO_SHAPE)


def demo_weights(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """HF-named float32 weights. Projections are uniform with std 1/sqrt(fan_in) (so activations stay
    O(1)); embeddings std 1; norms near 1; the lm_head a little hotter so greedy output varies."""
    generator = torch.Generator().manual_seed(seed)

    def uniform(shape: tuple[int, ...], std: float, mean: float = 0.0) -> torch.Tensor:
        half_width = std * math.sqrt(3.0)   # U(-a, a) has std a/sqrt(3)
        return mean + (torch.rand(shape, generator=generator) * 2 - 1) * half_width

    h, inter, v = config.hidden_size, config.intermediate_size, config.vocab_size
    q_out = config.num_attention_heads * config.head_dim
    kv_out = config.num_key_value_heads * config.head_dim
    weights = {"model.embed_tokens.weight": uniform((v, h), 1.0)}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}"
        weights.update({
            f"{p}.input_layernorm.weight": uniform((h,), 0.1, mean=1.0),
            f"{p}.self_attn.q_proj.weight": uniform((q_out, h), 1 / math.sqrt(h)),
            f"{p}.self_attn.k_proj.weight": uniform((kv_out, h), 1 / math.sqrt(h)),
            f"{p}.self_attn.v_proj.weight": uniform((kv_out, h), 1 / math.sqrt(h)),
            f"{p}.self_attn.o_proj.weight": uniform((h, q_out), 1 / math.sqrt(q_out)),
            f"{p}.post_attention_layernorm.weight": uniform((h,), 0.1, mean=1.0),
            f"{p}.mlp.gate_proj.weight": uniform((inter, h), 1 / math.sqrt(h)),
            f"{p}.mlp.up_proj.weight": uniform((inter, h), 1 / math.sqrt(h)),
            f"{p}.mlp.down_proj.weight": uniform((h, inter), 1 / math.sqrt(inter)),
        })
    weights["model.norm.weight"] = uniform((h,), 0.1, mean=1.0)
    lm_head = uniform((v, h), 2 / math.sqrt(h))
    # Readable output: the rows of BOS and of bytes outside printable ASCII are zeroed, so their
    # logit is exactly 0 and greedy picks one of the many printable tokens with a positive logit.
    unreadable = [0] + [2 + byte for byte in range(256) if not 32 <= byte <= 126]
    lm_head[unreadable] = 0.0
    weights["lm_head.weight"] = lm_head
    return weights


def build_demo_model(seed: int = 0):
    """(config, tokenizer, store) of the demo model."""
    config = demo_config()
    backend = build_demo_tokenizer()
    if backend.get_vocab_size() > config.vocab_size:   # a bug in this file, caught on every run
        raise ModelLoadError(f"embedded demo: the tokenizer has {backend.get_vocab_size()} tokens but the model's "
                             f"vocab_size is {config.vocab_size}; raise DEMO_SHAPE's vocab_size")
    tokenizer = Tokenizer(backend, chat_template=DEMO_CHAT_TEMPLATE,
                          special_tokens={"bos_token": BOS, "eos_token": EOS},
                          bos_token_id=0, eos_token_ids=[1])
    return config, tokenizer, InMemoryStore(demo_weights(config, seed))
