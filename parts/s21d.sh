#!/usr/bin/env bash
# Session 21, call D, short, on the machine call C left warm (issue 31): 8B decode at batch 1, bf16,
# int8 and fp8 weights side by side in one run (decode graphs; the >= 1.7x-bf16 target).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-115}; T0=$SECONDS
trap 'tar czf $OUT/cD.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
step decode-8b-quant-b1 100 python3 benchmarks/decode_bench.py --device nvidia --shape 8b --batch-sizes 1 \
  --contexts 256 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --quantizations none,int8,fp8 --repeats 1 \
  --no-kernel-count --out $R/decode-8b-quant-b1.json
grep -h "graphs " $R/decode-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cD.tgz -C $OUT r && rm -rf $R
echo "call D done in $((SECONDS - T0)) s" | tee -a $LOG
