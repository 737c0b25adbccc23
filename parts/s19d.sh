#!/usr/bin/env bash
# Session 19, call D on one H200 (issues 33 and 31), short:
#   1. where the served engine core's host time goes at 256 streams (call C: +642 us of core CPU a step
#      over offline): core_step_cost under cProfile (the core's loop) and under the all-threads sampler;
#   2. the q6_k batch-1 plan sweep on 1 to 8 warps (the q4_k one found one warp best for gate_up/down).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
step make-1b 30 python3 benchmarks/make_random_model.py /tmp/llama-1b
CS=(benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 256 --output-len 256 --deadline 40)
step core-prof-256 50 python3 "${CS[@]}" --skip-offline --profile $R/core256.prof
step core-prof-stats 20 python3 -c "import pstats; s = pstats.Stats('$R/core256.prof'); s.sort_stats('tottime').print_stats(40); s.sort_stats('cumtime').print_stats(40)"
step core-sample-256 50 python3 benchmarks/sample_profile.py --top 30 "${CS[@]}" --skip-offline
step sweep-q6_k-b1 100 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 1 \
  --sweep-formats q6_k --table-out $R/plans-q6_k-b1.txt --out $R/sweep-q6_k-b1.json
grep -h "x)\|served\|front end" $R/sweep-*.txt $R/core-prof-256.txt >> $LOG 2>/dev/null
tar czf $OUT/cD.tgz -C $OUT r && rm -rf $R
echo "call D done in $((SECONDS - T0)) s" | tee -a $LOG
