#!/usr/bin/env bash
# Session 21, call A2 on the machine A1 left warm (issue 31): what bounds the remaining targets, as
# profiles of the decode step on this tree's defaults (step_profile --graphs: device time per kernel
# and the host time a step), and the decode speeds they explain:
#   1. 8B bf16, int8 and fp8 at batch 1, profiled, and their decode speeds side by side in one run
#      (target >= 1.7x bf16);
#   2. the 8B Q4_K and Q8_0 GGUF files (A0 wrote them to /tmp/g) at batch 32, profiled (target >= 1.2x
#      llama.cpp);
#   3. where PF is set (a prefetch distance that won in A1): the conformance kernels group on nvidia
#      with it, the check a default needs.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-420}; T0=$SECONDS
source parts/step.sh
call_start
G=/tmp/g
if [[ -n ${PF:-} ]]; then
  ANYDEV_TRITON_PREFETCH=$PF step conf-prefetch 130 taskset -c 0-7 python3 -m anydev.conformance --device nvidia -n 4 \
    --report $R/conf-prefetch.json -- -k "kernels and (linear or quantized)" -rA
fi
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30)
for q in int8 fp8 none; do
  step prof-8b-$q-b1 55 "${SP[@]}" --shape 8b --batch-sizes 1 $([[ $q != none ]] && echo --quantization $q)
done
for t in Q4_K Q8_0; do
  [[ -s $G/llama-8b-$t.gguf ]] && step prof-$t-b32 50 "${SP[@]}" --model $G/llama-8b-$t.gguf --batch-sizes 32
done
step decode-8b-quant-b1 130 taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --shape 8b --batch-sizes 1 \
  --contexts 256 --prefill-len 0 --new-tokens 128 --modes graphs --hf none --quantizations none,int8,fp8 --no-kernel-count \
  --out $R/decode-8b-quant-b1.json
grep -h "passed\|failed\|device busy\|kernels per\|graphs " $R/conf-*.txt $R/prof-*.txt $R/decode-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cA2.tgz -C $OUT r && rm -rf $R
echo "call A2 done in $((SECONDS - T0)) s" | tee -a $LOG
