"""The kernels group checks a kernel offered for some formats only (contract 1.6) on exactly those:
a backend whose quantized_linear declares q4_k alone and is wrong on q8_0 (not declared) certifies,
its other formats reported as "not offered" skips; the mutant that declares q4_k and is wrong there
(``quantized-linear-q4-k-offer-drops-mins``) fails on q4_k. One suite run on both backends (about
30 s on a 2-core machine: the quantized_linear checks of the quick sweep)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anydev.conformance
from anydev.plugin_api.weight_formats import WEIGHT_FORMATS

SUITE_DIR = Path(anydev.conformance.__file__).parent
MUTANT = "quantized-linear-q4-k-offer-drops-mins"

PLUGIN = '''
"""A cpu backend whose quantized_linear is offered for q4_k only, and is wrong on every other format."""
from anydev.plugin_api import BackendPlugin, KernelOffer, hookimpl


def quantized_linear(x, weight, scales, weight_format):
    from anydev.plugin_api import kernels

    out = kernels.quantized_linear(x, weight, scales, weight_format)
    return out if weight_format == "q4_k" else out + 1.0


def _load():
    from anydev.backends.cpu.runtime import CpuRuntime

    class Q4KOnlyRuntime(CpuRuntime):
        name = ""   # not cpu's: the registry gives it the plugin's
        hardware_label = "host CPU (q4_k offer)"

        def kernels(self):
            return {"quantized_linear": KernelOffer(quantized_linear, weight_formats=("q4_k",))}

    return Q4KOnlyRuntime()


class Plugin:
    @hookimpl
    def anydev_backends(self):
        return [BackendPlugin(name="q4konly", contract_version=(1, 6), load=_load)]


plugin = Plugin()
'''


def test_a_q4_k_offer_wrong_elsewhere_certifies_and_one_wrong_on_q4_k_fails(tmp_path):
    (tmp_path / "q4konly_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist_info = tmp_path / "q4konly-0.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: q4konly\nVersion: 0.0\n")
    (dist_info / "entry_points.txt").write_text("[anydev.backends]\nq4konly = q4konly_plugin:plugin\n")
    report_file = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "ANYDEV_CPU_DEVICES": "1", "ANYDEV_CPU_DEVICE_MEMORY": "1GiB", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", str(SUITE_DIR / "test_kernels.py"), "-p", "no:cacheprovider", "-q",
               "--rootdir", str(SUITE_DIR), "-k", "quantized_linear or kernel_set", "--anydev-mutant", MUTANT,
               "--quick", "--device", f"q4konly,mutant-{MUTANT}", "--report", str(report_file)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert report_file.exists(), done.stdout[-4000:] + done.stderr[-2000:]
    document = json.loads(report_file.read_text())
    checks = {backend: [c for c in document["checks"] if c["backend"] == backend]
              for backend in ("q4konly", f"mutant-{MUTANT}")}

    offered = checks["q4konly"]
    assert document["verdicts"]["q4konly"]["verdict"] == "certified", done.stdout[-4000:]
    q4_k = [c for c in offered if "quantized_linear" in c["check"] and "q4_k" in c["check"]]
    others = [c for c in offered if "quantized_linear" in c["check"] and "q4_k" not in c["check"]]
    assert len(q4_k) == 3 and {c["status"] for c in q4_k} == {"pass"}, q4_k
    assert len(others) == 3 * (len(WEIGHT_FORMATS) - 1) and {c["status"] for c in others} == {"skip"}, others
    assert all(c["reason"].startswith("not offered: 'q4konly' declares quantized_linear for q4_k") for c in others), \
        others[0]["reason"]

    mutant = checks[f"mutant-{MUTANT}"]
    assert document["verdicts"][f"mutant-{MUTANT}"]["verdict"] == "failed"
    failed = {c["check"] for c in mutant if c["status"] == "fail"}
    assert failed and all("q4_k" in check for check in failed), failed
    assert done.returncode != 0
