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
