"""The Llama-family decoder (llama, mistral, qwen2) on one tensor-parallel rank.

HF transformers' math on the rank's weight shard (see :mod:`.sharding`), over a flat packed step
(:class:`.batch.StepBatch`), through the kernels of the contract (``kernels``: the backend's own or
the references; see :mod:`anydev.core.rank.kernel_choice`), the projections by ``linear`` or, for a
quantized weight, ``quantized_linear`` (:mod:`.quantized`). Per layer: fused_add_rms_norm, the fused qkv
matmul, rotary in place and write_kv (one fused kernel: rotary_write_kv), paged attention, o_proj,
fused_add_rms_norm, the fused gate_up matmul, silu_and_mul, down_proj. The only TP knowledge here is the all-reduce after the row-parallel
o_proj and down_proj, and the all-gather of the vocabulary-split lm_head's logits.
"""
from __future__ import annotations

from typing import Callable

import torch

from .batch import StepBatch
from .pipeline import Stage
from .quantized import QuantizedWeight, embedding, linear
from .sharding import RankShard


class LlamaRank:
    """Forward pass of one rank. ``weights`` maps HF names to this rank's device tensors;
    ``kv_layers[i]`` is layer i's K and V pages, [2, slots, local KV heads, head_dim];
    ``all_reduce`` sums a tensor over ranks in place and ``all_gather(send, recv)`` gathers the ranks'
    ``send`` into ``recv`` (both None at tp=1); ``cos_sin_cache`` is the rotary table
    [max positions, head_dim] float32; ``dtype`` is the hidden states' (the float weights')."""

    def __init__(self, config, shard: RankShard, weights: dict[str, torch.Tensor], kv_layers: list[torch.Tensor],
                 cos_sin_cache: torch.Tensor, kernels, block_size: int,
                 all_reduce: Callable[[torch.Tensor], None] | None,
                 all_gather: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
                 stage: Stage | None = None, *, dtype: torch.dtype):
        self.config = config
        self.dtype = dtype
        self.shard = shard
        self.kernels = kernels
        self.cos_sin_cache = cos_sin_cache
        self.all_reduce = all_reduce
        self.all_gather = all_gather
        self.scale = config.head_dim ** -0.5
        self.sliding_window = config.sliding_window
        d, kv_heads = config.head_dim, shard.num_kv_heads
        self.kv_pages = [(kv[0].view(-1, block_size, kv_heads, d), kv[1].view(-1, block_size, kv_heads, d))
                         for kv in kv_layers]
        #: The pipeline stage (:mod:`.pipeline`) whose layers this rank runs; None: all of them.
        self.stage = stage or Stage(0, 1, 0, config.num_hidden_layers)
        self.embed = weights["model.embed_tokens.weight"] if self.stage.is_first else None
        self.norm = weights["model.norm.weight"] if self.stage.is_last else None
        self.lm_head = lm_head_slice(weights, config, shard) if self.stage.is_last else None
        self.layers = [self._layer_weights(weights, i) for i in self.stage.layers]

    @staticmethod
    def _layer_weights(weights, i: int) -> dict[str, torch.Tensor | None]:
        p = f"model.layers.{i}."
        names = {
            "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
            "o": "self_attn.o_proj.weight", "o_bias": "self_attn.o_proj.bias", "q_bias": "self_attn.q_proj.bias",
            "k_bias": "self_attn.k_proj.bias", "v_bias": "self_attn.v_proj.bias", "gate": "mlp.gate_proj.weight",
            "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight", "attn_norm": "input_layernorm.weight",
            "mlp_norm": "post_attention_layernorm.weight",
            # fused views (see .fusion), present when the parts are back to back in memory
            "qkv": "self_attn.qkv_proj.weight", "qkv_bias": "self_attn.qkv_proj.bias", "gate_up": "mlp.gate_up_proj.weight",
        }
        w = {key: weights.get(p + name) for key, name in names.items()}
        if w["q_bias"] is not None and w["qkv_bias"] is None:
            w["qkv"] = None    # fused weight but unfused bias: run the parts
        return w

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        """Logits [B, vocab] of each sequence's last token (the model's dtype), the whole vocabulary
        on every rank."""
        return self.head(*self.run_layers(self.embed_tokens(batch), None, batch), batch)

    @torch.inference_mode()
    def token_logits(self, batch: StepBatch) -> torch.Tensor:
        """Logits [T, vocab] after every token of a step, not only each sequence's last (teacher-forced
        scoring: a prompt's log-probabilities, perplexity). A rank that holds the whole model only."""
        return self.every_token_head(*self.run_layers(self.embed_tokens(batch), None, batch))

    def every_token_head(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Logits [T, vocab] of every token from the last layer's (hidden, residual): the final norm
        and the lm_head of every row (:meth:`head` applies them to each sequence's last token only)."""
        self.kernels.fused_add_rms_norm(x, residual, self.norm, self.config.rms_norm_eps)
        return self.logits(x)

    def embed_tokens(self, batch: StepBatch) -> torch.Tensor:
        """The step's token embeddings [T, hidden]."""
        return embedding(self.kernels, batch.embedding_ids(), self.embed, self.dtype)

    def run_layers(self, x: torch.Tensor, residual: torch.Tensor | None, batch: StepBatch):
        """The layers: (hidden, residual) in, (hidden, residual) out, each [T, hidden]; the last
        layer's hidden states are not yet added into the residual. ``residual`` None: the first
        layer starts it."""
        for i in range(len(self.layers)):
            residual, x = self._attn_norm(i, x, residual)
            x = self._after_attention(i, self.attend(i, self._qkv(i, x, batch), batch), residual)
        return x, residual

    def head(self, x: torch.Tensor, residual: torch.Tensor, batch: StepBatch) -> torch.Tensor:
        """Logits [B, vocab] of each sequence's last token: the final norm and the lm_head."""
        if not batch.is_decode:                                             # the last token of each sequence
            x, residual = x.index_select(0, batch.last_index), residual.index_select(0, batch.last_index)
        self.kernels.fused_add_rms_norm(x, residual, self.norm, self.config.rms_norm_eps)
        return self.logits(x)

    # ---- the same step as pieces between the attentions (captured one by one: see ..graphs) ----
    def first_piece(self, batch: StepBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The embedding and layer 0 up to its attention: (its q [T, heads, head_dim], the residual)."""
        residual, x = self._attn_norm(0, self.embed_tokens(batch), None)
        return self._qkv(0, x, batch), residual

    def middle_piece(self, i: int, attn: torch.Tensor, residual: torch.Tensor, batch: StepBatch) -> torch.Tensor:
        """Layer i-1 from its attention output ``attn`` [T, heads * head_dim] on, then layer i up to
        its attention: layer i's q. ``residual`` is updated in place."""
        x = self._after_attention(i - 1, attn, residual)
        return self._qkv(i, self._attn_norm(i, x, residual)[1], batch)

    def last_piece(self, attn: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The last layer from its attention output on, then the final norm of every token: [T, hidden]
        (:meth:`head` normalises the last tokens only; per row it is the same math)."""
        x = self._after_attention(len(self.layers) - 1, attn, residual)
        self.kernels.fused_add_rms_norm(x, residual, self.norm, self.config.rms_norm_eps)
        return x

    def _attn_norm(self, i: int, x: torch.Tensor, residual: torch.Tensor | None):
        """(residual, layer i's input norm): the residual starts at the first layer, later ones add into it."""
        w, eps = self.layers[i], self.config.rms_norm_eps
        if residual is None:
            return x, self.kernels.rms_norm(x, w["attn_norm"], eps)
        self.kernels.fused_add_rms_norm(x, residual, w["attn_norm"], eps)
        return residual, x

    def _qkv(self, i: int, x: torch.Tensor, batch: StepBatch) -> torch.Tensor:
        """Layer i's q, k and v of ``x``, rotated; k and v written into the pages. Returns q."""
        w, T = self.layers[i], x.shape[0]
        d, heads, kv_heads = self.shard.head_dim, self.shard.num_heads, self.shard.num_kv_heads
        if w["qkv"] is None:
            q = self._linear(x, w["q"], w["q_bias"]).view(T, heads, d)
            key = self._linear(x, w["k"], w["k_bias"]).view(T, kv_heads, d)
            value = self._linear(x, w["v"], w["v_bias"]).view(T, kv_heads, d)
        else:
            qkv = self._linear(x, w["qkv"], w["qkv_bias"]).view(T, heads + 2 * kv_heads, d)
            q, key, value = qkv.split((heads, kv_heads, kv_heads), dim=1)
        return self.rotary_write_kv(i, q, key, value, batch)

    def rotary_write_kv(self, i: int, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        batch: StepBatch) -> torch.Tensor:
        """Layer i's queries and keys rotated, its keys and values written into the pages; returns the
        queries (a family with q/k norms normalises them here first, in the same kernel)."""
        k_pages, v_pages = self.kv_pages[i]
        # one fused kernel where the backend offers it, else rotary_embedding then write_kv
        self.kernels.rotary_write_kv(batch.positions, q, key, value, k_pages, v_pages, batch.slot_mapping,
                                     self.cos_sin_cache)
        return q

    def attend(self, i: int, q: torch.Tensor, batch: StepBatch, out: torch.Tensor | None = None) -> torch.Tensor:
        """Layer i's paged attention of ``q`` over the step's sequences: [T, heads * head_dim], written
        into ``out`` (that shape) when given. A mixed step's decodes come first (``num_decodes``): their
        queries ``q[:d]`` go to the decode attention, the rest to the prefill attention, and the two
        results are joined by one op, into ``out`` when given."""
        k, (k_pages, v_pages) = self.kernels, self.kv_pages[i]
        T, d = q.shape[0], batch.num_decodes
        if batch.is_decode:
            parts = (k.paged_decode_attention(q, k_pages, v_pages, batch.block_tables, batch.seq_lens, self.scale,
                                              self.sliding_window),)
        else:
            cu_seqlens_q, seq_lens, block_tables = batch.prefill_rows
            parts = (k.paged_prefill_attention(q[d:] if d else q, k_pages, v_pages, cu_seqlens_q, seq_lens, block_tables,
                                               self.scale, self.sliding_window),)
            if d:
                block_tables, seq_lens = batch.decode_rows
                parts = (k.paged_decode_attention(q[:d], k_pages, v_pages, block_tables, seq_lens, self.scale,
                                                  self.sliding_window),) + parts
        if out is None:
            return (parts[0] if len(parts) == 1 else torch.cat(parts)).reshape(T, -1)
        if len(parts) == 1:
            return out.copy_(parts[0].reshape(T, -1))
        torch.cat(parts, out=out.view(q.shape))
        return out

    def _after_attention(self, i: int, attn: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Layer i from its attention output on: o_proj (all-reduced), the MLP norm, the MLP."""
        w = self.layers[i]
        x = self._reduced(self._linear(attn, w["o"]))
        if w["o_bias"] is not None:
            x = x + w["o_bias"]
        self.kernels.fused_add_rms_norm(x, residual, w["mlp_norm"], self.config.rms_norm_eps)
        return self._mlp(w, x)

    def _mlp(self, w, x) -> torch.Tensor:
        """down(silu(gate(x)) * up(x)); on a TP rank a partial sum, all-reduced here."""
        if w["gate_up"] is None:
            gate_up = torch.cat((self._linear(x, w["gate"]), self._linear(x, w["up"])), dim=-1)
        else:
            gate_up = self._linear(x, w["gate_up"])
        return self._reduced(self._linear(self.kernels.silu_and_mul(gate_up), w["down"]))

    def _linear(self, x: torch.Tensor, weight, bias: torch.Tensor | None = None) -> torch.Tensor:
        """A projection: a float or a quantized weight (see :mod:`.quantized`), through the kernels."""
        return linear(self.kernels, x, weight, bias)

    def _reduced(self, partial: torch.Tensor) -> torch.Tensor:
        if self.all_reduce is not None:
            self.all_reduce(partial)
        return partial

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """[B, vocab]: this rank's vocabulary slice, all-gathered when the lm_head is split."""
        local = self._linear(x, self.lm_head)                               # [B, vocab / tp]
        if not self.shard.vocab_part:
            return local
        tp, (B, part) = self.shard.tp, local.shape
        gathered = torch.empty((tp, B, part), dtype=local.dtype, device=local.device)
        self.all_gather(local, gathered)
        return gathered.permute(1, 0, 2).reshape(B, tp * part)


def lm_head_slice(weights, config, shard: RankShard) -> torch.Tensor | QuantizedWeight:
    """This rank's rows of the lm_head (``shard.vocab_part`` of them; all when 0): the loaded
    ``lm_head.weight`` holds just those (see :mod:`.sharding`); tied embeddings give a view of them
    (of its stored blocks when the embedding stays quantized: the head then runs ``quantized_linear``)."""
    if not config.tie_word_embeddings:
        return weights["lm_head.weight"]
    full, part = weights["model.embed_tokens.weight"], shard.vocab_part
    if not part:
        return full
    start, stop = shard.rank * part, (shard.rank + 1) * part
    return full.rows(start, stop) if isinstance(full, QuantizedWeight) else full[start:stop]
