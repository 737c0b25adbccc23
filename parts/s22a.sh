#!/usr/bin/env bash
# Session 22, call A (issue 31): the 8-bit batch-1 GEMVs with 1,024 inputs a step (the int8 and fp8
# plan sweeps of gate_up and down, 512 and 1,024 inputs a step, plans written to a table for
# linear_plans.RECORDED), then what bounds the GGUF files at batch 32 (step_profile --graphs: device
# time per kernel, host time a step) for Q4_K, Q8_0 and Q6_K. The files are written on cores 2-15
# while the sweeps run on cores 0-1.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-560}; T0=$SECONDS
trap 'tar czf $OUT/cA.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
G=/tmp/g; mkdir -p $G
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q4_K Q8_0 Q6_K; do taskset -c 2-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
MAKES=$!
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 1
    --sweep-gemms gate_up,down --sweep-widths 512,1024)
for q in int8 fp8_e4m3; do
  step sweep-$q-b1 130 "${LB[@]}" --sweep-formats $q --table-out $R/plans-$q.txt --out $R/sweep-$q-b1.json
done
wait $MAKES
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30)
for t in Q4_K Q8_0 Q6_K; do
  step prof-$t-b32 70 "${SP[@]}" --model $G/llama-8b-$t.gguf --batch-sizes 32
done
grep -h "b1 \|device busy\|kernels per" $R/sweep-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cA.tgz -C $OUT r && rm -rf $R
echo "call A done in $((SECONDS - T0)) s" | tee -a $LOG
