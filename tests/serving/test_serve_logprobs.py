"""Logprobs through ``anydev serve`` (a subprocess on 127.0.0.1, the demo model on the cpu), driven by
the ``openai`` client: chat's logprobs/top_logprobs and completions' logprobs N, whole and streamed,
and completions' echo with the prompt's logprobs (``max_tokens: 0`` scores prompts, several in one
request, as lm-eval's local-completions asks), equal to the offline engine's (which
tests/core/test_logprobs.py checks against HF transformers)."""
from __future__ import annotations

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from serve_support import MODEL, Server, request

TOLERANCE = 1e-4
PROMPT = "the model number 3: hello world"
CHAT = [{"role": "user", "content": "what is on the device?"}]


@pytest.fixture(scope="module")
def server():
    srv = Server("--max-model-len", "256")
    yield srv
    code, out = srv.stop()
    assert code == 0, out


@pytest.fixture(scope="module")
def reference():
    """The offline engine's (token ids, TokenLogprobs) for the completion prompt and the chat."""
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=256, use_graphs=False)) as engine:
        tokenizer = engine.checkpoint.tokenizer
        chat_ids = tokenizer.encode(tokenizer.apply_chat_template(CHAT, add_generation_prompt=True),
                                    add_special_tokens=False)
        prompts = [tokenizer.encode(PROMPT, add_special_tokens=True), chat_ids]
        outputs = engine.generate_ids(prompts, SamplingParams(max_new_tokens=8, logprobs=3, prompt_logprobs=2))
        yield {"completion": outputs[0], "chat": outputs[1], "prompt_ids": prompts,
               "decode": lambda i: tokenizer.decode([i], skip_special_tokens=False),
               "decode_all": lambda ids: tokenizer.decode(ids, skip_special_tokens=False)}


def test_completions_logprobs_equal_the_engine_s(server, reference):
    expected = reference["completion"]
    out = server.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3)
    scores = out.choices[0].logprobs
    assert scores.tokens == [reference["decode"](t) for t in expected.token_ids]
    assert scores.token_logprobs == pytest.approx([lp.logprob for lp in expected.logprobs], abs=TOLERANCE)
    for got, lp in zip(scores.top_logprobs, expected.logprobs):
        assert got == pytest.approx({reference["decode"](i): v for i, v in lp.top}, abs=TOLERANCE)
    assert scores.text_offset == [sum(len(t) for t in scores.tokens[:i]) for i in range(len(scores.tokens))]


def test_chat_logprobs_whole_and_streamed_equal_the_engine_s(server, reference):
    expected = reference["chat"]
    client = server.client()
    whole = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, temperature=0, logprobs=True,
                                           top_logprobs=2)
    content = whole.choices[0].logprobs.content
    assert [c.token for c in content] == [reference["decode"](t) for t in expected.token_ids]
    assert [c.logprob for c in content] == pytest.approx([lp.logprob for lp in expected.logprobs], abs=TOLERANCE)
    for got, lp in zip(content, expected.logprobs):
        assert [t.logprob for t in got.top_logprobs] == pytest.approx([v for _, v in lp.top[:2]], abs=TOLERANCE)
        assert got.bytes == list(got.token.encode())
    chunks = list(client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, temperature=0,
                                                 logprobs=True, top_logprobs=2, stream=True))
    streamed = [c for chunk in chunks if chunk.choices and chunk.choices[0].logprobs
                for c in chunk.choices[0].logprobs.content]
    assert [(c.token, c.logprob) for c in streamed] == [(c.token, c.logprob) for c in content]


def test_no_logprobs_unless_asked(server):
    out = server.client().chat.completions.create(model=MODEL, messages=CHAT, max_tokens=3, temperature=0)
    assert out.choices[0].logprobs is None


@pytest.mark.parametrize("body, param", [
    ({"messages": CHAT, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"prompt": PROMPT, "logprobs": -1}, "logprobs"),
])
def test_bad_logprobs_values_are_a_400_naming_the_field(server, body, param):
    import json
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    status, _, text = request(f"{server.url}{path}", "POST", json.dumps({"model": MODEL, **body}).encode(),
                              server.headers())
    assert status == 400 and json.loads(text)["error"]["param"] == param, text


def test_echo_with_max_tokens_0_scores_several_prompts_as_lm_eval_asks(server, reference):
    """lm-eval's local-completions: token-id prompts, echo, max_tokens 0 (or 1), logprobs 1; the
    prompt's token_logprobs (None first) are the engine's prompt logprobs."""
    prompts = reference["prompt_ids"]
    out = server.client().completions.create(model=MODEL, prompt=prompts, max_tokens=0, echo=True, logprobs=1,
                                             temperature=0)
    assert [c.index for c in out.choices] == [0, 1] and out.usage.completion_tokens == 0
    assert out.usage.prompt_tokens == sum(len(p) for p in prompts)
    for choice, prompt, expected in zip(out.choices, prompts, (reference["completion"], reference["chat"])):
        scores = choice.logprobs
        assert choice.text == reference["decode_all"](prompt)
        assert len(scores.tokens) == len(prompt) and scores.token_logprobs[0] is None and scores.top_logprobs[0] is None
        assert scores.token_logprobs[1:] == pytest.approx([lp.logprob for lp in expected.prompt_logprobs], abs=TOLERANCE)
        for got, lp in zip(scores.top_logprobs[1:], expected.prompt_logprobs):
            best = lp.top[0]
            assert got == pytest.approx({reference["decode"](best[0]): best[1]}, abs=TOLERANCE)


def test_echo_repeats_the_prompt_before_the_answer_whole_and_streamed(server, reference):
    expected = reference["completion"]
    client = server.client()
    out = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, echo=True, logprobs=0, temperature=0)
    choice = out.choices[0]
    assert choice.text == PROMPT + expected.text
    prompt_len = len(reference["prompt_ids"][0])
    assert len(choice.logprobs.tokens) == prompt_len + len(expected.token_ids)
    assert choice.logprobs.token_logprobs[prompt_len:] == pytest.approx([lp.logprob for lp in expected.logprobs],
                                                                        abs=TOLERANCE)
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, echo=True, temperature=0,
                                            stream=True))
    assert chunks[0].choices[0].text == PROMPT
    assert "".join(c.choices[0].text for c in chunks if c.choices) == PROMPT + expected.text


@pytest.mark.parametrize("body, param", [
    ({"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
    ({"prompt": PROMPT, "max_tokens": 0, "echo": True, "stream": True}, "max_tokens"),
    ({"prompt": PROMPT, "n": 2, "best_of": 3, "stream": True}, "best_of"),
    ({"prompt": [[1, 2], [3, 10**6]]}, "prompt.1"),
    ({"prompt": [PROMPT] * 65}, "prompt"),
])
def test_unsupported_echo_and_batch_values_are_a_400_naming_the_field(server, body, param):
    import json
    status, _, text = request(f"{server.url}/v1/completions", "POST", json.dumps({"model": MODEL, **body}).encode(),
                              server.headers())
    assert status == 400 and json.loads(text)["error"]["param"] == param, text


def test_n_samples_share_the_prompt_s_kv_blocks_and_a_seed_reproduces_them(server):
    """n=4 with a seed: four answers, the same four again for the same seed; the three after the
    first take the prompt's full KV blocks from the prefix cache (the metrics count the hit tokens)."""
    client = server.client()
    prompt = "the device and the model and the user: " * 4          # a few full blocks
    before = server.metrics().get("anydev_prefix_cache_hit_tokens_total", 0.0)
    first = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=1.0, seed=11, n=4)
    hits = server.metrics().get("anydev_prefix_cache_hit_tokens_total", 0.0) - before
    again = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=1.0, seed=11, n=4)
    texts = [c.text for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2, 3] and len(set(texts)) > 1
    assert texts == [c.text for c in again.choices]
    alone = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=1.0, seed=12)
    assert alone.choices[0].text == texts[1]          # sample i is the request's seed + i
    assert first.usage.prompt_tokens == alone.usage.prompt_tokens    # the prompt counts once
    assert hits >= 3 * 16, hits          # 3 samples x at least one full 16-token block each


def streamed_choices(chunks) -> dict[int, tuple[str, str | None]]:
    """Per choice index: its text (completions' text, or chat's content deltas) and finish reason."""
    texts, reasons = {}, {}
    for chunk in chunks:
        for c in chunk.choices:
            piece = c.text if hasattr(c, "text") else c.delta.content or ""
            texts[c.index] = texts.get(c.index, "") + piece
            reasons[c.index] = c.finish_reason or reasons.get(c.index)
    return {i: (texts[i], reasons[i]) for i in texts}


def test_n_samples_streamed_equal_the_same_samples_whole(server):
    """n=3 streamed with a seed: every index streams the text and finish reason of the same sample
    whole; the usage chunk counts the prompt once and every sample's tokens."""
    client = server.client()
    prompt = "the device and the model: "
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=7, temperature=1.0, seed=5, n=3)
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=7, temperature=1.0, seed=5, n=3,
                                            stream=True, stream_options={"include_usage": True}))
    assert streamed_choices(chunks) == {c.index: (c.text, c.finish_reason) for c in whole.choices}
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()


def test_several_prompts_streamed_equal_them_whole_numbered_through_their_samples(server):
    """Two prompts, n=2, streamed: indices 0-3 (prompt after prompt), each the text whole gives it."""
    client = server.client()
    prompts = ["hello world number 7: ", "a device is the model of "]
    whole = client.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0.8, seed=9, n=2)
    chunks = list(client.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0.8, seed=9, n=2,
                                            stream=True, stream_options={"include_usage": True}))
    assert sorted(streamed_choices(chunks)) == [0, 1, 2, 3]
    assert streamed_choices(chunks) == {c.index: (c.text, c.finish_reason) for c in whole.choices}
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()


def test_chat_n_streamed_gives_each_choice_its_role_then_its_whole_answer(server):
    client = server.client()
    whole = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=6, temperature=1.0, seed=2, n=2)
    chunks = list(client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=6, temperature=1.0, seed=2,
                                                 n=2, stream=True))
    firsts = {}
    for chunk in chunks:
        for c in chunk.choices:
            firsts.setdefault(c.index, c.delta.role)
    assert firsts == {0: "assistant", 1: "assistant"}
    assert streamed_choices(chunks) == {c.index: (c.message.content, c.finish_reason) for c in whole.choices}


def test_best_of_returns_the_likeliest_samples(server):
    client = server.client()
    prompt = "hello world number 5: "
    every = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=1.0, seed=3, n=4,
                                      logprobs=0)
    totals = [sum(c.logprobs.token_logprobs) for c in every.choices]
    best = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=1.0, seed=3, n=2,
                                     best_of=4)
    ranked = sorted(range(4), key=lambda i: -totals[i])[:2]
    assert [c.text for c in best.choices] == [every.choices[i].text for i in ranked]
    assert all(c.logprobs is None for c in best.choices) and best.usage.completion_tokens == every.usage.completion_tokens


def test_penalties_bias_and_min_p_reach_the_engine(server):
    """Each value changes the greedy answer as the engine's own sampling does (tests/core/
    test_logits_processors.py checks those against HF's processors)."""
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=256, use_graphs=False)) as engine:
        ids = engine.checkpoint.tokenizer.encode(PROMPT, add_special_tokens=True)
        cases = [dict(frequency_penalty=1.5), dict(presence_penalty=-1.0, repetition_penalty=1.4),
                 dict(logit_bias={"42": 8.0})]
        for extra in cases:
            params = {k: v for k, v in extra.items() if k != "logit_bias"}
            bias = {int(k): v for k, v in extra.get("logit_bias", {}).items()} or None
            expected = engine.generate_ids([ids], SamplingParams(max_new_tokens=8, logit_bias=bias, **params))[0].text
            out = server.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                                     extra_body=extra if "repetition_penalty" in extra else None,
                                                     **({} if "repetition_penalty" in extra else extra))
            assert out.choices[0].text == expected, extra
