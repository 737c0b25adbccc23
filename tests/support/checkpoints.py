"""Writers of tiny test checkpoints (HF safetensors directories and GGUF files).

Other test modules import these: ``from checkpoints import write_hf_checkpoint, write_gguf_checkpoint``
(tests/conftest.py puts tests/support/ on sys.path).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

# Special tokens, chat template and EOS policy per architecture, modelled on real checkpoints.
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Hello world! Tensor parallel inference on many devices, with a paged KV cache.",
    "def main():\n    print('hello, world')\n    return 0\n",
    "Once upon a time there was a small model that answered every question with numbers: 1, 2, 3.",
    "Sphinx of black quartz, judge my vow; pack my box with five dozen liquor jugs.",
]


def build_bpe_tokenizer(specials: list[str], bos: str | None, vocab_size: int = 300) -> Tokenizer:
    """A byte-level BPE trained on TRAINING_TEXT; ``bos`` (if given) is prepended by the post-processor."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    if bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.token_to_id(bos))])
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _tokenizer_spec(arch: str) -> dict:
    if arch.startswith("qwen"):
        return dict(specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos=None,
                    eos="<|im_end|>", config_eos="<|endoftext|>", template=CHATML_TEMPLATE)
    return dict(specials=["<unk>", "<s>", "</s>"], bos="<s>", eos="</s>", config_eos="</s>",
                template=LLAMA_TEMPLATE)


def randomize_weights(model: torch.nn.Module, seed: int) -> None:
    """Replace HF's tiny init (std 0.02) with O(1)-activation weights, so greedy tokens are decided by
    clear logit margins rather than rounding noise."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                param.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                param.copy_(noise)
            else:
                param.copy_(noise / math.sqrt(param.shape[-1]))   # [out, in], or experts' [E, out, in]


def hf_config(arch: str = "llama", tied: bool = False, **overrides):
    """The transformers config object of a tiny test model (GQA: 4 heads over 2 KV heads)."""
    import transformers
    config_class = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                    "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
                    "qwen3_moe": transformers.Qwen3MoeConfig}[arch]
    params = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, tie_word_embeddings=tied)
    params.update(QWEN3_EXTRA.get(arch, {}))
    params.update(overrides)
    return config_class(**params)


#: Qwen3's tiny shape: heads wider than hidden / heads (as Qwen3-0.6B's); Qwen3-MoE: 4 experts, top 2.
QWEN3_EXTRA = {"qwen3": dict(head_dim=32),
               "qwen3_moe": dict(head_dim=32, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                 norm_topk_prob=True)}
#: llama.cpp's architecture names where they differ from HF's model_type.
GGUF_ARCHS = {"qwen3_moe": "qwen3moe"}


def write_hf_checkpoint(directory, arch: str = "llama", sharded: bool = False, tied: bool = False,
                        seed: int = 0, **overrides) -> Path:
    """Write a tiny random ``arch`` model the way transformers saves one (safetensors, config.json,
    generation_config.json, tokenizer.json + tokenizer_config.json with a chat template).

    ``overrides`` go to the transformers config (e.g. ``rope_scaling=...``, ``num_hidden_layers=3``).
    Returns the directory.
    """
    import transformers
    directory = Path(directory)
    spec = _tokenizer_spec(arch)
    backend = build_bpe_tokenizer(spec["specials"], spec["bos"])
    ids = {token: backend.token_to_id(token) for token in spec["specials"]}

    config = hf_config(arch, tied, bos_token_id=ids.get(spec["bos"]), eos_token_id=ids[spec["config_eos"]],
                       **overrides)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize_weights(model, seed)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=ids.get(spec["bos"]), eos_token_id=[ids[spec["eos"]], ids[spec["config_eos"]]])
    model.save_pretrained(directory, safe_serialization=True, max_shard_size="120KB" if sharded else "10GB")

    hf_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=spec["bos"], eos_token=spec["eos"], chat_template=spec["template"])
    hf_tokenizer.save_pretrained(directory)
    return directory


def hf_state_dict(directory) -> dict[str, torch.Tensor]:
    """What transformers loads from ``directory`` (the reference for tensor comparisons)."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def read_index(directory) -> dict:
    return json.loads((Path(directory) / "model.safetensors.index.json").read_text())


# ---------------------------------------------------------------------------------------------- GGUF
GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}
GGUF_LAYER_PARTS = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate": "ffn_gate_inp",
}
K_QUANTS = ("Q4_K", "Q6_K")   # encoded by tests/kquants.py; gguf only decodes them


def gguf_name(hf: str) -> str:
    if hf in GGUF_NAMES:
        return GGUF_NAMES[hf]
    _, _, layer, rest = hf.split(".", 3)
    part, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{GGUF_LAYER_PARTS[part]}.{kind}"


def gguf_tensors(name: str, param: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """(HF name, GGUF name, array) of one transformers parameter: llama.cpp's stacked expert tensors
    for a MoE layer's ``mlp.experts.gate_up_proj`` ([E, 2I, H]: gate, then up) and ``down_proj``."""
    if ".mlp.experts." not in name:
        return [(name, gguf_name(name), param)]
    layer = name.split(".")[2]
    if name.endswith("gate_up_proj"):
        gate, up = np.split(param, 2, axis=1)
        return [(f"{name}#gate", f"blk.{layer}.ffn_gate_exps.weight", gate),
                (f"{name}#up", f"blk.{layer}.ffn_up_exps.weight", up)]
    return [(name, f"blk.{layer}.ffn_down_exps.weight", param)]


def llama_cpp_permute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py ``LlamaModel.permute``: HF rotary halves → interleaved pairs."""
    return rows.reshape(n_head, 2, rows.shape[0] // n_head // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def llama3_rope_freqs(scaling: dict, theta: float, head_dim: int) -> np.ndarray:
    """The ``rope_freqs`` tensor llama.cpp's converter writes for llama3 rope scaling."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    factors = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < old_context / high:
            factors.append(1.0)
        elif wavelen > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def encode_gguf_tensor(array: np.ndarray, tensor_type: str):
    """(data, raw_dtype, decoded) for ``GGUFWriter.add_tensor``; ``decoded`` is what a reader gets
    back (float32), i.e. the weights the model really has after quantization."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize
    import kquants
    kind = GGMLQuantizationType[tensor_type]
    if tensor_type == "F32":
        return array, None, array
    if tensor_type == "F16":
        data = array.astype(np.float16)
        return data, None, data.astype(np.float32)
    encoders = {"Q4_K": kquants.quantize_q4_k, "Q6_K": kquants.quantize_q6_k}
    data = encoders[tensor_type](array) if tensor_type in encoders else quantize(array, kind)
    return data, kind, dequantize(data, kind).reshape(array.shape)


def sentencepiece_vocab() -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of a small llama-style sentencepiece vocabulary: <unk> <s> </s>,
    256 byte-fallback tokens, then "▁"-spelled pieces scored best-first (as llama.cpp stores them)."""
    from tokenizers import SentencePieceBPETokenizer
    trained = SentencePieceBPETokenizer()
    trained.train_from_iterator(TRAINING_TEXT, vocab_size=200, show_progress=False)
    vocab = trained.get_vocab()
    pieces = sorted(vocab, key=vocab.get)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)   # 2 unknown, 3 control, 6 byte, 1 normal
    return tokens, scores, types


@dataclass
class WrittenGGUF:
    path: Path
    state_dict: dict[str, torch.Tensor]   # HF names and layout, float32, the weights as stored (dequantized)
    original: dict[str, torch.Tensor]     # the float32 weights before quantization
    hf_config: object                     # the transformers config of the same model
    tokenizer: Tokenizer | None           # the BPE tokenizer written into the metadata (None for "llama")


def write_gguf_checkpoint(path, tensor_type: str = "F32", seed: int = 0, arch: str = "llama",
                          tied: bool = False, pre_tokenizer: str = "default", tokenizer_model: str = "gpt2",
                          **overrides) -> WrittenGGUF:
    """Write a tiny random model as a GGUF file the way llama.cpp's converter would (q/k rows permuted
    for the llama architecture, 1-D tensors in F32, the rest in ``tensor_type``), with a tokenizer
    (``tokenizer_model`` "gpt2": byte-level BPE; "llama": sentencepiece with scores), special tokens
    and a chat template in the metadata.

    K-quants need rows of 256 values, so those models are 256 wide; the others are 64 wide.
    ``overrides`` go to the transformers config (``rope_scaling={"rope_type": "llama3", ...}`` also
    writes llama.cpp's ``rope_freqs`` tensor). Returns the path, the dequantized HF state dict (load it
    into a transformers model built from ``hf_config`` for reference outputs) and the config.
    """
    import transformers

    from anydev.core.loading.gguf_writing import gguf_model_writer, write_gguf
    path = Path(path)
    spec = _tokenizer_spec(arch)
    if tokenizer_model == "llama":
        backend = None
        tokens, scores, types = sentencepiece_vocab()
    else:
        backend = build_bpe_tokenizer(spec["specials"], spec["bos"])
        vocab = backend.get_vocab()
        tokens, scores = sorted(vocab, key=vocab.get), None
        types = [3 if t in spec["specials"] else 1 for t in tokens]
    ids = {token: tokens.index(token) for token in spec["specials"]}
    width = dict(hidden_size=256, intermediate_size=512) if tensor_type in K_QUANTS else {}
    config = hf_config(arch, tied, vocab_size=len(tokens), bos_token_id=ids.get(spec["bos"]),
                       eos_token_id=ids[spec["eos"]], **{**width, **overrides})
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize_weights(model, seed)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    theta = config.rope_parameters["rope_theta"]

    writer = gguf_model_writer(path, GGUF_ARCHS.get(arch, arch), config, rope_theta=theta, head_dim=head_dim)
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if tokenizer_model == "llama":
        writer.add_token_scores(scores)
        writer.add_unk_token_id(0)
    else:
        writer.add_tokenizer_pre(pre_tokenizer)
        merges = json.loads(backend.to_str())["model"]["merges"]
        writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    if spec["bos"] is not None:
        writer.add_bos_token_id(ids[spec["bos"]])
    writer.add_eos_token_id(ids[spec["eos"]])
    writer.add_add_bos_token(spec["bos"] is not None)
    writer.add_chat_template(spec["template"])

    state_dict, original = {}, {}
    for full_name, param in model.state_dict().items():
        if full_name == "lm_head.weight" and tied:
            continue
        for name, gguf_tensor, array in gguf_tensors(full_name, param.detach().numpy().astype(np.float32)):
            if array.ndim == 3:    # stacked experts: encoded as rows [E * out, in]
                data, raw_dtype, decoded = encode_gguf_tensor(array.reshape(-1, array.shape[-1]), tensor_type)
                data, decoded = data.reshape(*array.shape[:2], -1), decoded.reshape(array.shape)
            elif array.ndim == 2:
                data, raw_dtype, decoded = encode_gguf_tensor(array, tensor_type)
            else:
                data, raw_dtype, decoded = array, None, array
            state_dict[name] = torch.from_numpy(np.array(decoded, dtype=np.float32))
            original[name] = torch.from_numpy(array.copy())
            if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
                # Quantization works on whole rows, so permuting the encoded rows equals encoding permuted rows.
                heads = config.num_attention_heads if ".q_proj." in name else config.num_key_value_heads
                data = llama_cpp_permute(data, heads)
            writer.add_tensor(gguf_tensor, data, raw_dtype=raw_dtype)
        if f"{full_name}#gate" in state_dict:       # gate and up back in transformers' one parameter
            for d in (state_dict, original):
                d[full_name] = torch.cat((d.pop(f"{full_name}#gate"), d.pop(f"{full_name}#up")), dim=1)
    scaling = config.rope_parameters
    if scaling.get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_rope_freqs(scaling, theta, head_dim))
        if scaling["original_max_position_embeddings"] != 8192:
            # llama.cpp leaves this key out for llama3 (every release used 8192); tests use other values.
            writer.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    if tied:
        state_dict["lm_head.weight"] = state_dict["model.embed_tokens.weight"]
        original["lm_head.weight"] = original["model.embed_tokens.weight"]

    write_gguf(writer)
    return WrittenGGUF(path, state_dict, original, config, backend)
