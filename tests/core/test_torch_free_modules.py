"""The modules an HTTP front end and a command line's flags import load no torch (the engine core's
process and the ranks import it), and the names they spell out for torch-side things stay right."""
from __future__ import annotations

import json
import subprocess
import sys

#: What ``anydev serve``'s front end imports of the engine: its flags and config, the executors' names,
#: the request types, the tokenizer and the engine core's client side.
FRONT_END_MODULES = ("anydev.core.engine_args", "anydev.core.engine_config", "anydev.core.executors.registry",
                     "anydev.core.sched.sampling_params", "anydev.core.sched.token_logprobs",
                     "anydev.core.loading.tokenizer", "anydev.serving.engine_core", "anydev.serving.messages",
                     "anydev.serving.async_engine", "anydev.serving.app")


def test_the_front_end_modules_import_no_torch():
    code = (f"import importlib, json, sys\nfor name in {FRONT_END_MODULES!r}:\n    importlib.import_module(name)\n"
            "print(json.dumps([m for m in ('torch', 'triton', 'transformers') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_default_worker_names_the_rank_worker():
    from anydev.core.rank.rank_worker import RankWorker
    from anydev.core.rank.worker_class import DEFAULT_WORKER, worker_class

    assert worker_class(DEFAULT_WORKER) is RankWorker


def test_the_built_in_executors_resolve_to_their_classes():
    from anydev.core.executors.base import Executor
    from anydev.core.executors.registry import EXECUTORS, executor_class

    for name in ("threads", "mp", "torchrun"):
        found = executor_class(name)
        assert issubclass(found, Executor) and found.name == name
    assert set(EXECUTORS) >= {"threads", "mp", "torchrun"}
