"""The API's manners as OpenAI's own: an unknown model is a 404 ``model_not_found``, and a stream's
usage comes only when asked, once, in a final chunk of its own. In process (FastAPI's test client
over the app on the demo engine), driven by the official ``openai`` client."""
from __future__ import annotations

import openai
import pytest
from starlette.testclient import TestClient

from anydev.core import EngineConfig, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.serving import create_app

MODEL = "anydev-demo"


@pytest.fixture(scope="module")
def api():
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=128, use_graphs=False)) as engine:
        with TestClient(create_app(engine, MODEL)) as http:
            yield openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=http, max_retries=0)


@pytest.mark.parametrize("chat", [False, True])
def test_an_unknown_model_is_404_model_not_found(api, chat):
    with pytest.raises(openai.NotFoundError) as caught:
        if chat:
            api.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        else:
            api.completions.create(model="gpt-4", prompt="hi", max_tokens=2)
    error = caught.value.body
    assert caught.value.status_code == 404
    assert error["code"] == "model_not_found" and error["param"] == "model" and error["type"] == "invalid_request_error"
    assert "gpt-4" in error["message"]
    served = api.models.list().data[0].id
    assert api.completions.create(model=served, prompt="hi", max_tokens=2).usage.completion_tokens == 2


def _stream(api, chat: bool, **options):
    if chat:
        return api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                           temperature=0, stream=True, **options)
    return api.completions.create(model=MODEL, prompt="hello world", max_tokens=6, temperature=0, stream=True,
                                  **options)


@pytest.mark.parametrize("chat", [False, True])
def test_usage_asked_for_comes_once_in_a_final_chunk_without_choices(api, chat):
    whole = (api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                         temperature=0) if chat else
             api.completions.create(model=MODEL, prompt="hello world", max_tokens=6, temperature=0)).usage
    chunks = list(_stream(api, chat, stream_options={"include_usage": True}))
    counted = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for chunk in chunks:                       # what a client that sums every usage it is sent counts
        if chunk.usage is not None:
            for name in counted:
                counted[name] += getattr(chunk.usage, name)
    assert counted == {"prompt_tokens": whole.prompt_tokens, "completion_tokens": whole.completion_tokens,
                       "total_tokens": whole.total_tokens}
    assert [c.usage is not None for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].choices == [] and all(c.choices for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "length"


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("options", [None, {"include_usage": False}], ids=["no-options", "not-asked"])
def test_usage_not_asked_for_is_in_no_chunk(api, chat, options):
    stream = _stream(api, chat, **({"stream_options": options} if options else {}))
    chunks = list(stream)
    assert chunks and all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all("usage" not in c.model_dump(exclude_unset=True) for c in chunks)   # not even null: as OpenAI
