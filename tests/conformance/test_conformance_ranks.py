"""Without ``--tp`` each backend's rank checks go up to its device count, none generated beyond
(so none skipped for want of devices), and the report states the rank count used and, beside
anydev's contract version, the one each plugin declares."""
import json
import os
import re
import subprocess
import sys

import pytest

from anydev.plugin_api import CONTRACT_VERSION, get_registry


def test_rank_checks_follow_each_backends_device_count_and_the_report_says_so(tmp_path):
    if "hostdev" not in get_registry().plugins:
        pytest.skip("the example out-of-tree backend is not installed (pip install -e examples/out_of_tree_backend)")
    report_file = tmp_path / "report.json"
    env = dict(os.environ, ANYDEV_CPU_DEVICES="2", ANYDEV_HOSTDEV_DEVICES="3", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "cpu,hostdev", "--report", str(report_file),
         "--", "-q", "-k", "test_all_gather"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    document = json.loads(report_file.read_text())
    ranks: dict[str, set[int]] = {}
    for check in document["checks"]:
        assert check["status"] == "pass", check
        ranks.setdefault(check["backend"], set()).add(int(re.search(r"-(\d+)ranks-", check["check"]).group(1)))
    assert ranks == {"cpu": {1, 2}, "hostdev": {1, 2, 3}}
    assert document["tp"] == {"cpu": 2, "hostdev": 3}
    assert document["contract_version"] == list(CONTRACT_VERSION)
    assert document["plugin_contract_versions"] == {"cpu": list(CONTRACT_VERSION), "hostdev": [1, 6]}
    line = (f"contract: anydev {CONTRACT_VERSION[0]}.{CONTRACT_VERSION[1]}; declared by the plugins: "
            f"cpu {CONTRACT_VERSION[0]}.{CONTRACT_VERSION[1]}, hostdev 1.6; ranks (tp): cpu 2, hostdev 3")
    assert line in done.stdout and line in report_file.with_suffix(".md").read_text()


def test_tp_given_is_the_rank_count_of_every_backend(tmp_path):
    report_file = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "anydev.conformance", "--device", "cpu", "--tp", "3", "--report", str(report_file),
         "--", "-q", "-k", "test_all_gather"],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    document = json.loads(report_file.read_text())
    assert document["tp"] == {"cpu": 3}
    assert {re.search(r"-(\d+)ranks-", c["check"]).group(1) for c in document["checks"]} == {"1", "2", "3"}


def test_collectives_run_at_1_2_3_and_n_and_the_engine_at_the_most_ranks_splitting_its_heads():
    from types import SimpleNamespace

    from anydev.conformance.report import RANKS_KEY
    from anydev.conformance.support import largest_ranks_dividing, rank_counts

    def config(tp):
        return SimpleNamespace(getoption=lambda name: tp if name == "anydev_tp" else None)

    assert [rank_counts(config(n), "cpu") for n in (1, 2, 3, 4, 8)] == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 8]]
    for tp, expected in ((8, 4), (4, 4), (3, 2), (2, 2), (1, 1)):
        request = SimpleNamespace(config=config(tp), node=SimpleNamespace(user_properties=[]))
        assert largest_ranks_dividing(None, request, 4) == expected
        assert request.node.user_properties == [(RANKS_KEY, expected)]
