"""A Tokenizer from a GGUF file's metadata (llama.cpp's ``tokenizer.ggml.*`` keys).

"gpt2" (byte-level BPE: tokens + merges) is built here with the ``tokenizers`` library. "llama"
(sentencepiece: tokens + scores) goes through transformers' GGUF converter, which recovers the merges
from the scores; it needs transformers installed.
"""
from __future__ import annotations

import itertools
import operator

from tokenizers import AddedToken, Regex, Tokenizer as BackendTokenizer, decoders, models, pre_tokenizers, processors

from .checkpoint_errors import ModelLoadError
from ..config import union_ids
from .tokenizer import Tokenizer

CONTROL, USER_DEFINED = 3, 4   # llama.cpp token types

# The split regexes of llama.cpp's BPE pre-tokenizer types (tokenizer.ggml.pre) that differ from GPT-2's.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZER_SPLITS = {
    "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "smaug-bpe": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT,
}


def byte_level_bpe(meta: dict, source: str) -> BackendTokenizer:
    tokens = meta["tokenizer.ggml.tokens"]
    merges = meta.get("tokenizer.ggml.merges")
    if not merges:
        raise ModelLoadError(f"{source}: GGUF 'gpt2' tokenizer has no tokenizer.ggml.merges")
    # Whole-list operations (no Python loop per token): Llama-3 has 128,256 tokens and 280,147 merges.
    vocab = dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))   # first id wins
    lefts, rights = merge_parts(merges, source)
    # tokenizers aborts the process on a merge outside the vocabulary; refuse such files up front.
    known = vocab.__contains__
    if not (all(map(known, lefts)) and all(map(known, rights)) and all(map(known, map(operator.add, lefts, rights)))):
        bad = next(f"{a} {b}" for a, b in zip(lefts, rights) if not (a in vocab and b in vocab and a + b in vocab))
        raise ModelLoadError(f"{source}: GGUF merge {bad!r} uses or makes a token missing from the vocabulary")
    pairs = list(zip(lefts, rights))
    backend = BackendTokenizer(models.BPE(vocab=vocab, merges=pairs))
    split = PRE_TOKENIZER_SPLITS.get(meta.get("tokenizer.ggml.pre"))
    if split is None:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    return backend


def merge_parts(merges: list[str], source: str) -> tuple[list[str], list[str]]:
    """Each merge ``"a b"`` split at its first space into its two parts; a merge without a space is
    refused (a tokenizer cannot be built from it)."""
    if set(map(str.count, merges, itertools.repeat(" "))) == {1}:   # byte-level tokens hold no space
        parts = " ".join(merges).split(" ")
        return parts[0::2], parts[1::2]
    split = [m.split(" ", 1) for m in merges]
    bad = next((m for m, p in zip(merges, split) if len(p) != 2), None)
    if bad is not None:
        raise ModelLoadError(f"{source}: GGUF merge {bad!r} is not two tokens separated by a space")
    return [p[0] for p in split], [p[1] for p in split]


def sentencepiece_via_transformers(meta: dict, source: str) -> BackendTokenizer:
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except ImportError:
        try:
            from transformers.integrations.ggml import convert_gguf_tokenizer
        except ImportError as err:
            raise ModelLoadError(f"{source}: building a sentencepiece ('llama') GGUF tokenizer needs "
                                 f"transformers; pip install transformers") from err
    renames = {"model": "tokenizer_type", "pre": "pre_tokenizer_type", "tokens": "tokens", "scores": "scores",
               "token_type": "token_type", "merges": "merges", "bos_token_id": "bos_token_id",
               "eos_token_id": "eos_token_id", "unknown_token_id": "unk_token_id",
               "padding_token_id": "pad_token_id", "add_space_prefix": "add_prefix_space"}
    tokenizer_dict = {new: meta[f"tokenizer.ggml.{old}"] for old, new in renames.items()
                      if f"tokenizer.ggml.{old}" in meta}
    return convert_gguf_tokenizer(meta["general.architecture"], tokenizer_dict)[0]


def _add_marked_tokens(backend: BackendTokenizer, tokens: list[str], token_types: list[int]) -> None:
    """Control tokens become special added tokens, user-defined ones plain added tokens, so both are
    matched whole in text (as llama.cpp and transformers do)."""
    control = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, token_types) if k == CONTROL]
    user = [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, token_types) if k == USER_DEFINED]
    backend.add_special_tokens(control)
    backend.add_tokens(user)


def _token_at(tokens: list[str], index, source: str, what: str) -> str | None:
    if index is None:
        return None
    if not 0 <= index < len(tokens):
        raise ModelLoadError(f"{source}: {what} id {index} is outside the vocabulary of {len(tokens)} tokens")
    return tokens[index]


def _special_token_template(bos: str | None, bos_id: int | None, eos: str | None, eos_id: int | None):
    """A post-processor that puts BOS before / EOS after each sequence; an id of None leaves that one out."""
    def wrapped(sequence: str) -> list[str]:
        return ([bos] if bos_id is not None else []) + [sequence] + ([eos] if eos_id is not None else [])

    used = {token: (token, i) for token, i in ((bos, bos_id), (eos, eos_id)) if i is not None}
    return processors.TemplateProcessing(single=wrapped("$A"), pair=wrapped("$A") + wrapped("$B:1"),
                                         special_tokens=list(used.values()))


def gguf_tokenizer(meta: dict, source: str) -> Tokenizer:
    kind = meta.get("tokenizer.ggml.model")
    if "tokenizer.ggml.tokens" not in meta:
        raise ModelLoadError(f"{source}: GGUF file has no tokenizer (tokenizer.ggml.tokens is missing)")
    tokens = meta["tokenizer.ggml.tokens"]
    if kind == "gpt2":
        backend = byte_level_bpe(meta, source)
    elif kind == "llama":
        backend = sentencepiece_via_transformers(meta, source)
    else:
        raise ModelLoadError(f"{source}: unsupported GGUF tokenizer model '{kind}'; supported: gpt2, llama")
    _add_marked_tokens(backend, tokens, meta.get("tokenizer.ggml.token_type") or [])

    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    eos_id = meta.get("tokenizer.ggml.eos_token_id")
    bos, eos = _token_at(tokens, bos_id, source, "BOS"), _token_at(tokens, eos_id, source, "EOS")
    # llama.cpp's defaults: sentencepiece vocabularies add BOS unless told not to, BPE ones do not.
    add_bos = meta.get("tokenizer.ggml.add_bos_token", kind == "llama") and bos is not None
    add_eos = meta.get("tokenizer.ggml.add_eos_token", False) and eos is not None
    backend.post_processor = _special_token_template(bos, bos_id if add_bos else None, eos, eos_id if add_eos else None)
    end_ids = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    return Tokenizer(
        backend,
        chat_template=meta.get("tokenizer.chat_template"),
        special_tokens={"bos_token": bos, "eos_token": eos,
                        "unk_token": _token_at(tokens, meta.get("tokenizer.ggml.unknown_token_id"), source, "UNK"),
                        "pad_token": _token_at(tokens, meta.get("tokenizer.ggml.padding_token_id"), source, "PAD")},
        bos_token_id=bos_id,
        eos_token_ids=union_ids([i for i in end_ids if i is not None]),
    )
