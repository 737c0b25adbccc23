#!/usr/bin/env bash
# Session 18, call B on one H200 (issues 33 and 34):
#   1. JSON schema at batch 32, 1B and 8B shapes, with llguidance 1.9 (call A's wheel was 1.6, whose
#      LLTokenizer takes one eos id) and the masks filled on the matchers' worker;
#   2. logprobs=5 at batch 256 on the 1B shape: the ratio again (call A: 0.769, rounds 10% apart), the
#      host's threads sampled (benchmarks/sample_profile.py), and the graph step profiled with and without;
#   3. the MoE: moe_bench (the kernels beside the torch reference) and the 48-layer Qwen3-30B-A3B step
#      at batch 1 profiled, for the expert GEMMs' own bandwidth inside the step.
# Bounded to BUDGET seconds; everything under $OUT/r, tarred at the end.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
python3 -c "import llguidance; print('llguidance', llguidance.__version__)" >> $R/env.txt 2>&1
SB=(python3 benchmarks/structured_bench.py --device nvidia --prompt-len 128 --new-tokens 128 --vocab 32000 --repeats 2 --batch 32)
step structured-1b-b32 45 "${SB[@]}" --shape 1b --out $R/structured-1b-b32.json
step structured-8b-b32 75 "${SB[@]}" --shape 8b --out $R/structured-8b-b32.json
LB=(benchmarks/logprobs_bench.py --device nvidia --prompt-len 128 --new-tokens 128 --logprobs 5 --batch 256)
step logprobs-1b-b256 50 python3 "${LB[@]}" --repeats 3 --out $R/logprobs-1b-b256.json
step sprof-lp-1b-b256 60 python3 benchmarks/sample_profile.py --top 30 "${LB[@]}" --repeats 2
SP=(python3 benchmarks/step_profile.py --device nvidia --graphs --steps 8 --rows 14 --context 256)
step prof-1b-b256-lp 45 "${SP[@]}" --batch-sizes 256 --logprobs 5
step prof-1b-b256 45 "${SP[@]}" --batch-sizes 256
step moe-bench 60 python3 benchmarks/moe_bench.py --device nvidia --out $R/moe-bench.json
step prof-moe-48-b1 130 "${SP[@]}" --shape qwen3-30b-a3b --batch-sizes 1
grep -h "/ plain\|json_schema /\|ratio\|device busy" $R/*.txt >> $LOG 2>/dev/null
tar czf $OUT/cB.tgz -C $OUT r && rm -rf $R
echo "call B done in $((SECONDS - T0)) s" | tee -a $LOG
