#!/usr/bin/env bash
# Issue 34's families on DEVICE (argument 1, default nvidia) beside the cpu backend, from HF directories of
# random weights (2 layers, hidden 64, the demo tokenizer; float32): examples/test_infer.py (the Python
# API) for llama, qwen3 and qwen3_moe, each text compared with the cpu backend's; then `anydev serve` of
# each directory on DEVICE (127.0.0.1, one greedy completion) compared with the same text.
# Called by parts/h34.sh; results under $2 (default $OUT/r). Prints "families: N/6 match".
set -uo pipefail
DEV=${1:-nvidia}; R=${2:-$OUT/r}; W=${H34_WORK:-/tmp/h34-families}; mkdir -p $W $R
PROMPT="Hello world"; ok=0
text() { sed -n '/^--- output 0 /,/^start-up timeline/p' "$1" | sed '1d;$d'; }   # the output, not its timings
for arch in llama qwen3 qwen3_moe; do
  timeout 60 python3 - $W/$arch $arch <<'EOF' || { echo "families: $arch: writing the model failed"; continue; }
import sys, torch
from anydev.core.loading.random_weights import LLAMA_TINY, TINY_EXTRA, model_config, save_random_model
shape = dict(LLAMA_TINY, **TINY_EXTRA.get(sys.argv[2], {}), vocab_size=384)
save_random_model(sys.argv[1], model_config(sys.argv[2], max_position_embeddings=256, **shape), torch.float32)
EOF
  for dev in cpu $DEV; do
    timeout 120 python3 examples/test_infer.py --model $W/$arch --device $dev --dtype float32 --max-new-tokens 16 \
      --no-chat-template --prompt "$PROMPT" > $R/h34-family-$arch-$dev.txt 2>&1
  done
  if [[ -n "$(text $R/h34-family-$arch-cpu.txt)" && "$(text $R/h34-family-$arch-cpu.txt)" == "$(text $R/h34-family-$arch-$DEV.txt)" ]]; then
    echo "families: $arch test_infer on $DEV equals cpu"; ok=$((ok + 1))
  else
    echo "families: $arch test_infer on $DEV DIFFERS from cpu (or failed): see h34-family-$arch-*.txt"
  fi
done
PORT=${H34_PORT:-18734}
for arch in llama qwen3 qwen3_moe; do
  anydev serve --model $W/$arch --device $DEV --dtype float32 --host 127.0.0.1 --port $PORT --max-model-len 128 \
    > $R/h34-family-serve-$arch.txt 2>&1 &
  server=$!; trap "kill $server 2>/dev/null" EXIT
  for _ in $(seq 90); do curl -sf http://127.0.0.1:$PORT/health > /dev/null && break; sleep 1; done
  model=$(curl -s http://127.0.0.1:$PORT/v1/models | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
  got=$(curl -s http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": \"$PROMPT\", \"max_tokens\": 16, \"temperature\": 0}" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>> $R/h34-family-serve-$arch.txt)
  kill -TERM $server; wait $server
  want=$(text $R/h34-family-$arch-cpu.txt)
  echo "served: $got" >> $R/h34-family-serve-$arch.txt
  if [[ -n "$want" && "$got" == "$want" ]]; then echo "families: $arch served on $DEV equals cpu"; ok=$((ok + 1))
  else echo "families: $arch served on $DEV DIFFERS from cpu test_infer (or failed): see h34-family-serve-$arch.txt"; fi
done
echo "families: $ok/6 match"
