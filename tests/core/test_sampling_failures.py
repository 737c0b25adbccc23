"""A token that cannot be sampled fails its own request, never the engine: a row whose logits hold
NaN or infinity (a model overflowing its dtype on one input) or whose seed seeds no generator gets a
failure code from the sampler; the engine ends that request with finish reason "error" (the Python
API raises RequestFailedError for it, the server answers 500 or sends an error event, then [DONE]),
and every other request, in the same steps or later, runs as if it had not been there.

The NaN logits are provoked by wrapping the rank worker's ``sample_rows`` (the sampler is rank 0, in
the test's process, at both executors): rows whose request asks for top_k == POISON get NaN logits."""
from __future__ import annotations

import json
import threading

import pytest
import torch

from anydev.core import EngineConfig, InferEngine, RequestFailedError, SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.rank import rank_worker
from anydev.core.sched.sampling import (NON_FINITE_LOGITS, UNSEEDABLE, UNSEEDED, SeededGenerators,
                                        sample_rows)

POISON = 13     # the top_k that marks a request whose logits the wrapped sampler makes NaN
GOOD = SamplingParams(max_new_tokens=12, temperature=0.8, seed=7)
BAD = SamplingParams(max_new_tokens=12, temperature=1.0, top_k=POISON)


@pytest.fixture
def poisoned(monkeypatch):
    real = rank_worker.sample_rows

    def sample_rows_with_nan(logits, params, generators):
        rows = torch.tensor([p is not None and p.top_k == POISON for p in params], device=logits.device)
        return real(logits.masked_fill(rows[:, None], float("nan")), params, generators)

    monkeypatch.setattr(rank_worker, "sample_rows", sample_rows_with_nan)


# ---- the sampler --------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_row_with_non_finite_logits_gets_the_code_and_the_others_their_tokens(bad):
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    poisoned = logits.clone()
    poisoned[1, 5] = bad
    params = [SamplingParams(), SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9),
              SamplingParams(temperature=1.0, top_k=8)]
    tokens = sample_rows(poisoned, params, [None, None, torch.Generator().manual_seed(1),
                                            torch.Generator().manual_seed(2)])
    alone = sample_rows(logits, params, [None, None, torch.Generator().manual_seed(1),
                                         torch.Generator().manual_seed(2)])
    assert tokens[1] == NON_FINITE_LOGITS
    assert tokens[[0, 2, 3]].tolist() == alone[[0, 2, 3]].tolist()   # greedy and seeded rows: as without it


@pytest.mark.parametrize("greedy", [True, False])
def test_a_row_of_only_minus_infinity_fails_and_one_masked_in_part_does_not(greedy):
    logits = torch.randn(3, 16, generator=torch.Generator().manual_seed(5))
    logits[1] = float("-inf")
    logits[2, :8] = float("-inf")            # half its vocabulary masked: still a well-defined draw
    params = [SamplingParams() if greedy else SamplingParams(temperature=1.0)] * 3
    tokens = sample_rows(logits, params, [None] * 3)
    assert tokens[1] == NON_FINITE_LOGITS
    assert tokens[0] >= 0 and 8 <= tokens[2] < 16
    if greedy:
        assert tokens[[0, 2]].tolist() == logits[[0, 2]].argmax(dim=-1).tolist()


def test_a_greedy_row_with_nan_logits_fails_too():
    logits = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    logits[2, 0] = float("nan")
    assert sample_rows(logits, [SamplingParams()] * 3, [None] * 3).tolist() == \
        logits[:2].argmax(dim=-1).tolist() + [NON_FINITE_LOGITS]


def test_a_seed_that_seeds_no_generator_fails_its_row_only():
    generators = SeededGenerators(torch.device("cpu"))
    rows = generators.rows([(0, 5), (1, 2**64)])     # (a seed changed after the request was validated)
    assert rows[1] is UNSEEDED and generators.seq_ids() == [0]
    logits = torch.randn(2, 32, generator=torch.Generator().manual_seed(4))
    params = [SamplingParams(temperature=1.0)] * 2
    tokens = sample_rows(logits, params, rows)
    assert tokens[1] == UNSEEDABLE
    assert tokens[0] == sample_rows(logits[:1], params[:1], [torch.Generator().manual_seed(5)])[0]


# ---- the engine, at both executors --------------------------------------------------------------
@pytest.mark.parametrize("executor, tp, pp", [("threads", 2, 1), ("mp", 2, 1), ("threads", 1, 2)])
def test_a_failed_request_ends_alone_and_the_engine_serves_on(executor, tp, pp, poisoned):
    # (pp=2: the last stage samples and the tokens come back before the next step is built)
    with InferEngine(demo_checkpoint(), EngineConfig(tp=tp, pp=pp, executor=executor, num_blocks=32,
                                                     max_model_len=64)) as engine:
        [alone] = engine.generate_ids([[1, 2, 3]], GOOD)
        good = engine.add_request([1, 2, 3], GOOD)
        bad = engine.add_request([4, 5, 6, 7], BAD)
        while engine.has_unfinished:
            engine.step()
        assert bad.finish_reason == "error" and "NaN or infinity" in bad.error and bad.output == []
        assert good.finish_reason == "length" and good.output == alone.token_ids
        with pytest.raises(RequestFailedError, match="prompt 0: sampling failed: .*NaN") as failed:
            engine.generate_ids([[1, 2, 3], [4, 5]], BAD)
        assert [o.finish_reason for o in failed.value.outputs] == ["error", "error"]
        [later] = engine.generate_ids([[1, 2, 3]], GOOD)
        assert later.token_ids == alone.token_ids


# ---- the server ---------------------------------------------------------------------------------
def test_the_server_answers_a_failed_request_with_500_and_serves_the_others(poisoned):
    from starlette.testclient import TestClient

    from anydev.serving import ServerLimits, create_app

    good = {"model": "anydev-demo", "prompt": [1, 2, 3], "max_tokens": 24, "temperature": 0.8, "seed": 7}
    bad = {"model": "anydev-demo", "prompt": [4, 5, 6], "max_tokens": 8, "temperature": 1.0, "top_k": POISON}
    with InferEngine(demo_checkpoint(), EngineConfig(tp=2, num_blocks=32, max_model_len=64)) as engine, \
            TestClient(create_app(engine, "anydev-demo", ServerLimits())) as client:
        alone = client.post("/v1/completions", json=good).json()["choices"][0]["text"]
        beside: dict = {}
        thread = threading.Thread(target=lambda: beside.update(client.post("/v1/completions", json=good).json()))
        thread.start()
        whole = client.post("/v1/completions", json=bad)
        with client.stream("POST", "/v1/completions", json={**bad, "stream": True}) as response:
            events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
        thread.join(timeout=120)
        assert whole.status_code == 500
        assert whole.json()["error"]["code"] == "request_failed"
        assert "sampling failed" in whole.json()["error"]["message"]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "request_failed"
        assert beside["choices"][0]["text"] == alone
        later = client.post("/v1/completions", json=good)
        assert later.status_code == 200 and later.json()["choices"][0]["text"] == alone
