#!/usr/bin/env bash
# Session 24, call C (issue 31): call B cut to what the device time left allows. This tree (the decode
# attention merging only the partitions that hold keys) against .prev/ = b1d07a3 (session 23's main, before it):
#   1. conformance on nvidia for decode attention;
#   2. the 8B Q4_K file at batch 1: before, after, and after with ANYDEV_TRITON_PDL=3; llama.cpp on it
#      (call A's binaries, carried) when time is left.
set -uo pipefail
source parts/step.sh
call_init c24c 170
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
( taskset -c 4-15 python3 benchmarks/make_random_model.py $G/llama-8b-Q4_K.gguf --hidden 4096 --layers 32 --heads 32 \
    --kv-heads 8 --intermediate 14336 --vocab 128256 --gguf Q4_K > $R/make-Q4_K.txt 2>&1; echo "$? make-Q4_K $SECONDS" >> $LOG ) &
step conf-decode 50 taskset -c 0-3 python3 -m anydev.conformance --device nvidia -n 4 --report $R/conf-decode.json -- \
  -k "kernels and decode_attention" -rA
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
for _ in $(seq 60); do grep -q " make-Q4_K " $LOG && break; sleep 2; done
step after-Q4_K-b1 45 taskset -c 0-1 python3 "${PEER[@]}" $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K-b1.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q4_K-b1 45 taskset -c 0-1 python3 $OLDPWD/.prev/"${PEER[0]}" \
  "${PEER[@]:1}" $G/llama-8b-Q4_K.gguf --out $R/before-Q4_K-b1.json)
ANYDEV_TRITON_PDL=3 step pdl3-Q4_K-b1 45 taskset -c 0-1 python3 "${PEER[@]}" $G/llama-8b-Q4_K.gguf --out $R/pdl3-Q4_K-b1.json
LD_LIBRARY_PATH=$B/bin step llamacpp-Q4_K 20 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q4_K.gguf \
  --llamacpp $B --batch-sizes 1 --skip-anydev --out $R/llamacpp-Q4_K.json
grep -h "passed\|failed\|anydev llama\|llama.cpp:" $R/conf-*.txt $R/before-*.txt $R/after-*.txt $R/pdl*.txt \
  $R/llamacpp-*.txt >> $LOG 2>/dev/null
call_end
