"""Writing a llama-family model as a GGUF file (llama.cpp's format) with the ``gguf`` library: the
model-shape keys llama.cpp reads, and the write-out. The tokenizer keys and the tensors are the
caller's (see :func:`~.random_weights.gguf_writer`)."""
from __future__ import annotations


def gguf_model_writer(path, arch: str, config, *, rope_theta: float, head_dim: int):
    """A ``gguf.GGUFWriter`` at ``path`` for ``arch``, its shape keys set from ``config`` (an anydev
    ModelConfig or a transformers config: ``max_position_embeddings``, ``hidden_size``,
    ``num_hidden_layers``, ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``,
    ``rms_norm_eps``; a MoE one's ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``);
    the rotary base and head size are given, as the two configs keep them apart."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(rope_theta)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != config.hidden_size // config.num_attention_heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if getattr(config, "num_experts", 0):      # a MoE family (qwen3moe's keys)
        writer.add_expert_count(config.num_experts)
        writer.add_expert_used_count(config.num_experts_per_tok)
        writer.add_expert_feed_forward_length(config.moe_intermediate_size)
    return writer


def write_gguf(writer) -> None:
    """Write out what ``writer`` holds (header, keys, tensors) and close the file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
