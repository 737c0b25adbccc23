#!/usr/bin/env bash
# Session 18, call C on one H200: decode attention with a partition per key tile (9fb28c5) in the
# step: the 8B bf16 step at batch 1 profiled (call A: 9.0 us a layer), and decode_bench on the 8B and
# 48-layer Qwen3-30B-A3B shapes at batch 1 and 32 (call A: MoE 305.3 / 1,574.8 tok/s).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-560}; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; nproc; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
step prof-8b-b1 50 python3 benchmarks/step_profile.py --device nvidia --graphs --steps 8 --rows 12 --batch-sizes 1 \
  --context 256 --shape 8b
DB=(python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1,32 --contexts 256 --prefill-len 0 --new-tokens 64
    --modes graphs --hf none)
step decode-8b 120 "${DB[@]}" --shape 8b --out $R/decode-8b.json
step decode-moe-48 170 "${DB[@]}" --shape qwen3-30b-a3b --out $R/decode-moe-48.json
grep -h "_decode_kernel\|tok/s\|GB/s" $R/*.txt | grep -v "^\$" | head -30 >> $LOG 2>/dev/null
tar czf $OUT/cC.tgz -C $OUT r && rm -rf $R
echo "call C done in $((SECONDS - T0)) s" | tee -a $LOG
