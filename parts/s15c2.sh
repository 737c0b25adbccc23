#!/usr/bin/env bash
# Session 15, call 2 on the same H200 (fired within 30 s of call 1, whose background build and GGUF files it
# uses): anydev beside llama.cpp on the five 8B GGUF files at batch 1 and 32 (issue 31; Q4_K with llama.cpp's
# time to first token), then the 8B Q4_K start-up of test_infer and serve, Triton cache cold and warm, and
# serve cold with --lazy-graphs (issue 32). Bounded to BUDGET seconds.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-560}; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left)" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit)" | tee -a $LOG
}
if [[ -s /tmp/s15-env ]]; then export $(cat /tmp/s15-env); else source scripts/device_setup.sh > $R/setup.txt 2>&1; fi
{ date -u; nvidia-smi -L; cat /tmp/g/made.log; tail -3 /tmp/llamacpp-build.out; } > $R/env.txt 2>&1
B=/tmp/llamacpp-build; G=/tmp/g
while [[ ! -x $B/bin/llama-batched-bench ]] && pgrep -f "cmake --build" > /dev/null && (( SECONDS - T0 < 200 )); do sleep 3; done
[[ -x $B/bin/llama-bench ]] || echo "no llama.cpp build" | tee -a $LOG
PEER=(python3 benchmarks/gguf_peer_bench.py --device nvidia --llamacpp $B --batch-sizes 1,32 --repeats 2)
step peer-Q4_K 100 "${PEER[@]}" $G/llama-8b-Q4_K.gguf --ttft --out $R/peer-Q4_K.json
SB=(python3 benchmarks/startup_bench.py --device nvidia --prompt-tokens 16 --timeout 60 --model $G/llama-8b-Q4_K.gguf)
step startup-q4k 110 "${SB[@]}" --engine-args "--max-model-len 1024" --out $R/startup-q4k.json
step startup-q4k-serve-lazy 40 "${SB[@]}" --engine-args "--max-model-len 1024 --lazy-graphs" --cases serve \
  --caches cold --out $R/startup-q4k-serve-lazy.json
for t in Q8_0 Q6_K Q4_0 Q4_1; do
  [[ -s $G/llama-8b-$t.gguf ]] || { echo "no file $t" | tee -a $LOG; continue; }
  step peer-$t 75 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/peer-$t.json
done
grep -h "anydev\|llama.cpp\|/ S_TG\|x " $R/peer-*.txt | tail -40 >> $LOG
grep -h "wall\|engine core" $R/startup-*.txt >> $LOG
tar czf $OUT/c2.tgz -C $OUT r && rm -rf $R
echo "call 2 done in $((SECONDS - T0)) s" | tee -a $LOG
