#!/usr/bin/env bash
# Session 15, issue 32's remaining cases on one H200: the 8B bf16 safetensors start-up (test_infer and serve,
# Triton cache cold and warm) and serve with --lazy-graphs on the 8B Q4_K GGUF, cold. Bounded to 230 s.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT; LOG=$OUT/steps.log; BUDGET=230; T0=$SECONDS
source parts/step.sh
source scripts/device_setup.sh > $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
python3 benchmarks/make_random_model.py /tmp/q4k.gguf "${SHAPE[@]}" --gguf Q4_K > $R/make.txt 2>&1 &
step make-bf16 70 python3 benchmarks/make_random_model.py /tmp/llama-8b "${SHAPE[@]}"
SB=(python3 benchmarks/startup_bench.py --device nvidia --prompt-tokens 16 --timeout 60)
step startup-bf16 110 "${SB[@]}" --model /tmp/llama-8b --engine-args "--max-model-len 1024" --out $R/startup-bf16.json
wait
step startup-q4k-serve-lazy 45 "${SB[@]}" --model /tmp/q4k.gguf --engine-args "--max-model-len 1024 --lazy-graphs" \
  --cases serve --caches cold --out $R/startup-q4k-serve-lazy.json
grep -h "wall\|engine core:" $R/startup-*.txt
