#!/usr/bin/env bash
# Written in sessions 36 and 37 for the next session's first call (issue 31). After tree: main with the
# six patches of parts/pending/ in order: q8s-, q4k- and q6s-row-groups (the own GEMVs take the down
# projection, each block two groups of 8 rows there, so that x is rounded once for 16 rows; session 36
# measured q8_0_split's at one group a block with early loads: the Q8_0 file 0.989x), gemv-warps-variant
# (gemv_variants also times blocks of 16 and 32 warps), q4-blocks-gemv (own GEMVs for q4_0 and q4_1,
# whose files run the Triton GEMVs on main) and fp8-mma-gemv (fp8_e4m3 at batch 1 on the tensor cores).
# Each GGUF file runs only its format's GEMV and the fp8 decode only fp8_e4m3's, so each after / main
# is its own patch's.
# In order, each step skipped once BUDGET is spent: the after tree's own GEMVs in a graph (every new
# one, and q6_k_split's 14,336-input rows, not yet run on a GPU) and its conformance quantized_linear
# checks; the Q8_0, Q4_K and Q6_K files at batch 1 on main, after and llama.cpp; the 8B fp8 decode on
# main and (with bf16, one process) after; the Q4_0 and Q4_1 files likewise; the own GEMVs' variants
# (1, 2 and 4 row groups, 16 and 32 warps a block) beside Triton's. On an H200 also the record
# on main. `parts/s37b.sh` is the record on any card, on the tree that lands: run it next on the same
# machine.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c37a 560
call_start
peer_start
MAKE_CORES=8-11 make_8b_files Q8_0 Q6_K Q4_1 &
MAKE_CORES=12-15 make_8b_files Q4_K Q4_0 &
install_after parts/pending/q8s-row-groups.patch parts/pending/q4k-row-groups.patch parts/pending/q6s-row-groups.patch \
  parts/pending/gemv-warps-variant.patch parts/pending/q4-blocks-gemv.patch parts/pending/fp8-mma-gemv.patch
after gemv-check-after 50 taskset -c 0-1 python3 parts/gemv_check.py
in_after kernels_group conf-after 150 "quantized_linear_equals"
gguf_three_ways() {
  wait_model $1
  file_step anydev-$1-main 40 $G/llama-8b-$1.gguf 1
  in_after file_step anydev-$1-after 40 $G/llama-8b-$1.gguf 1
  llamacpp_step $1 1 20
}
for t in Q8_0 Q4_K Q6_K; do gguf_three_ways $t; done
decode_step decode-fp8-main 60 --shape 8b --quantizations fp8
in_after decode_step decode-8b-after 90 --shape 8b --quantizations none,fp8
for t in Q4_0 Q4_1; do gguf_three_ways $t; done
after variants-after 180 taskset -c 0-1 python3 parts/gemv_variants.py \
  --formats fp8_e4m3,q8_0_split,q4_0,q4_k,q6_k_split,q4_1 --groups 1,2,4 --warps 16,32
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
