"""``anydev serve --model DIR`` serves a Qwen3-MoE checkpoint: a greedy completion over the OpenAI API
is the text the Python API gives for the same prompt (server on 127.0.0.1, one request)."""
from __future__ import annotations

from anydev.core import EngineConfig, InferEngine, SamplingParams
from checkpoints import write_hf_checkpoint
from serve_support import Server

PROMPT = "Hello world! Tensor parallel"


def test_serve_runs_a_qwen3_moe_model(tmp_path):
    directory = write_hf_checkpoint(tmp_path / "qwen3_moe", arch="qwen3_moe")
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
