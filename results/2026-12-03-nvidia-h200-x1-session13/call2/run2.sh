#!/usr/bin/env bash
# Session 13, call 2 on one H200, on main with h31q (aligned-chunk GGUF GEMVs), h34m (MoE plans),
# h33l (one readback for tokens and logprobs), h32t (GGUF tokenizer build) merged, and the opt-in
# programmatic dependent launch (ANYDEV_TRITON_PDL). Steps in order of importance, each bounded and cut
# to what is left of 560 s; everything lands in $OUT/call2.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=560; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left)" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit)" | tee -a $LOG
}
source scripts/device_setup.sh > $OUT/setup.log 2>&1 || echo "1 setup" | tee -a $LOG
{ date -u; nvidia-smi -L; git log -1 --oneline; python3 -c "import torch, triton, llguidance; print(torch.__version__, triton.__version__)"; } > $R/env.txt 2>&1
H33P_BUDGET=58 step h33p 62 bash parts/h33p.sh
H33S_BUDGET=58 step h33s 62 bash parts/h33s.sh
ANYDEV_TRITON_PDL=1 step conf-pdl 170 python3 -m anydev.conformance --device nvidia --tp 1 -n 8 --report $R/conf-pdl.json \
  -- -k "kernels or inference" --tb=short -rfE
step linear 90 python3 benchmarks/linear_bench.py --device nvidia --models 8B --reps 50 --batches 1 --float-gemv \
  --formats dense,q8_0,q4_0,q4_1,q6_k,q4_k --out $R/linear.json
step moe-bench 45 python3 benchmarks/moe_bench.py --device nvidia --plans legacy,chosen --out $R/moe-bench.json
for pdl in 0 1; do
  ANYDEV_TRITON_PDL=$pdl step decode-1b-pdl$pdl 45 python3 benchmarks/decode_bench.py --device nvidia --prefill-len 0 \
    --new-tokens 64 --hf none --no-kernel-count --contexts 256 --batch-sizes 1,32 --modes graphs --shape 1b \
    --out $R/decode-1b-pdl$pdl.json
done
tail -4 $R/conf-pdl.txt; grep -h "ratio\|tok/s" $OUT/h33p.log $OUT/h33s.log 2>/dev/null | tail -8
grep -h "GEMMs per token\|ms a token" $R/linear.txt | head; grep -h "moe_linear" $R/moe-bench.txt | head -8
grep -h "graphs" $R/decode-1b-pdl*.txt | head -8
cd $OUT && tar czf /tmp/call2.tgz . && mv /tmp/call2.tgz $OUT/ && ls $OUT
