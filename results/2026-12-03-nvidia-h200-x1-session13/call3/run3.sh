#!/usr/bin/env bash
# Session 13, call 3 on one H200, at 07a55d4 (call 2's tree, the GGUF batch-1 plans taken only by the
# integer-dot GEMV, PDL modes 1 and 2): the linear checks again, the 8B decode GEMMs at batch 1 (the
# aligned-chunk q8_0/q4_0/q4_1 GEMVs beside their word-a-load predecessor and the float GEMV), decode
# of the 1B shape with PDL off / 1 / 2, the Qwen3-30B-A3B-shaped MoE (8 of 48 layers) and the Llama-3-8B
# and Qwen3-8B shapes at batch 1 and 32. Bounded to 400 s; everything in $OUT/call3.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=400; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left)" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit)" | tee -a $LOG
}
source scripts/device_setup.sh > $OUT/setup.log 2>&1 || echo "1 setup" | tee -a $LOG
DB=(python3 benchmarks/decode_bench.py --device nvidia --prefill-len 0 --new-tokens 64 --hf none --no-kernel-count
    --contexts 256 --batch-sizes 1,32 --modes graphs)
step conf-linear 80 python3 -m anydev.conformance --device nvidia --tp 1 -n 8 --report $R/conf-linear.json \
  -- -k "kernels and linear" --tb=short -rfE
step linear 90 python3 benchmarks/linear_bench.py --device nvidia --models 8B --reps 50 --batches 1 --float-gemv \
  --formats dense,q8_0,q4_0,q4_1,q6_k,q4_k --out $R/linear.json
for pdl in 0 1 2; do ANYDEV_TRITON_PDL=$pdl step decode-1b-pdl$pdl 30 "${DB[@]}" --shape 1b --out $R/decode-1b-pdl$pdl.json; done
step decode-moe 60 "${DB[@]}" --shape qwen3-30b-a3b --layers 8 --out $R/decode-moe.json
step decode-8b 50 "${DB[@]}" --shape 8b --layers 32 --out $R/decode-8b.json
step decode-qwen3-8b 50 "${DB[@]}" --shape qwen3-8b --layers 36 --out $R/decode-qwen3-8b.json
tail -3 $R/conf-linear.txt; grep -h "ms a token\|GEMMs per token" $R/linear.txt | head
grep -h "anydev graphs   decode\|active experts" $R/decode-*.txt
cd $OUT && tar czf /tmp/call3.tgz . && mv /tmp/call3.tgz $OUT/
