#!/usr/bin/env bash
# Issue 31 on one H200, the aligned-chunk integer GEMVs of q8_0, q4_0 and q4_1 (branch h31q), <= 5 minutes:
#   1. the conformance kernels group's linear checks on nvidia (every format and plan, the chunk steps included);
#   2. each 8B decode GEMM at batch 1 (benchmarks/linear_bench.py --float-gemv): per format the new plan
#      ("q4_0": aligned 16-byte chunks), the old integer step ("q4_0 words": a block's words one a load)
#      and the float GEMV ("q4_0 float"), us and TB/s, in one run; q6_k with its recorded plans, q4_k beside;
#   3. as time allows, the batch-1 plan sweep of q8_0, q4_0 and q4_1 (RECORDED entries, $OUT/r/h31q-plans-b1.txt).
# Run from the repo root on the GPU machine; writes $OUT/r/h31q-* and logs to $OUT/h31q.log.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R
LOG=$OUT/h31q.log
BUDGET=${H31Q_BUDGET:-290}; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/h31q-$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/h31q-$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit): $*" | tee -a $LOG
}
[[ -n "${SKIP_SETUP:-}" ]] || source scripts/device_setup.sh > $R/h31q-setup.txt 2>&1 || echo "1 setup" | tee -a $LOG
{ date -u; nvidia-smi -L 2>/dev/null; git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/h31q-env.txt 2>&1

step conf-linear 120 python3 -m anydev.conformance --device nvidia --report $R/h31q-conf-linear.json -- \
  -k "kernels and linear" -n 8 -rA
step linear 90 python3 benchmarks/linear_bench.py --device nvidia --models 8B --reps 50 --batches 1 --float-gemv \
  --formats dense,q8_0,q4_0,q4_1,q6_k,q4_k --out $R/h31q-linear.json
step sweep 70 python3 benchmarks/linear_bench.py --device nvidia --models 8B --reps 20 --skip-table --sweep \
  --sweep-formats q4_0,q8_0,q4_1 --table-out $R/h31q-plans-b1.txt --out $R/h31q-sweep.json

grep -h "passed\|failed" $R/h31q-conf-linear.txt | tail -3 | tee -a $LOG
grep -h "^== \|GEMMs per token\|^qkv\|^o \|^gate_up\|^down\|^lm_head" $R/h31q-linear.txt | tee -a $LOG
grep -h "heuristic" $R/h31q-sweep.txt 2>/dev/null | cut -c1-220 | tee -a $LOG
echo "h31q done in $((SECONDS - T0)) s" | tee -a $LOG
