"""The demo's independent check: the same weights through HF transformers' LlamaForCausalLM.

Used by test_infer.py when transformers is installed (it is in anydev's `test` extra); the engine's
greedy tokens must equal transformers' greedy tokens, float32 on the CPU.
"""
from __future__ import annotations

import torch


def hf_greedy_tokens(checkpoint, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy continuation of ``prompt_ids`` (stops at the model's EOS ids)."""
    import transformers

    c = checkpoint.config
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta, max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=c.tie_word_embeddings, attention_bias=c.attention_bias))
    model.load_state_dict({name: checkpoint.load(name) for name in checkpoint.tensor_names()}, strict=True)
    eos = sorted(set(c.eos_token_ids))
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.eval().generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                    do_sample=False, eos_token_id=eos, pad_token_id=eos[0])
    return out[0, len(prompt_ids):].tolist()
