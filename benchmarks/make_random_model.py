"""Write a Llama-shaped HF checkpoint directory with random weights, for runs of test_infer.py on a
machine with no download (the GPU machines): config.json, generation_config.json, model.safetensors
(bf16) and the demo model's tokenizer (ids beyond its 384 tokens decode to nothing).

    python benchmarks/make_random_model.py /tmp/llama-1b                         # ~1B: hidden 2048, 16 layers
    python benchmarks/make_random_model.py /tmp/llama-8kv --hidden 4096 --layers 8 --heads 32 --kv-heads 8
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from anydev.core.demo_model import BOS, DEMO_CHAT_TEMPLATE, EOS, build_demo_tokenizer
from anydev.core.models.random_weights import add_shape_arguments, config_from_arguments, random_checkpoint


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    add_shape_arguments(p)
    args = p.parse_args(argv)

    config = config_from_arguments(args)
    checkpoint = random_checkpoint(config)
    args.out.mkdir(parents=True, exist_ok=True)
    tensors = {name: checkpoint.load(name).to(torch.bfloat16).contiguous() for name in checkpoint.tensor_names()}
    save_file(tensors, str(args.out / "model.safetensors"))
    hf_config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads, "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta, "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
    }
    (args.out / "config.json").write_text(json.dumps(hf_config, indent=2))
    (args.out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    build_demo_tokenizer().save(str(args.out / "tokenizer.json"))
    (args.out / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "chat_template": DEMO_CHAT_TEMPLATE}))
    params = sum(t.numel() for t in tensors.values())
    print(f"wrote {args.out}: {params / 1e6:.0f} M parameters, {config.num_hidden_layers} layers, "
          f"hidden {config.hidden_size}, heads {config.num_attention_heads}/{config.num_key_value_heads} KV")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
