#!/usr/bin/env bash
# Issue 32: start-up as a user meets it, on the H200. For the 8B Q4_K GGUF and the 8B bf16 safetensors
# (random weights, benchmarks/make_random_model.py): a fresh process to the first token of a 16-token
# prompt with Triton's cache empty (cold) and filled (warm), through examples/test_infer.py (its start-up
# timeline: every phase) and `anydev serve` (engine core up, /health 200, first streamed token)
# (benchmarks/startup_bench.py); the same with --lazy-graphs; then decode tok/s after start-up at batch 1
# on the same files (test_infer, 256 tokens) and decode_bench's 8B bf16 batch-1 row (the kernel issue's).
# Run from the repo root after `source scripts/device_setup.sh`; writes $OUT/r/startup-*; <= 5 minutes in
# all (each step's limit is cut to what is left of 290 s; steps in order of importance).
# STARTUP_TINY=1 runs every step at tiny shapes on --device cpu (how it was checked off the GPU).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
BUDGET=290; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a $R/startup-steps.txt; return; fi
  echo "\$ $*" >> $R/$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit): $*" | tee -a $R/startup-steps.txt
}
if [[ "${STARTUP_TINY:-0}" == 1 ]]; then
  DEV=cpu; SHAPE=(--hidden 256 --layers 2 --heads 4 --kv-heads 2 --intermediate 512 --vocab 384); DSHAPE=(--tiny)
else
  DEV=nvidia; SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256); DSHAPE=(--shape 8b)
fi
D=${STARTUP_DIR:-/tmp/anydev-startup}; mkdir -p $D
Q4=$D/llama-8b-q4_k.gguf; BF=$D/llama-8b-bf16
{ date -u; nvidia-smi -L 2>/dev/null; git rev-parse HEAD 2>/dev/null || cat .rec/commit 2>/dev/null; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/startup-env.txt 2>&1
SB=(--device $DEV --prompt-tokens 16 --engine-args "--max-model-len 1024" --timeout 120)
step startup-make 60 python3 benchmarks/make_random_model.py $Q4 "${SHAPE[@]}" --gguf Q4_K
step startup-q4k 130 python3 benchmarks/startup_bench.py "${SB[@]}" --model $Q4 --importtime --out $R/startup-q4k.json
step startup-make 60 python3 benchmarks/make_random_model.py $BF "${SHAPE[@]}"
step startup-bf16 80 python3 benchmarks/startup_bench.py "${SB[@]}" --model $BF --cases test_infer --out $R/startup-bf16.json
step startup-q4k-lazy 40 python3 benchmarks/startup_bench.py --device $DEV --prompt-tokens 16 --timeout 60 \
  --engine-args "--max-model-len 1024 --lazy-graphs" --model $Q4 --cases test_infer --caches cold --out $R/startup-q4k-lazy.json
step startup-bf16-serve 50 python3 benchmarks/startup_bench.py "${SB[@]}" --model $BF --cases serve --caches warm --out $R/startup-bf16-serve.json
for f in $Q4 $BF; do
  step startup-decode 25 python3 examples/test_infer.py --device $DEV --model $f --max-new-tokens 256 --max-cache-len 1024 --prompt Hello
done
step startup-decode-bench 40 python3 benchmarks/decode_bench.py --device $DEV "${DSHAPE[@]}" --contexts 256 --prefill-len 0 \
  --new-tokens 64 --modes graphs --hf none --no-kernel-count --quantizations none --batch-sizes 1 --out $R/startup-decode-bench.json
rm -rf $D
echo "total $((SECONDS - T0)) s" | tee -a $R/startup-steps.txt
