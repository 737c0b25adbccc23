#!/usr/bin/env bash
# Session 9, conformance part (issue 36): the full conformance suite on nvidia with one GPU (the full
# kernel sweep, no --quick: contexts to 3000, norms to 8192, linear 14336 -> 4096; the new domain
# checks; the performance row: memset, device copy, all_reduce at 1 rank, linear, against the peak
# from the memory clock x bus width). Run from the repo root after `source scripts/device_setup.sh`
# (the script sources it too); writes to $OUT/r/. Bounded: about 4 min in all.
#
# The kernels group alone took 220 s serially on an H200 (results/2026-12-01-nvidia-h200-x1-abort-seeds),
# more since the linear layers joined it, so it runs in 8 xdist workers (its checks allocate little);
# every other group runs in one worker, so the memory checks that size themselves from free memory
# see no other check's allocations. The two reports are merged into conformance.json/.md (one
# verdict, the performance row from the first).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv; git log -1 --oneline 2>/dev/null || cat .rec/commit; } > $R/env.txt 2>&1
step conf-groups 95 python3 -m anydev.conformance --device nvidia --tp 1 -n 1 --report $R/conf-groups.json -- -k "not test_kernels" --tb=short -rfE
step conf-kernels 125 python3 -m anydev.conformance --device nvidia --tp 1 -n 8 --report $R/conf-kernels.json -- -k test_kernels --tb=short -rfE
step merge 20 python3 - "$R" <<'PY'
import json, sys
from pathlib import Path

from anydev.conformance.report import CheckResult, verdict_text, verdicts, write_report

out = Path(sys.argv[1])
parts = [json.loads((out / name).read_text()) for name in ("conf-groups.json", "conf-kernels.json") if (out / name).exists()]
results = [CheckResult(**check) for part in parts for check in part["checks"]]
meta = {k: v for k, v in parts[0].items() if k in ("host", "python", "contract_version", "plugin_contract_versions",
                                                     "devices", "tp", "emulated", "sweep")}
meta["command"] = " && ".join(part["command"] for part in parts)
performance = parts[0].get("performance", {})
json_path, md_path = write_report(out / "conformance.json", results, meta, sweep=meta.get("sweep", "full"),
                                  performance=performance)
for backend, (verdict, why) in verdicts(results).items():
    print(backend, verdict_text(results, backend, verdict, meta.get("sweep", "full")), "-", why)
print(md_path.read_text())
PY
