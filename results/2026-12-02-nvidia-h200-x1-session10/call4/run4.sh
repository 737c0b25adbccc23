#!/usr/bin/env bash
# Session 10, call 4: the conformance groups (all but kernels) on one H200 at 3c1e120, the kernel
# warm-up off by default: the failed-start leak checks that call 3 failed.
set -uo pipefail
export PYTHONUNBUFFERED=1
ROOT=$PWD; cd .stage/integ && ln -sfn $ROOT/.whl .whl
source scripts/device_setup.sh > $OUT/setup.txt 2>&1
timeout 150 python3 -m anydev.conformance --device nvidia --tp 1 -n 1 --report $OUT/groups.json -- -k "not test_kernels" --tb=short -rfE > $OUT/groups.txt 2>&1
echo "rc $?"; tail -4 $OUT/groups.txt | cut -c1-400; grep -E "^FAIL" $OUT/groups.txt | cut -c1-300
