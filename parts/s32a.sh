#!/usr/bin/env bash
# Session 32, call A (issue 31, one H200; written in session 31): the landing gate of parts/pending/.
# "Before" is this tree (main); "after" is it with the patches of parts/pending/ (installed apart):
#   attention-whole-short.patch: decode attention reads a sequence of at most 3 keys per head element
#     whole in one program of a split launch (session 31, one H100: the 8B Q4_K file at batch 1 1.020x);
#   int8-codes-four.patch: int8's batch-1 GEMV converts its codes four to a word (not yet timed);
#   q4k-rounded-once.patch: q4_k's batch-1 integer dots read activations rounded to int8 once, by a launch
#     before the GEMV, not by every program (sm_90 SASS on the CPU machine: 22-40% fewer instructions a
#     step, 4 barriers a step instead of 16; one more launch a GEMV).
# In this order, each step skipped once BUDGET is spent:
#   1. the whole conformance kernels group on nvidia, the after tree (what a patch needs to land);
#   2. the 8B Q4_K file at batch 1, before and after, and llama.cpp on the same file (batch 1 and 32);
#   3. every format's 8B GEMMs at batch 1 (after: bf16, int8, fp8, q4_k);
#   4. 8B bf16 / int8 / fp8 decoded (after: int8).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c32a 470
call_start
install_after parts/pending/attention-whole-short.patch parts/pending/int8-codes-four.patch \
  parts/pending/q4k-rounded-once.patch
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
make_models Q4_K
after conf-after 210 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-after.json \
  -- -k kernels
pkill -f "anydev.conformance"; sleep 1
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
wait_model Q4_K
step anydev-Q4_K-b1 30 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K-b1.json
after after-Q4_K-b1 30 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K-b1.json
LD_LIBRARY_PATH=$(peer_libs) step llamacpp-Q4_K 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q4_K.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-Q4_K.json
step lin-8b-b1 40 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 \
  --out $R/lin-8b-b1.json
after after-lin-8b-b1 30 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 \
  --formats dense,int8,fp8_e4m3,q4_k --out $R/after-lin-8b-b1.json
step decode-8b 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
after after-decode-8b-int8 35 "${DB[@]}" --shape 8b --quantizations int8 --out $R/after-decode-8b-int8.json
grep -h "llama.cpp:\|GEMMs per token\|anydev llama\|anydev graphs.*decode" $R/*lin-*.txt $R/*-Q*.txt \
  $R/llamacpp-*.txt $R/*decode-*.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
call_end
