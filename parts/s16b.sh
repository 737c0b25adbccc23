#!/usr/bin/env bash
# Session 16, call B on one H200 (needs no kernel of this session): issue 33's structured-output and
# server/offline targets on the whole machine (session 15's structured run had 4 cores beside a build),
# and issue 31's 8-bit and 1B bf16 batch-1 figures with their step profiles (what bounds each).
#   1. structured_bench, JSON schema at batch 32, the 1B shape (host-bound step) and the 8B shape;
#   2. serve_bench saturate, 512-token answers: 64 streams with 2 front ends, 256 with 4;
#   3. decode_bench 8B bf16 / int8 / fp8 at batch 1 and 32, one process (ratios from one run);
#   4. step_profile at batch 1: 8B int8, 8B fp8, 1B bf16 (device time per kernel, host time a step).
# Bounded to BUDGET seconds; everything under $OUT/r, tarred at the end.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; nproc; git log --oneline -1 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
step make-1b 40 python3 benchmarks/make_random_model.py /tmp/llama-1b
SB=(python3 benchmarks/structured_bench.py --device nvidia --prompt-len 128 --new-tokens 128 --vocab 32000 --repeats 2 --batch 32)
step structured-1b-b32 60 "${SB[@]}" --shape 1b --host-steps 60 --out $R/structured-1b-b32.json
step structured-8b-b32 75 "${SB[@]}" --shape 8b --out $R/structured-8b-b32.json
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 45 --workloads saturate --output-len 512)
step serve-64-fe2 80 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 90 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
step decode-8b-8bit 120 python3 benchmarks/decode_bench.py --device nvidia --shape 8b --quantizations none,int8,fp8 \
  --batch-sizes 1,32 --contexts 256 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --no-kernel-count \
  --out $R/decode-8b-8bit.json
PROF=(python3 benchmarks/step_profile.py --device nvidia --graphs --steps 8 --rows 30 --batch-sizes 1 --context 256)
step prof-8b-int8-b1 45 "${PROF[@]}" --shape 8b --quantization int8
step prof-8b-fp8-b1 45 "${PROF[@]}" --shape 8b --quantization fp8
step prof-1b-bf16-b1 40 "${PROF[@]}" --shape 1b
grep -h "device busy\|kernels per\|json_schema /\|host, " $R/*.txt >> $LOG 2>/dev/null
tar czf $OUT/cB.tgz -C $OUT r && rm -rf $R
echo "call B done in $((SECONDS - T0)) s" | tee -a $LOG
