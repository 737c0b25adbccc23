"""The one output path (anydev.core.output): incremental text equals a whole decode, for byte-level
BPE, sentencepiece with byte fallback and the demo tokenizer; stop strings that span tokens end the
text where a search of the whole text would, and streamed pieces add up to the final text."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.loading.gguf_tokenizer import gguf_tokenizer
from anydev.core.output import IncrementalDetokenizer, OutputText, StopFinder
from anydev.core.output.detokenizer import MAX_HELD
from checkpoints import build_bpe_tokenizer, sentencepiece_vocab

#: Characters of 1 to 4 UTF-8 bytes, whose bytes byte tokens split across tokens.
CHARS = "a \n!éß€中😀"
BYTE_TOKENS = 3     # the sentencepiece vocabulary's <0x00> (after <unk> <s> </s>)


def sentencepiece_tokenizer():
    tokens, scores, types = sentencepiece_vocab()
    meta = {"general.architecture": "llama", "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0}
    return gguf_tokenizer(meta, "test vocabulary")


@pytest.fixture(scope="module", params=["byte-level BPE", "sentencepiece", "demo"])
def tokenizer(request):
    if request.param == "byte-level BPE":
        from anydev.core.loading.tokenizer import Tokenizer
        return Tokenizer(build_bpe_tokenizer(["<unk>", "<s>", "</s>"], "<s>"))
    if request.param == "sentencepiece":
        return sentencepiece_tokenizer()
    return demo_checkpoint().tokenizer


@pytest.fixture(scope="module")
def demo_tokenizer():
    return demo_checkpoint().tokenizer


def token_sequence(tokenizer, draw_pieces: list[tuple[int, int]]) -> list[int]:
    """Token ids from hypothesis' (kind, value) pairs: any token of the vocabulary, a special token,
    or one character spelled as byte tokens (sentencepiece) or as its own encoding's tokens."""
    ids = []
    for kind, value in draw_pieces:
        if kind == 0:
            ids.append(value % tokenizer.vocab_size)
        elif kind == 1:
            ids.append(value % 3)
        else:
            char = CHARS[value % len(CHARS)]
            if tokenizer.token_to_id("<0x00>") == BYTE_TOKENS:
                ids += [BYTE_TOKENS + b for b in char.encode()]
            else:
                ids += tokenizer.encode(char * (1 + value % 3), add_special_tokens=False)
    return ids


def is_utf8_run_ok(tokenizer, ids) -> bool:
    """Whether the byte tokens of ``ids`` form valid UTF-8 (a byte-fallback decoder turns a whole
    invalid run into U+FFFD, which no decoder that hands text out early can know: see the module)."""
    if tokenizer.token_to_id("<0x00>") != BYTE_TOKENS:
        return True
    run = bytearray()
    for t in [*ids, -1]:
        if BYTE_TOKENS <= t < BYTE_TOKENS + 256:
            run.append(t - BYTE_TOKENS)
            continue
        try:
            run.decode("utf-8")
        except UnicodeDecodeError:
            return False
        run.clear()
    return True


PIECES = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10**6)), min_size=1, max_size=40)


@settings(max_examples=80, derandomize=True, deadline=None)
@given(pieces=PIECES, skip=st.booleans())
def test_incremental_text_equals_a_whole_decode(tokenizer, pieces, skip):
    ids = token_sequence(tokenizer, pieces)
    if not is_utf8_run_ok(tokenizer, ids):
        return
    decoder = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip)
    steps = [decoder.add(t) for t in ids]
    assert "".join(steps) + decoder.finish() == tokenizer.decode(ids, skip_special_tokens=skip)
    assert not any(step.endswith("\ufffd") and "\ufffd" not in tokenizer.decode(ids) for step in steps)


def test_a_character_split_across_tokens_waits_for_its_last_byte():
    tokenizer = sentencepiece_tokenizer()
    decoder = IncrementalDetokenizer(tokenizer)
    pieces = [decoder.add(BYTE_TOKENS + b) for b in "a😀".encode()]
    assert pieces == ["a", "", "", "", "😀"]


def test_an_incomplete_character_at_the_end_reads_as_a_whole_decode_gives_it():
    tokenizer = sentencepiece_tokenizer()
    decoder = IncrementalDetokenizer(tokenizer)
    ids = tokenizer.encode("the", add_special_tokens=False) + [BYTE_TOKENS + b for b in "€".encode()[:-1]]
    assert "".join(decoder.add(t) for t in ids) == "the"
    assert "the" + decoder.finish() == tokenizer.decode(ids) == "the\ufffd\ufffd"


def test_the_window_stays_short_on_a_long_output(demo_tokenizer):
    tokenizer = demo_tokenizer
    decoder = IncrementalDetokenizer(tokenizer)
    ids = tokenizer.encode("the quick brown fox " * 400, add_special_tokens=False)
    text = "".join(decoder.add(t) for t in ids) + decoder.finish()
    assert text == tokenizer.decode(ids)
    assert len(decoder.ids) <= 6 * MAX_HELD     # what each token decodes does not grow with the text


def test_a_long_run_of_tokens_that_read_as_nothing_keeps_the_window_short(demo_tokenizer):
    tokenizer = demo_tokenizer
    beyond = tokenizer.vocab_size + 1000      # an id the vocabulary lacks: it decodes to nothing
    assert tokenizer.decode([beyond]) == ""
    ids = tokenizer.encode("the", add_special_tokens=False) + [beyond] * 600 + tokenizer.encode(" fox", add_special_tokens=False)
    decoder = IncrementalDetokenizer(tokenizer)
    longest = 0
    text = ""
    for t in ids:
        text += decoder.add(t)
        longest = max(longest, len(decoder.ids))
    assert text + decoder.finish() == tokenizer.decode(ids) == "the fox"
    assert longest <= 6 * MAX_HELD      # each token's decode does not grow with the run


class DecodeOnly:
    """``tokenizer`` with nothing but its decode (no ``drops``), counting the calls."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def decode(self, ids, skip_special_tokens=True):
        self.calls += 1
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def with_dropped_ids(tokenizer, ids: list[int], every: list[int]) -> list[int]:
    """``ids`` with ids the vocabulary lacks and special tokens put in at the places ``every`` draws."""
    out = list(ids)
    for i, value in enumerate(every):
        out.insert(value % (len(out) + 1), tokenizer.vocab_size + 1000 + i if value % 2 else value % 3)
    return out


@settings(max_examples=80, derandomize=True, deadline=None)
@given(pieces=PIECES, every=st.lists(st.integers(0, 10**6), max_size=30), skip=st.booleans())
def test_ids_that_decode_drops_change_no_piece(tokenizer, pieces, every, skip):
    ids = with_dropped_ids(tokenizer, token_sequence(tokenizer, pieces), every)
    plain, told = IncrementalDetokenizer(DecodeOnly(tokenizer), skip), IncrementalDetokenizer(tokenizer, skip)
    assert [plain.add(t) for t in ids] == [told.add(t) for t in ids]
    assert plain.finish() == told.finish()


def test_drops_names_the_ids_a_decode_leaves_out(tokenizer):
    ids = [tokenizer.vocab_size + 5, 0, 1, 2, *tokenizer.encode("the fox", add_special_tokens=False), 10**6]
    for skip in (True, False):
        kept = [t for t in ids if not tokenizer.drops(t, skip)]
        assert tokenizer.decode(kept, skip_special_tokens=skip) == tokenizer.decode(ids, skip_special_tokens=skip)
        assert tokenizer.drops(10**6, skip) and not tokenizer.drops(ids[4], skip)
    assert tokenizer.drops(tokenizer.token_to_id("</s>"), True) and not tokenizer.drops(tokenizer.token_to_id("</s>"), False)


def test_tokens_that_decode_drops_cost_no_decode(demo_tokenizer):
    counted = DecodeOnly(demo_tokenizer)
    counted.drops = demo_tokenizer.drops
    decoder = IncrementalDetokenizer(counted)
    beyond = demo_tokenizer.vocab_size + 1000
    assert [decoder.add(t) for t in [beyond] * 50] == [""] * 50
    assert counted.calls == 0


@settings(max_examples=200, derandomize=True, deadline=None)
@given(text=st.text("ab\ncé", max_size=40), stops=st.lists(st.text("abcé", min_size=1, max_size=4), min_size=1, max_size=4),
       cuts=st.lists(st.integers(0, 40), max_size=10))
def test_stop_finder_sees_what_a_search_of_the_whole_text_sees(text, stops, cuts):
    bounds = sorted({0, len(text), *[c for c in cuts if c <= len(text)]})
    finder, kept = StopFinder(stops), None
    for a, b in zip(bounds, bounds[1:]):
        cut = finder.add(text[a:b])
        if cut is not None:
            kept = a + cut
            break
    firsts = [text.find(s) for s in stops if s in text]
    # the earliest stop string that ends first: the piece in which one ends is where the text stops
    if not firsts:
        assert kept is None
    else:
        end = min(text.find(s) + len(s) for s in stops if s in text)
        expected = min(at for s in stops if (at := text.find(s)) >= 0 and at + len(s) <= _piece_end(bounds, end))
        assert kept == expected


def _piece_end(bounds: list[int], position: int) -> int:
    return next(b for b in bounds if b >= position)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(words=st.lists(st.sampled_from(["the", " quick", " brown", " fox", " é", "😀", "\n"]), min_size=1, max_size=30),
       stop=st.sampled_from(["quick b", "x", "fox\n", "😀 ", "n f"]), take_every=st.integers(1, 5))
def test_streamed_pieces_add_up_to_the_text_cut_before_the_stop_string(demo_tokenizer, words, stop, take_every):
    tokenizer = demo_tokenizer
    text = "".join(words)
    ids = tokenizer.encode(text, add_special_tokens=False)
    output = OutputText(tokenizer, [stop])
    streamed, stopped_at = [], None
    for i, token in enumerate(ids):
        if output.add(token):
            stopped_at = i + 1
            break
        if i % take_every == 0:
            piece = output.take()
            streamed.append(piece)
            assert stop not in "".join(streamed)
    output.finish()
    streamed.append(output.take())
    full = tokenizer.decode(ids)
    expected = full[:full.find(stop)] if stop in full else full
    assert "".join(streamed) == output.text == expected
    if stop in full:      # it stops at the token that completes the stop string, not later
        assert stop in tokenizer.decode(ids[:stopped_at]) and stop not in tokenizer.decode(ids[:stopped_at - 1])
    else:
        assert stopped_at is None and output.num_tokens == len(ids)


def test_without_a_tokenizer_the_text_is_empty_and_nothing_stops():
    output = OutputText(None, ["a"])
    assert not any(output.add(t) for t in range(10))
    output.finish()
    assert output.text == output.take() == "" and output.num_tokens == 10
