#!/usr/bin/env bash
# Issue 36 on one H200: the full conformance suite on nvidia (no --quick: the full kernel sweep,
# contexts to 3000, norms to 8192, linear 14336 -> 4096; the domain checks of memory, streams and
# events, collectives and send/recv; the performance row: memset, device copy, all_reduce at 1 rank,
# the decode linear, against the peak from the memory clock x bus width). Run from the repo root;
# writes $OUT/h36.log (every step's output) and $OUT/h36/: conformance.json and conformance.md (the
# merged report and matrix), the two parts' reports, env.txt, steps.txt. Bounded: 345 s in all.
#
# Needs hypothesis on the machine (the domain checks fail at import without it): carry its wheels,
#   ../shared/tools/device-wheels.sh cffi pycparser gguf hypothesis sortedcontainers   (carry [".whl"])
#
# The kernels group runs in 8 xdist workers (its checks allocate little; serially it took 220 s on an
# H200 before the linear layers joined it); every other group runs in one worker, so the memory
# checks that size themselves from free memory see no other check's allocations. The two reports are
# merged into conformance.json/.md: one verdict, the performance row from the groups part.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
LOG=$OUT/h36.log; R=$OUT/h36; mkdir -p "$R"
DEADLINE=$((SECONDS + ${H36_BUDGET:-345}))
# step NAME LIMIT CMD...: CMD bounded by LIMIT seconds and by what is left before DEADLINE.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS)); (( left < limit )) && limit=$left
  if (( limit <= 5 )); then echo "skipped $name: out of time" | tee -a "$R/steps.txt"; return; fi
  echo "=== $name (at most $limit s): $*" >> "$LOG"
  local t=$SECONDS
  timeout -k 5 -s ABRT "$limit" "$@" >> "$LOG" 2>&1
  echo "$? $name ($((SECONDS - t)) s): $*" | tee -a "$R/steps.txt"
}
source scripts/device_setup.sh >> "$LOG" 2>&1 || echo "1 setup (see h36.log)" | tee -a "$R/steps.txt"
python3 -c "import hypothesis" >> "$LOG" 2>&1 \
  || echo "1 hypothesis missing: carry its wheels (see the header); the domain checks fail at import" | tee -a "$R/steps.txt"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv
  git log -1 --oneline 2>/dev/null || cat .rec/commit; } > "$R/env.txt" 2>&1
step groups 150 python3 -m anydev.conformance --device nvidia --tp 1 -n 1 --report "$R/groups.json" \
  -- -k "not test_kernels" --tb=short -rfE
step kernels 170 python3 -m anydev.conformance --device nvidia --tp 1 -n 8 --report "$R/kernels.json" \
  -- -k test_kernels --tb=short -rfE
step merge 15 python3 - "$R" <<'PY'
import json, sys
from pathlib import Path

from anydev.conformance.crashes import Crash
from anydev.conformance.report import CheckResult, verdict_text, verdicts, write_report

out = Path(sys.argv[1])
parts = [json.loads((out / f"{name}.json").read_text()) for name in ("groups", "kernels") if (out / f"{name}.json").exists()]
if not parts:
    sys.exit("no part wrote its report")
results = [CheckResult(**check) for part in parts for check in part["checks"]]
crashes = [Crash(**crash) for part in parts for crash in part["crashes"]]
meta = {k: v for k, v in parts[0].items() if k in ("host", "python", "contract_version", "plugin_contract_versions",
                                                     "devices", "tp", "emulated", "sweep")}
meta["command"] = " && ".join(part["command"] for part in parts)
sweep = meta.get("sweep", "full")
performance = next((part["performance"] for part in parts if part.get("performance")), {})
json_path, md_path = write_report(out / "conformance.json", results, meta, crashes, sweep=sweep, performance=performance)
for backend, (verdict, why) in verdicts(results).items():
    print(backend, verdict_text(results, backend, verdict, sweep), "-", why)
print(md_path.read_text())
PY
tail -n 40 "$R/conformance.md" 2>/dev/null
