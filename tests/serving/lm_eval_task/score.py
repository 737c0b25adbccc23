"""Score the anydev_choice task (the YAML and JSON beside this file) with lm-eval-harness, once per
model given, in one process (lm-eval, torch and datasets import once), and write each run's accuracy
and per-item loglikelihoods as JSON:

    python score.py OUT.json MODEL MODEL_ARGS [MODEL MODEL_ARGS ...]

OUT.json is a list, one entry per model in the order given: ``{"acc": float, "loglikelihoods":
{doc_id: [one per choice]}}``. Only this folder's tasks are indexed (not lm-eval's built-in ones),
and it runs from this folder, where the YAML's relative ``data_files`` resolves.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager

HERE = Path(__file__).resolve().parent
TASK = "anydev_choice"


def score(tasks: TaskManager, model: str, model_args: str) -> dict:
    results = simple_evaluate(model=model, model_args=model_args, tasks=[TASK], task_manager=tasks,
                              batch_size=4, device="cpu", log_samples=True)
    samples = results["samples"][TASK]
    return {"acc": results["results"][TASK]["acc,none"],
            "loglikelihoods": {s["doc_id"]: [float(ll) for ll, _greedy in s["filtered_resps"]] for s in samples}}


def main(argv: list[str]) -> None:
    out, runs = Path(argv[0]).resolve(), argv[1:]
    if not runs or len(runs) % 2:
        raise SystemExit("usage: python score.py OUT.json MODEL MODEL_ARGS [MODEL MODEL_ARGS ...]")
    os.chdir(HERE)
    tasks = TaskManager(include_path=str(HERE), include_defaults=False)
    scored = [score(tasks, model, model_args) for model, model_args in zip(runs[::2], runs[1::2])]
    out.write_text(json.dumps(scored))


if __name__ == "__main__":
    main(sys.argv[1:])
