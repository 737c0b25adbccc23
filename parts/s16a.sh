#!/usr/bin/env bash
# Session 16, call A on one H200: contract 1.10's kernels (logprobs, moe_combine) and what they are for.
#   1. conformance, kernels group, the new kernels on nvidia (every dtype; the mutants run in CI);
#   2. logprobs=5 beside plain decode: the 1B shape at batch 64 and 256, the 8B shape at batch 64 (issue 33);
#   3. the MoE: moe_bench (the kernels beside the torch reference) and decode_bench on the whole
#      Qwen3-30B-A3B shape, 48 layers, batch 1 and 32 (issue 34);
#   4. JSON schema at batch 32 on the 1B shape, the masks now filled on the matchers' worker (issue 33);
#   5. serve_bench saturate, 512-token answers, 64 streams / 2 front ends and 256 / 4 (issue 33), with
#      the detokenizer's bounded walk back.
# Bounded to BUDGET seconds; everything under $OUT/r, tarred at the end.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
step conf-new 100 python3 -m anydev.conformance --device nvidia -n 4 --report $R/conf-new.json -- \
  -k "kernels and (logprobs or moe_combine)" -rA
LB=(python3 benchmarks/logprobs_bench.py --device nvidia --prompt-len 128 --new-tokens 128 --logprobs 5 --repeats 3)
step logprobs-1b-b64 40 "${LB[@]}" --batch 64 --out $R/logprobs-1b-b64.json
step logprobs-1b-b256 50 "${LB[@]}" --batch 256 --out $R/logprobs-1b-b256.json
step logprobs-8b-b64 60 "${LB[@]}" --shape 8b --batch 64 --out $R/logprobs-8b-b64.json
step decode-moe-48 150 python3 benchmarks/decode_bench.py --device nvidia --shape qwen3-30b-a3b --batch-sizes 1,32 \
  --contexts 256 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --out $R/decode-moe-48.json
step prof-8b-b1 40 python3 benchmarks/step_profile.py --device nvidia --graphs --steps 8 --rows 12 --batch-sizes 1 \
  --context 256 --shape 8b
step structured-1b-b32 40 python3 benchmarks/structured_bench.py --device nvidia --prompt-len 128 --new-tokens 128 \
  --vocab 32000 --repeats 2 --batch 32 --shape 1b --out $R/structured-1b-b32.json
step make-1b 30 python3 benchmarks/make_random_model.py /tmp/llama-1b
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-64-fe2 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
grep -h "passed\|failed\|/ plain\|server / offline\|active experts\|x (decode" $R/*.txt >> $LOG 2>/dev/null
tar czf $OUT/cA.tgz -C $OUT r && rm -rf $R
echo "call A done in $((SECONDS - T0)) s" | tee -a $LOG
