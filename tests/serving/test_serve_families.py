"""``anydev serve --model DIR`` serves a checkpoint of each of the issue's families (llama, qwen3,
qwen3_moe): a greedy completion over the OpenAI API is the text the Python API gives for the same
prompt (server on 127.0.0.1, one request)."""
from __future__ import annotations

import pytest

from anydev.core import EngineConfig, InferEngine, SamplingParams
from checkpoints import write_hf_checkpoint
from serve_support import Server

PROMPT = "Hello world! Tensor parallel"


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_moe"])
def test_serve_runs_a_model_of_the_family(tmp_path, arch):
    directory = write_hf_checkpoint(tmp_path / arch, arch=arch)
    with InferEngine(directory, EngineConfig(max_model_len=128, use_graphs=False)) as engine:
        expected = engine.generate([PROMPT], SamplingParams(max_new_tokens=8), use_chat_template=False)[0].text
    server = Server("--model", str(directory), "--max-model-len", "128")
    try:
        client = server.client()
        model = client.models.list().data[0].id
        got = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0).choices[0].text
    finally:
        code, output = server.stop()
    assert code == 0, output
    assert expected and got == expected
