#!/usr/bin/env bash
# Session 13, call 1 on one H200: issue 36's full conformance suite with its performance row
# (parts/h36.sh), issue 34's three families through test_infer and anydev serve beside the cpu
# backend (parts/h34-families.sh), issue 33's structured-output cost at batch 32 and 8
# (parts/h33s.sh). Everything lands in $OUT/call1.tgz (the device returns at most 8 files).
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$SECONDS
source scripts/device_setup.sh > $OUT/setup.log 2>&1
H36_BUDGET=330 timeout -k 5 340 bash parts/h36.sh
echo "h36 done at $((SECONDS - T0)) s" | tee -a $OUT/steps.log
left=$((540 - (SECONDS - T0) - 70))
timeout -k 5 $(( left > 150 ? 150 : left )) bash parts/h34-families.sh nvidia $OUT/r > $OUT/h34-families.log 2>&1
echo "families rc $? done at $((SECONDS - T0)) s" | tee -a $OUT/steps.log
tail -5 $OUT/h34-families.log
left=$((560 - (SECONDS - T0)))
H33S_BUDGET=$(( left > 58 ? 58 : left )) timeout -k 3 $(( left > 62 ? 62 : left )) bash parts/h33s.sh
echo "h33s done at $((SECONDS - T0)) s" | tee -a $OUT/steps.log
cd $OUT && tar czf call1.tgz --exclude=call1.tgz . && ls -la $OUT
