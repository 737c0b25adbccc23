#!/usr/bin/env bash
# Issue 32 on one H200: start-up as a user meets it, after the kernel warm-up (compiles beside the
# weights' load) and lazy graphs (the rest captured between steps). For a 1B bf16 safetensors, an 8B
# Q4_K GGUF and an 8B bf16 safetensors (random weights, benchmarks/make_random_model.py): a fresh
# process to the first token of a 16-token prompt, Triton's cache empty (cold) and filled (warm),
# through examples/test_infer.py (every phase of its start-up timeline) and `anydev serve` (engine
# core up, /health 200, first streamed token) (benchmarks/startup_bench.py); then the same cold
# with the warm-up (--kernel-warmup) and with --lazy-graphs; the tokens of --lazy-graphs at
# batch 3 (buckets 2 and 4 run eagerly, then captured) against the default's (they must be equal);
# and llama.cpp's time to first token, the wall time of `llama-bench -p 16 -n 1 -r 1 -ngl 99` on the
# same GGUF file, when $LLAMA_BIN is set.
# Run from the repo root after `source scripts/device_setup.sh` (if the machine needs it); writes
# $OUT/h32/* and logs to $OUT/h32.log; <= 6 minutes in all (each step's limit is cut to what is left
# of 340 s; steps in order of importance). H32_TINY=1 runs every step at tiny shapes on --device cpu.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/h32; mkdir -p "$R"; LOG=$OUT/h32.log
BUDGET=${H32_BUDGET:-340}; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a "$LOG"; return; fi
  echo "\$ $*" >> "$R/$name.txt"; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> "$R/$name.txt" 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit): $*" | tee -a "$LOG"
}
if [[ "${H32_TINY:-0}" == 1 ]]; then
  DEV=cpu
  S1B=(--hidden 128 --layers 2 --heads 4 --kv-heads 2 --intermediate 256 --vocab 384)
  S8B=(--hidden 256 --layers 2 --heads 4 --kv-heads 2 --intermediate 512 --vocab 384)
else
  DEV=nvidia
  S1B=(--hidden 2048 --layers 16 --heads 32 --kv-heads 8 --intermediate 8192 --vocab 128256)
  S8B=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
fi
D=${H32_DIR:-/tmp/anydev-h32}; mkdir -p "$D"
B1=$D/llama-1b-bf16; Q4=$D/llama-8b-q4_k.gguf; BF=$D/llama-8b-bf16
{ date -u; nvidia-smi -L 2>/dev/null; git rev-parse HEAD 2>/dev/null || cat .rec/commit 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; nproc; } \
  > "$R/env.txt" 2>&1
SB=(--device $DEV --prompt-tokens 16 --timeout 100)
EA="--max-model-len 1024"

# 1B bf16: both commands, cold and warm; the import profile of one test_infer run
step make-1b 30 python3 benchmarks/make_random_model.py "$B1" "${S1B[@]}"
step startup-1b 70 python3 benchmarks/startup_bench.py "${SB[@]}" --engine-args "$EA" --model "$B1" --importtime \
  --out "$R/startup-1b.json"
# 8B Q4_K GGUF: both commands, cold and warm; llama.cpp on the same file
step make-q4k 60 python3 benchmarks/make_random_model.py "$Q4" "${S8B[@]}" --gguf Q4_K
step startup-q4k 110 python3 benchmarks/startup_bench.py "${SB[@]}" --engine-args "$EA" --model "$Q4" \
  --out "$R/startup-q4k.json"
if [[ -n "${LLAMA_BIN:-}" && -x "$LLAMA_BIN/llama-bench" ]]; then
  for run in first second; do   # first: its own start on this machine; second: as a user's next run
    step llama-bench-$run 30 bash -c "t=\$(date +%s.%N); '$LLAMA_BIN/llama-bench' -m '$Q4' -p 16 -n 1 -r 1 -ngl 99; \
      rc=\$?; awk -v a=\$t -v b=\$(date +%s.%N) 'BEGIN { printf \"llama-bench wall: %.2f s\\n\", b - a }'; exit \$rc"
  done
else
  echo "llama.cpp: not run (\$LLAMA_BIN unset or without llama-bench)" | tee -a "$LOG"
fi
# 8B bf16 safetensors: test_infer cold and warm, serve warm
step make-bf16 60 python3 benchmarks/make_random_model.py "$BF" "${S8B[@]}"
step startup-bf16 70 python3 benchmarks/startup_bench.py "${SB[@]}" --engine-args "$EA" --model "$BF" \
  --cases test_infer --out "$R/startup-bf16.json"
step startup-bf16-serve 40 python3 benchmarks/startup_bench.py "${SB[@]}" --engine-args "$EA" --model "$BF" \
  --cases serve --caches warm --out "$R/startup-bf16-serve.json"
# what each change takes out: cold, without the warm-up; cold, with lazy graphs (1B, then 8B Q4_K)
step startup-1b-warmup 30 python3 benchmarks/startup_bench.py "${SB[@]}" --engine-args "$EA --kernel-warmup" \
  --model "$B1" --cases test_infer --caches cold --out "$R/startup-1b-warmup.json"
step startup-1b-lazy 30 python3 benchmarks/startup_bench.py "${SB[@]}" --engine-args "$EA --lazy-graphs" \
  --model "$B1" --cases test_infer --caches cold --out "$R/startup-1b-lazy.json"
step startup-q4k-lazy 40 python3 benchmarks/startup_bench.py "${SB[@]}" --engine-args "$EA --lazy-graphs" \
  --model "$Q4" --cases test_infer,serve --caches cold --out "$R/startup-q4k-lazy.json"
# lazy graphs keep the tokens: batch 3 (bucket 4 eagerly, then captured) against the default
for mode in default lazy; do
  extra=(); [[ $mode == lazy ]] && extra=(--lazy-graphs)
  step tokens-$mode 25 python3 examples/test_infer.py --device $DEV --model "$B1" --batch-size 3 --max-new-tokens 48 \
    --max-model-len 1024 --prompt Hello "${extra[@]}"
done
if ! grep -q '^--- output' "$R/tokens-default.txt" 2>/dev/null || ! grep -q '^--- output' "$R/tokens-lazy.txt" 2>/dev/null; then
  echo "lazy graphs: not compared (a run gave no output)" | tee -a "$LOG"
elif diff <(sed -n '/^--- output/,/^start-up timeline/p' "$R/tokens-default.txt") \
     <(sed -n '/^--- output/,/^start-up timeline/p' "$R/tokens-lazy.txt") > "$R/tokens-diff.txt" 2>&1; then
  echo "lazy graphs: outputs identical to the default's" | tee -a "$LOG"
else
  echo "lazy graphs: outputs DIFFER from the default's (see tokens-diff.txt)" | tee -a "$LOG"
fi
rm -rf "$D"
echo "total $((SECONDS - T0)) s" | tee -a "$LOG"
