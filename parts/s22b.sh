#!/usr/bin/env bash
# Session 22, call B (issue 31): q8_0_split, Q8_0's codes and scales in split rows (contract 1.11),
# beside q8_0's integer-dot GEMV and int8's GEMV on the 8B GEMMs at batch 1 and 32 (linear_bench's
# table, the heuristic plans), then its batch-1 plan sweep (512 and 1,024 inputs a step) and its
# batch-32 sweep, plans written to tables for linear_plans.RECORDED.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-400}; T0=$SECONDS
trap 'tar czf $OUT/cB.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
LB=(taskset -c 0-3 python3 benchmarks/linear_bench.py --device nvidia --models 8B)
step table-b1-b32 90 "${LB[@]}" --batches 1,32 --formats dense,int8,q8_0,q8_0_split --out $R/table.json
step sweep-split-b1 150 "${LB[@]}" --skip-table --sweep --sweep-batches 1 --sweep-formats q8_0_split \
  --sweep-widths 512,1024 --table-out $R/plans-split-b1.txt --out $R/sweep-split-b1.json
step sweep-split-b32 120 "${LB[@]}" --skip-table --sweep --sweep-batches 32 --sweep-formats q8_0_split --sweep-gemms gate_up,down \
  --table-out $R/plans-split-b32.txt --out $R/sweep-split-b32.json
grep -h "q8_0\|best" $R/table-*.txt $R/sweep-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cB.tgz -C $OUT r && rm -rf $R
echo "call B done in $((SECONDS - T0)) s" | tee -a $LOG
