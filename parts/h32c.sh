#!/usr/bin/env bash
# Issue 32 on one H200, in one short call: the start-up of the 8B Q4_K GGUF (random weights) after
# the GGUF tokenizer and metadata work, test_infer and `anydev serve` with Triton's cache cold and
# warm, serve's engine core split into its own phases (core_phases: is it the six decode buckets and eight token buckets it
# captures?), then serve cold with --lazy-graphs. Run from the repo root on the device machine.
# Bounded to 130 s; few files, written straight under $OUT (a call cut short still returns them).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT; LOG=$OUT/steps.log; BUDGET=130; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; nproc; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
Q4=/tmp/llama-8b-q4_k.gguf
SB=(python3 benchmarks/startup_bench.py --device nvidia --prompt-tokens 16 --timeout 60 --model $Q4)
step make-q4k 45 python3 benchmarks/make_random_model.py $Q4 --hidden 4096 --layers 32 --heads 32 --kv-heads 8 \
  --intermediate 14336 --vocab 128256 --gguf Q4_K
step startup-q4k 100 "${SB[@]}" --engine-args "--max-model-len 1024" --out $R/startup-q4k.json
step startup-q4k-serve-lazy 40 "${SB[@]}" --engine-args "--max-model-len 1024 --lazy-graphs" --cases serve \
  --caches cold --out $R/startup-q4k-serve-lazy.json
grep -h "wall\|engine core:" $R/startup-*.txt
