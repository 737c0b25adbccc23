#!/usr/bin/env bash
# Session 21, call C, short, on what device time is left (issue 31): the 8B decode step at batch 1 with
# int8 and fp8 weights, then bf16, profiled (step_profile --graphs: device time per kernel, host time
# a step): what bounds the >= 1.7x-bf16 target.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-150}; T0=$SECONDS
trap 'tar czf $OUT/cC.tgz -C $OUT r; exit 143' TERM     # cut short: what ran still comes back
source parts/step.sh
call_start
SP=(python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30 --shape 8b --batch-sizes 1)
step prof-8b-int8-b1 55 "${SP[@]}" --quantization int8
step prof-8b-fp8-b1 55 "${SP[@]}" --quantization fp8
step prof-8b-bf16-b1 55 "${SP[@]}"
grep -h "device busy\|kernels per\|GEMM\|step" $R/prof-*.txt | head -30 >> $LOG 2>/dev/null
tar czf $OUT/cC.tgz -C $OUT r && rm -rf $R
echo "call C done in $((SECONDS - T0)) s" | tee -a $LOG
