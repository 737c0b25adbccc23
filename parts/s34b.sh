#!/usr/bin/env bash
# Session 34, call B (issue 31): the rest of session 33's call C (parts/s33c.sh) on an H200, after call
# A ran the kernels group there: the 8B Q4_K file at batch 1 and 32 and the Q8_0 file at batch 1 beside
# llama.cpp (each engine in a step of its own); the 1B bf16 decode; the 8B bf16/int8/fp8 decode at
# batch 1 in one process. On any other card only the 8B decode runs. Carry .whl and
# .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c34b 330
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
if nvidia-smi -L | grep -q H200; then
  ( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
  make_models Q4_K Q8_0
  PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
  gguf_pair Q4_K 1,32
  gguf_pair Q8_0 1
  step decode-1b 30 "${DB[@]}" --shape 1b --out $R/decode-1b.json
fi
step decode-8b 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
grep -h "anydev llama\|llama.cpp:\|anydev graphs.*decode\|decode batch 1" $R/anydev-*.txt $R/llamacpp-*.txt \
  $R/decode-*.txt >> $LOG 2>/dev/null
call_end
