#!/usr/bin/env bash
# Session 31, call A (issue 31, one H200; written in session 30, which got no device machine).
# "Before" is this tree (main); "after" is it with the patches of parts/pending/ (installed apart):
#   attention-whole-short.patch: decode attention reads a sequence of at most 3 keys per head element
#     whole in one program of a split launch (session 28's sweep: 7.3 us against 9.9 at 128-wide heads
#     and 256 keys);
#   int8-codes-four.patch: int8's batch-1 GEMV converts its codes four to a word (codes_float; sm_90
#     SASS 6.23 -> 5.50 instructions a value).
# In this order, each step skipped once BUDGET is spent (what the record lacks first):
#   1. the whole conformance kernels group on nvidia, this tree;
#   2. the 8B Q4_K file at batch 1 and 32 (after: batch 1) and llama.cpp on the same file (sources from
#      llama-cpp-python 0.3.36, built for sm_90 with CUDA 13.0 on the CPU machine; the GPU machine's
#      CUDA libraries load at run time), the step profiled with programmatic dependent launch off (each
#      kernel's device time its own); the after tree's attention and linear checks (the kernels its
#      patches change); the 8B fp8 step profiled;
#   3. the same for Q8_0 (batch 1 profiled); the 1B bf16 at batch 1, before and after, and its profile;
#   4. every format's 8B GEMMs at batch 1 (after: bf16, int8, fp8); 8B bf16 / int8 / fp8 decoded
#      (after: int8).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c31a 585
call_start
install_after parts/pending/attention-whole-short.patch parts/pending/int8-codes-four.patch
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
make_models Q4_K Q8_0
LLAMA_LIBS=$(peer_libs)
llamacpp() { LD_LIBRARY_PATH=$LLAMA_LIBS step llamacpp-$1 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$1.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$1.json; }
step conf-kernels 200 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-kernels.json \
  -- -k kernels
pkill -f "anydev.conformance"; sleep 1
PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256
      --steps 8 --rows 30)
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
wait_model Q4_K
step anydev-Q4_K 45 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K.json
after after-Q4_K-b1 30 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K-b1.json
llamacpp Q4_K
step prof-Q4_K 45 "${PROF[@]}" --batch-sizes 1,32 --model $G/llama-8b-Q4_K.gguf
after conf-after 60 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-after.json \
  -- -k "kernels and (paged_decode_attention or linear)"
pkill -f "anydev.conformance"; sleep 1
step prof-fp8-b1 45 "${PROF[@]}" --batch-sizes 1 --shape 8b --quantization fp8
wait_model Q8_0
step anydev-Q8_0 35 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0.json
llamacpp Q8_0
step prof-Q8_0-b1 30 "${PROF[@]}" --batch-sizes 1 --model $G/llama-8b-Q8_0.gguf
step decode-1b 20 "${DB[@]}" --shape 1b --out $R/decode-1b.json
after after-decode-1b 20 "${DB[@]}" --shape 1b --out $R/after-decode-1b.json
step prof-1b-b1 25 "${PROF[@]}" --batch-sizes 1
step lin-8b-b1 40 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 \
  --out $R/lin-8b-b1.json
after after-lin-8b-b1 30 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 \
  --formats dense,int8,fp8_e4m3 --out $R/after-lin-8b-b1.json
step decode-8b 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
after after-decode-8b-int8 35 "${DB[@]}" --shape 8b --quantizations int8 --out $R/after-decode-8b-int8.json
grep -h "llama.cpp:\|GEMMs per token\|anydev llama\|anydev graphs.*decode\|device busy" $R/*lin-*.txt $R/*-Q*.txt \
  $R/llamacpp-*.txt $R/*decode-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -4 >> $LOG
call_end
