"""The GGUF byte-level BPE tokenizer, built by whole-list operations, is the one a per-merge build
makes: the same vocabulary (the first id of a repeated token wins), the same merges in the same order
(also when a token holds a space), the same ids for the same text; broken merges are refused."""
from __future__ import annotations

import pytest
from tokenizers import Tokenizer as BackendTokenizer, models

from anydev.core.loading.checkpoint_errors import ModelLoadError
from anydev.core.loading.gguf_tokenizer import byte_level_bpe, merge_parts

TEXTS = ["abc cab", "aabbcc a b", "ab ab", "b c\u0120a", ""]


def per_merge_build(tokens: list[str], merges: list[str]) -> BackendTokenizer:
    vocab = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return BackendTokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges]))


def built(tokens: list[str], merges: list[str]) -> BackendTokenizer:
    return byte_level_bpe({"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges}, "test.gguf")


@pytest.mark.parametrize("tokens, merges", [
    (["a", "b", "c", "\u0120", "ab", "bc", "abc", "ca", "\u0120a", "ab"], ["a b", "b c", "ab c", "c a", "\u0120 a"]),
    # a token with a space: its merge has two spaces, split at the first (a merge without one is beside it)
    (["a", "b", " b", "a b", "ab"], ["a  b", "a b"]),
], ids=["byte-level", "a-token-with-a-space"])
def test_the_tokenizer_is_the_per_merge_builds(tokens, merges):
    ours, reference = built(tokens, merges), per_merge_build(tokens, merges)
    reference.pre_tokenizer = ours.pre_tokenizer
    assert ours.get_vocab() == reference.get_vocab()
    assert [ours.encode(t).ids for t in TEXTS] == [reference.encode(t).ids for t in TEXTS]


def test_merges_split_at_their_first_space_in_order():
    assert merge_parts(["a b", "ab c", "\u0120 t"], "x.gguf") == (["a", "ab", "\u0120"], ["b", "c", "t"])
    # one merge of no space and one of two: as many spaces as pairs, yet each splits on its own
    assert merge_parts(["a  b", "a b"], "x.gguf") == (["a", "a"], [" b", "b"])
    with pytest.raises(ModelLoadError, match="'ab' is not two tokens"):
        merge_parts(["a  b", "ab"], "x.gguf")


@pytest.mark.parametrize("merges, bad", [(["a b", "b a"], "'b a'"), (["a c"], "'a c'"), (["c a"], "'c a'")])
def test_a_merge_outside_the_vocabulary_is_named(merges, bad):
    with pytest.raises(ModelLoadError, match=bad):
        built(["a", "b", "ab"], merges)
