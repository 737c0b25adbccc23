"""Structured output in the engine: the token bitmask applied on the device lets through exactly the
tokens it allows; the grammar matchers' masks equal an oracle written from the grammar's strings;
end to end on the demo model (random weights, so only the mask keeps the text in the grammar) the
answers match, requests without a constraint keep their tokens, and TP=2 / PP=2 give the single
rank's tokens."""
from __future__ import annotations

import json
import re
import sys
import threading

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.errors import EngineConfigError
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.sched.grammar_matchers import GrammarMatchers, apply_token_bitmask
from anydev.core.sched.structured import GrammarLibraryMissing, StructuredOutput

pytest.importorskip("llguidance", reason="structured output needs llguidance (pip install anydev[structured])")

EMAIL = r"[a-z]{3,8}@[a-z]{2,6}\.(com|org)"
CHOICES = ["yes", "no", "maybe", "nothing"]


def allowed_of(bits: torch.Tensor, vocab: int) -> set[int]:
    """The token ids a bitmask row [words] (int32) allows, read bit by bit."""
    return {t for t in range(vocab) if (int(bits[t // 32]) >> (t % 32)) & 1}


@pytest.mark.parametrize("vocab", [64, 100, 384])
@pytest.mark.parametrize("rows", [[3, 0], None])
def test_the_bitmask_masks_exactly_the_disallowed_tokens_of_its_rows(vocab, rows):
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randn(5, vocab, generator=generator)
    words = (vocab + 31) // 32
    count = 5 if rows is None else len(rows)
    bitmask = torch.randint(-2**31, 2**31 - 1, (count, words), generator=generator, dtype=torch.int64).to(torch.int32)
    bitmask[1, -1] = -1                 # every bit of the last word: the tokens past the vocabulary are ignored
    bitmask[0, 0] = -2**31              # the sign bit alone: token 31 only, of the first word
    masked = logits.clone()
    apply_token_bitmask(masked, None if rows is None else torch.tensor(rows), bitmask)
    for row, bits in zip(range(5) if rows is None else rows, bitmask):
        allowed = allowed_of(bits, vocab)
        for token in range(vocab):
            expected = logits[row, token] if token in allowed else float("-inf")
            assert masked[row, token] == expected, (row, token)
    for row in set(range(5)) - set(range(5) if rows is None else rows):
        assert torch.equal(masked[row], logits[row])


@pytest.fixture(scope="module")
def tokenizer():
    return demo_checkpoint().tokenizer


def _texts(tokenizer) -> dict[int, str]:
    return {t: tokenizer.decode([t], skip_special_tokens=False) for t in range(tokenizer.vocab_size)}


def test_a_choice_s_masks_allow_only_tokens_that_keep_a_choice_reachable(tokenizer):
    vocab, texts = 384, _texts(tokenizer)
    eos = set(tokenizer.eos_token_ids)
    matchers = GrammarMatchers(tokenizer, vocab)
    structured = StructuredOutput("choice", json.dumps(CHOICES))
    bits = torch.zeros(1, matchers.words, dtype=torch.int32)
    written = ""
    for step in range(16):
        matchers.fill([(7, structured)], bits.numpy())
        allowed = allowed_of(bits[0], vocab)
        oracle = {t for t, text in texts.items() if t not in eos and text
                  and any(c.startswith(written + text) for c in CHOICES)}
        if written in CHOICES:         # a whole choice may end ("no"), or go on to a longer one ("nothing")
            oracle |= eos
        # never a token that leaves the choices; at the start every token that begins one (llguidance
        # may keep only the canonical tokens of text the grammar forces, as after "noth")
        assert allowed and allowed <= oracle, (written, sorted(allowed - oracle))
        if step == 0:
            assert allowed == oracle
        if allowed <= eos:
            break
        token = max(allowed - eos, key=lambda t: len(texts[t]))     # the longest allowed token: a real BPE path
        matchers.sampled("ticket", [(0, 7)])
        matchers.catch_up(lambda ticket: [token])
        written += texts[token]
    assert written == "nothing" and matchers.rejection(7) is None


def test_a_token_the_grammar_rejects_is_recorded_not_consumed(tokenizer):
    matchers = GrammarMatchers(tokenizer, 384)
    bits = torch.zeros(1, matchers.words, dtype=torch.int32)
    matchers.fill([(3, StructuredOutput("regex", "abc"))], bits.numpy())
    z = tokenizer.encode("z", add_special_tokens=False)[0]
    assert z not in allowed_of(bits[0], 384)
    matchers.sampled("ticket", [(0, 3)])
    matchers.catch_up(lambda ticket: [z])
    assert matchers.rejection(3) is not None and str(z) in matchers.rejection(3)
    matchers.drop([3])
    assert matchers.seq_ids() == [] and matchers.rejection(3) is None


def test_a_malformed_constraint_and_a_missing_library_are_named(monkeypatch):
    with pytest.raises(EngineConfigError, match="regex"):
        SamplingParams(structured=StructuredOutput("regex", "(")).validate()
    with pytest.raises(EngineConfigError, match="kind"):
        SamplingParams(structured=StructuredOutput("yaml", "")).validate()
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(GrammarLibraryMissing, match="pip install llguidance"):
        SamplingParams(structured=StructuredOutput("json_object")).validate()
    from anydev.serving.protocol import APIError, CompletionRequest
    body = CompletionRequest(model="m", prompt="x", structured_outputs={"regex": "a+"})
    with pytest.raises(APIError) as error:
        body.check_unsupported()
    assert (error.value.status, error.value.param, error.value.code) == (400, "structured_outputs", "unsupported_parameter")


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}


def _constrained(engine, prompts=("Hello", "hi there")) -> list:
    greedy = engine.generate(list(prompts), SamplingParams(max_new_tokens=100,
                                                           structured=StructuredOutput("regex", EMAIL)))
    sampled = engine.generate(list(prompts), SamplingParams(max_new_tokens=100, temperature=1.0, seed=3,
                                                            structured=StructuredOutput("json", json.dumps(SCHEMA))))
    return [(o.token_ids, o.text, o.finish_reason) for o in greedy + sampled]


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(device="cpu")) as eng:
        yield eng


@pytest.fixture(scope="module")
def single_rank(engine):
    return _constrained(engine)


def test_constrained_answers_match_their_grammar_and_end_with_eos(engine, single_rank):
    eos = set(engine.checkpoint.tokenizer.eos_token_ids)
    for ids, text, reason in single_rank[:2]:
        assert re.fullmatch(EMAIL, text) and reason == "eos" and ids[-1] in eos, text
    for ids, text, reason in single_rank[2:]:
        value = json.loads(text)
        assert set(value) == {"name", "age"} and len(value["name"]) <= 8 and 0 <= value["age"] <= 120, text
        assert reason == "eos"
    plain = engine.generate(["Hello"], SamplingParams(max_new_tokens=20))[0].text
    assert not re.fullmatch(EMAIL, plain)       # the model alone does not write one: the mask does


def test_an_unconstrained_request_beside_constrained_ones_keeps_its_tokens(engine):
    alone = engine.generate_ids([[5, 9, 33]], SamplingParams(max_new_tokens=12))[0].token_ids
    plain = engine.add_request([5, 9, 33], SamplingParams(max_new_tokens=12))
    masked = [engine.add_request([5, 9, 33], SamplingParams(max_new_tokens=12, structured=StructuredOutput("regex", r"\d+")))
              for _ in range(2)]
    while not plain.is_finished or not all(s.is_finished for s in masked):
        engine.step()
    assert plain.output == alone
    assert all(re.fullmatch(r"\d+", engine.output_text(s)) for s in masked)
    engine.generate_ids([[1, 2]], SamplingParams(max_new_tokens=2))     # a step after they ended drops their matchers
    assert engine.sampler.structured_sequences() == []


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2), dict(pp=2, executor="mp")])
def test_tp_and_pp_give_the_single_rank_s_constrained_tokens(layout, single_rank):
    with InferEngine(demo_checkpoint(), EngineConfig(device="cpu", **layout)) as engine:
        assert _constrained(engine) == single_rank


def test_each_step_fills_its_masks_after_its_forward_is_launched(engine):
    """A step's masks are filled after its forward was handed to the device (the device runs it
    meanwhile): on the rank's thread only a new sequence's first mask, after the forward; every later
    one on the matchers' worker thread, which reads the step's tokens after that step was launched."""
    sampler, events = engine.sampler, []
    forward, compute = sampler.model.forward, sampler.structured.matchers._compute

    def traced_forward(*args, **kwargs):
        events.append(("forward", threading.current_thread().name, 0))
        return forward(*args, **kwargs)

    def traced_compute(todo, out):
        events.append(("fill", threading.current_thread().name, len(todo)))
        return compute(todo, out)

    sampler.model.forward, sampler.structured.matchers._compute = traced_forward, traced_compute
    try:
        outputs = engine.generate(["Hello"], SamplingParams(max_new_tokens=12, structured=StructuredOutput("regex", EMAIL)))
    finally:
        del sampler.model.forward, sampler.structured.matchers._compute
    rank = [e for e in events if not e[1].startswith("anydev-grammar")]
    ahead = [n for what, thread, n in events if thread.startswith("anydev-grammar")]
    rank_fills = [i for i, e in enumerate(rank) if e[0] == "fill" and e[2]]
    assert len(rank_fills) == 1 and rank[rank_fills[0] - 1][0] == "forward", rank    # the first step's, after its forward
    assert ahead.count(1) >= len(outputs[0].token_ids) - 1, events   # the rest were filled ahead


def test_an_error_on_the_matchers_worker_is_raised_by_the_next_step():
    with InferEngine(demo_checkpoint(), EngineConfig(device="cpu")) as engine:
        matchers = engine.sampler.structured.matchers

        def failing(read):
            raise RuntimeError("the grammar worker failed")

        matchers._ahead = failing
        with pytest.raises(Exception, match="the grammar worker failed"):
            engine.generate(["Hello"], SamplingParams(max_new_tokens=8, structured=StructuredOutput("regex", EMAIL)))


def test_a_preempted_constrained_request_keeps_its_grammar_state():
    """A KV cache too small for every request preempts one and recomputes it later: its matcher (kept
    on the sampler by sequence id) goes on where it was, so the seeded answers equal the roomy run's."""
    pattern = r"[a-z ]{20,40}\."

    def answers(**cache):
        with InferEngine(demo_checkpoint(), EngineConfig(device="cpu", **cache)) as engine:
            outputs = engine.generate(["Hello", "hi", "a b c", "xyz"], SamplingParams(
                max_new_tokens=60, temperature=1.0, seed=5, structured=StructuredOutput("regex", pattern)))
            return [o.text for o in outputs], engine.stats().preemptions

    roomy, tight = answers(), answers(num_blocks=9, block_size=8)
    assert roomy[1] == 0 and tight[1] >= 1
    assert tight[0] == roomy[0] and all(re.fullmatch(pattern, text) for text in tight[0])
