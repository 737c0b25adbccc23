#!/usr/bin/env bash
# Session 20, call B on one H200 (issue 31): what bounds each of issue 31's targets, as profiles
# of the decode step (device time per kernel, and the host time a step the device waits for:
# step_profile --graphs), on this tree's defaults:
#   1. 1B bf16 at batch 1 (target 1,400 tok/s);
#   2. 8B bf16, int8 and fp8 at batch 1, and their decode speeds side by side in one run (target >= 1.7x);
#   3. the 8B Q4_K, Q8_0 and Q6_K GGUF files at batch 32 (target >= 1.2x llama.cpp).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
call_start
G=/tmp/g; mkdir -p $G
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q4_K Q8_0 Q6_K; do taskset -c 2-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
MAKES=$!
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30)
step prof-1b-b1 60 "${SP[@]}" --shape 1b --batch-sizes 1
step prof-8b-bf16-b1 70 "${SP[@]}" --shape 8b --batch-sizes 1
for q in int8 fp8; do
  step prof-8b-$q-b1 70 "${SP[@]}" --shape 8b --batch-sizes 1 --quantization $q
done
step decode-8b-quant-b1 150 taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --shape 8b --batch-sizes 1 \
  --contexts 256 --prefill-len 0 --new-tokens 128 --modes graphs --hf none --quantizations none,int8,fp8 --no-kernel-count \
  --out $R/decode-8b-quant-b1.json
wait $MAKES
for t in Q4_K Q8_0 Q6_K; do
  step prof-$t-b32 60 "${SP[@]}" --model $G/llama-8b-$t.gguf --batch-sizes 32
done
grep -h "device busy\|kernels per\|graphs " $R/prof-*.txt $R/decode-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cB.tgz -C $OUT r && rm -rf $R
echo "call B done in $((SECONDS - T0)) s" | tee -a $LOG
