#!/usr/bin/env bash
# The init record on its own (benchmarks/gpu_record.sh runs it too): write the Llama-3-8B
# shaped random checkpoint (16 GB, bf16, sharded) to local disk, then init_bench from it at TP=1 and at
# TP=every GPU: the limits, each rank alone and all together, the per-phase table per rank; then the
# cost of a GGUF (Q8_0) load at TP=every GPU.
#   bash benchmarks/init_record.sh            # from the repo root on the GPU machine; outputs under $OUT
# Every step runs whatever the others did (no `set -e`); the status is non-zero when one failed.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
MODEL=${MODEL_DIR:-/tmp/llama-8b}
KV_GIB=${KV_GIB:-40}
MODES=${INIT_MODES:-serial,serial+memset,parallel+host-zero,sequential,parallel}   # init_bench --modes
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
TPS=${INIT_TPS:-$(printf '%s\n' 1 "$NGPU" | sort -un)}   # the TP sizes to run (e.g. INIT_TPS=2 when TP=1 is on record)
status=0
step() { echo "\$ $*"; timeout "${STEP_TIMEOUT:-240}" "$@"; local rc=$?; echo "(exit $rc)"; [[ $rc == 0 ]] || status=1; }

if [[ ! -f "$MODEL/model.safetensors.index.json" ]]; then
    step python3 benchmarks/make_random_model.py "$MODEL" --hidden 4096 --layers 32 --heads 32 --kv-heads 8 \
        --intermediate 14336 --vocab 128256
fi
df -h "$MODEL" | tail -n 1
for tp in $TPS; do
    step python3 benchmarks/init_bench.py --device nvidia --tp "$tp" --model "$MODEL" --kv-gib-per-rank "$KV_GIB" \
        --modes "$MODES" --out "$OUT/init-tp$tp.json"
done
# GGUF: Q8_0 blocks dequantized on the host per shard, by the reader threads ("read s" holds it);
# the ~1B shape, as the dequantization runs at well under 1 GB/s per thread
step python3 benchmarks/make_random_model.py /tmp/llama-1b-q8.gguf --gguf Q8_0
step python3 benchmarks/init_bench.py --device nvidia --tp "$NGPU" --model /tmp/llama-1b-q8.gguf --kv-gib-per-rank 4 \
    --modes sequential,parallel --out "$OUT/init-gguf-tp$NGPU.json"
exit $status
