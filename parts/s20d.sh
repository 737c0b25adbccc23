#!/usr/bin/env bash
# Session 20, call D on one H200 (issue 33), short: the served core's host time a step at 256 streams
# with the plain tokens (core_step_cost, served against offline), and with the GIL handed over ten
# times sooner (--switch-interval 0.0005: does the core's loop wait on the rank thread for it?); then
# the server against offline at saturation, 512-token answers, 64 streams / 2 front ends and 256 / 4.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
call_start
step make-1b 30 python3 benchmarks/make_random_model.py /tmp/llama-1b
CS=(python3 benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 256 --output-len 256 --deadline 40)
step core-step-256 50 "${CS[@]}"
step core-step-256-si05 50 "${CS[@]}" --switch-interval 0.0005
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-64-fe2 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
grep -h "server / offline\|served\|offline \|switch" $R/core-step-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cD.tgz -C $OUT r && rm -rf $R
echo "call D done in $((SECONDS - T0)) s" | tee -a $LOG
