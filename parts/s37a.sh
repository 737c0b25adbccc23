#!/usr/bin/env bash
# Written in sessions 36 and 37 for the next session's first call (issue 31): the GGUF half of the
# pending patches (parts/s37c.sh is the dense / 8-bit half, parts/s37b.sh the record of the tree that
# lands; run them next on the same machine). After tree: main with the eight patches of parts/pending/
# in order (q8s-, q4k- and q6s-row-groups, gemv-warps-variant, q4-blocks-gemv, fp8-mma-gemv,
# bf16-mma-gemv, int8-mma-gemv). Each GGUF file runs only its format's GEMV, so each file's after /
# main is its own patch's.
# In order, each step skipped once BUDGET is spent: every own GEMV of the after tree in a graph (all new
# on a GPU but q4_k's and q8_0_split's 4,096-input ones) and its conformance linear / quantized_linear
# checks; the Q8_0, Q4_K, Q6_K, Q4_0 and Q4_1 files at batch 1 on main, after and llama.cpp; the GGUF
# GEMVs' variants (1, 2 and 4 row groups, 16 and 32 warps a block) beside Triton's. On an H200 also the
# issue's record on main.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c37a 560
call_start
peer_start
MAKE_CORES=8-11 make_8b_files Q8_0 Q6_K Q4_1 &
MAKE_CORES=12-15 make_8b_files Q4_K Q4_0 &
install_after parts/pending/{q8s-row-groups,q4k-row-groups,q6s-row-groups,gemv-warps-variant,q4-blocks-gemv}.patch \
  parts/pending/{fp8-mma-gemv,bf16-mma-gemv,int8-mma-gemv}.patch
after gemv-check-after 60 taskset -c 0-1 python3 parts/gemv_check.py
in_after kernels_group conf-after 150 "linear_equals and not moe"
for t in Q8_0 Q4_K Q6_K Q4_0 Q4_1; do
  wait_model $t
  file_step anydev-$t-main 40 $G/llama-8b-$t.gguf 1
  in_after file_step anydev-$t-after 40 $G/llama-8b-$t.gguf 1
  llamacpp_step $t 1 20
done
after variants-after 180 taskset -c 0-1 python3 parts/gemv_variants.py \
  --formats q8_0_split,q4_0,q4_k,q6_k_split,q4_1 --groups 1,2,4 --warps 16,32
if nvidia-smi -L | grep -q H200; then
  kernels_group conf-kernels-main 200
  for t in Q4_K Q8_0 Q6_K; do
    wait_model $t
    file_step record-$t 50 $G/llama-8b-$t.gguf 1,32
  done
  decode_step decode-1b 40 --shape 1b
  decode_step decode-8b 120 --shape 8b --quantizations none,fp8
fi
summary
call_end
