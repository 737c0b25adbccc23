"""lm-eval-harness against ``anydev serve`` (a subprocess on 127.0.0.1): its ``local-completions``
model scores a small multiple-choice task (tests/serving/lm_eval_task/: a YAML and a JSON file, no
download) through the server's completions API (token-id prompts, four per request, ``echo`` with
prompt logprobs), and its ``hf`` model scores the same task through HF transformers on the same
checkpoint (a tiny random llama the tests write, float32). The accuracy is equal and so is every
choice's loglikelihood, within TOLERANCE. Offline: the hub and datasets are told so, with their
caches in a temporary folder."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints import write_hf_checkpoint
from serve_support import Server

TASK_DIR = Path(__file__).resolve().parent / "lm_eval_task"
MISSING = [name for name in ("lm_eval", "accelerate", "tenacity") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"lm-eval-harness is not installed (missing {MISSING}): "
                                                      "pip install 'lm-eval[api,hf]' (the [test] extra has it)")

#: A choice's loglikelihood is a sum of a few float32 token logprobs, each within 1e-4 of HF's.
TOLERANCE = 1e-3
SERVED = "tiny-llama"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("lm_eval") / "llama", arch="llama")


@pytest.fixture(scope="module")
def server(checkpoint):
    srv = Server("--model", str(checkpoint), "--served-model-name", SERVED, "--max-model-len", "256",
                 "--dtype", "float32")
    yield srv
    code, out = srv.stop()
    assert code == 0, out


def run_lm_eval(tmp_path: Path, *runs: tuple[str, str]) -> list[dict]:
    """lm_eval_task/score.py's result for each (model, model_args), run offline in one subprocess."""
    out = tmp_path / "scores.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf-home"), HF_DATASETS_CACHE=str(tmp_path / "datasets"))
    command = [sys.executable, str(TASK_DIR / "score.py"), str(out), *[arg for run in runs for arg in run]]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


def test_lm_eval_through_the_server_equals_hf_transformers(server, checkpoint, tmp_path):
    # lm-eval's hf model adds the tokenizer's special tokens (BOS here) by default and local-completions
    # does not: both are told to, so that both score the same token ids.
    common = "max_length=256,add_bos_token=True"
    served, hf = run_lm_eval(
        tmp_path,
        ("local-completions", f"model={SERVED},base_url={server.url}/v1/completions,tokenizer_backend=huggingface,"
                              f"tokenizer={checkpoint},tokenized_requests=True,{common}"),
        ("hf", f"pretrained={checkpoint},dtype=float32,{common}"))

    items = json.loads((TASK_DIR / "anydev_choice.json").read_text())
    assert sorted(hf["loglikelihoods"]) == sorted(served["loglikelihoods"]) == [str(i) for i in range(len(items))]
    for doc_id, expected in hf["loglikelihoods"].items():
        assert len(expected) == len(items[int(doc_id)]["choices"])
        assert served["loglikelihoods"][doc_id] == pytest.approx(expected, abs=TOLERANCE), doc_id
        best, runner_up = sorted(expected, reverse=True)[:2]
        assert best - runner_up > 10 * TOLERANCE, f"item {doc_id}'s choice is decided by rounding: change the data"
    assert served["acc"] == hf["acc"]
