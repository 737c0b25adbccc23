"""Writers of tiny test checkpoints (HF safetensors directories and GGUF files).

Other test modules import these: ``from checkpoints import write_hf_checkpoint, write_gguf_checkpoint``
(tests/ is on sys.path under pytest's default rootdir-relative import mode).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

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
    if arch == "qwen2":
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
                param.copy_(noise / math.sqrt(param.shape[1]))


def hf_config(arch: str = "llama", tied: bool = False, **overrides):
    """The transformers config object of a tiny test model (GQA: 4 heads over 2 KV heads)."""
    import transformers
    config_class = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                    "qwen2": transformers.Qwen2Config}[arch]
    params = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, tie_word_embeddings=tied)
    params.update(overrides)
    return config_class(**params)


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
