#!/usr/bin/env bash
# The project's test command (README; CI runs it through .ci/run):
#   1. the unit tests (tests/), two xdist workers;
#   2. the conformance suite on every registered backend: cpu; moore and metax on emulated runtimes
#      that gcc builds here; nvidia (and any backend without its hardware) shown unavailable, as a
#      row of skips with the reason. It prints the backend x check-group matrix and writes the JSON
#      report and the matrix to build/conformance/ (override: ANYDEV_CONFORMANCE_REPORT=FILE).
#   3. the conformance kernels group on the shared Triton kernels, run on CPU tensors by Triton's
#      interpreter (the cpu backend with ANYDEV_CPU_TRITON=1) with --quick: the interpreter-sized
#      sweep, whose verdict says "certified ... (quick sweep)"; the full sweep is for devices.
#   4. mutation testing: the suite on each deliberately broken backend (conformance/mutants/), which
#      it must fail; prints the check that caught each and `mutants caught: N/N` (a survivor fails).
#   5. the start-up benchmark on the cpu backend and on the emulated moore and metax runtimes
#      (benchmarks/startup_bench.py: test_infer and anydev serve on a tiny random model, Triton's
#      cache cold and warm), printing its table: a record, no timing threshold (it fails only when a
#      run fails).
# All steps always run; the exit status is non-zero when any failed. Python: $PYTHON or python3.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
REPORT=${ANYDEV_CONFORMANCE_REPORT:-build/conformance/report.json}
status=0

echo "== unit tests"
"$PYTHON" -m pytest -n 2 -q -p no:cacheprovider tests || status=1

echo "== conformance suite"
# cpu virtual devices of 1 GiB: less than a small CI machine's free memory, so that their free memory
# is the backend's own accounting, not the host's (the failed-init leak checks compare it). Four of
# them: each backend is certified at its device count, and the cpu backend at 4 ranks (collectives at
# 1, 2, 3 and 4), as the mutants runner runs it. Short tracebacks (the suite's default is none): a
# failure in CI cannot be run again to see one.
ANYDEV_CPU_DEVICE_MEMORY=${ANYDEV_CPU_DEVICE_MEMORY:-1GiB} ANYDEV_CPU_DEVICES=${ANYDEV_CPU_DEVICES:-4} \
    "$PYTHON" -m anydev.conformance --device all --emulated moore,metax -n 2 --report "$REPORT" --tb=short -rfE || status=1

echo "== conformance kernels group: the Triton kernels under Triton's interpreter"
TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1 \
    "$PYTHON" -m anydev.conformance --device cpu --quick -n 2 --report "$(dirname "$REPORT")/kernels-triton-interpreter.json" \
    -- --tb=short -rfE -k kernels || status=1

echo "== mutation testing of the conformance suite"
"$PYTHON" -m anydev.conformance.mutants -j 2 || status=1

echo "== start-up benchmark (cpu and the emulated runtimes, a record)"
STARTUP_TMP=$(mktemp -d)
"$PYTHON" benchmarks/make_random_model.py "$STARTUP_TMP/tiny" --layers 2 --hidden 64 --heads 4 --kv-heads 2 \
    --vocab 384 --dtype float32 > /dev/null &&
    OMP_NUM_THREADS=1 timeout -k 5 150 "$PYTHON" benchmarks/startup_bench.py --device cpu --model "$STARTUP_TMP/tiny" \
    --engine-args "--max-model-len 64" --timeout 60 --out "$(dirname "$REPORT")/startup-cpu.json" || status=1
# The same benchmark on the emulated moore and metax runtimes: the vendor plugins' own start-up path.
for vendor in moore metax; do
    echo "-- $vendor (emulated runtime)"
    [[ -d "$STARTUP_TMP/tiny" ]] && OMP_NUM_THREADS=1 timeout -k 5 300 "$PYTHON" -m anydev.conformance.emulated "$vendor" \
        --dir "$STARTUP_TMP/emulated" -- "$PYTHON" benchmarks/startup_bench.py --device "$vendor" --model "$STARTUP_TMP/tiny" \
        --engine-args "--max-model-len 64" --timeout 120 --out "$(dirname "$REPORT")/startup-$vendor.json" || status=1
done
rm -rf "$STARTUP_TMP"

exit $status
