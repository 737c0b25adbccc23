"""The tokenizer a front end rebuilds from the engine core's :class:`TokenizerSpec` tokenizes, renders
chat prompts and decodes as the checkpoint's own tokenizer does (HF directory, GGUF BPE and
sentencepiece, the demo model)."""
from __future__ import annotations

import msgspec
import pytest

from anydev.core.loading.checkpoint import demo_checkpoint, open_checkpoint
from anydev.serving.messages import ENCODER, EngineInfo, TokenizerSpec
from checkpoints import write_gguf_checkpoint, write_hf_checkpoint

TEXTS = ["Hello, world!", "  leading spaces and\ttabs\nnew lines", "żółw 日本語 ünïcödé", "", "12345 67890",
         "<|begin_of_text|>special<|eot_id|> <s></s>"]
MESSAGES = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "and now?"}]


def checkpoint_of(kind, tmp_path):
    if kind == "demo":
        return demo_checkpoint()
    if kind == "hf":
        return open_checkpoint(write_hf_checkpoint(tmp_path / "hf"))
    pytest.importorskip("gguf")
    if kind == "gguf-llama":
        pytest.importorskip("transformers")
    return open_checkpoint(write_gguf_checkpoint(tmp_path / "m.gguf", tokenizer_model=kind.removeprefix("gguf-")).path)


@pytest.mark.parametrize("kind", ["demo", "hf", "gguf-gpt2", "gguf-llama"])
def test_the_rebuilt_tokenizer_is_the_checkpoints(kind, tmp_path):
    with checkpoint_of(kind, tmp_path) as checkpoint:
        original = checkpoint.tokenizer
        info = EngineInfo(max_model_len=64, vocab_size=checkpoint.config.vocab_size, num_blocks=1, block_size=16,
                          device="cpu", tokenizer=TokenizerSpec.of(original))
        rebuilt = msgspec.msgpack.decode(ENCODER.encode(info), type=EngineInfo).tokenizer.build()   # as it crosses
        for text in TEXTS:
            for special in (True, False):
                ids = original.encode(text, add_special_tokens=special)
                assert rebuilt.encode(text, add_special_tokens=special) == ids
                assert rebuilt.decode(ids) == original.decode(ids)
                assert rebuilt.decode(ids, skip_special_tokens=False) == original.decode(ids, skip_special_tokens=False)
        assert (rebuilt.special_tokens, rebuilt.bos_token_id, rebuilt.eos_token_ids, rebuilt.vocab_size) == \
               (original.special_tokens, original.bos_token_id, original.eos_token_ids, original.vocab_size)
        if original.has_chat_template:
            assert rebuilt.apply_chat_template(MESSAGES) == original.apply_chat_template(MESSAGES)
