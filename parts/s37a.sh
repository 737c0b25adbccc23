#!/usr/bin/env bash
# Written in sessions 36 and 37 for the next session's first call (issue 31). After tree: main with
# parts/pending/q8s-row-groups.patch, q4k-row-groups.patch and q6s-row-groups.patch (the own GEMVs take
# the down projection, each block two groups of 8 rows there, so that x is rounded once for 16 rows;
# session 36 measured q8_0_split's at one group a block with early loads: the Q8_0 file 0.989x), and
# gemv-warps-variant.patch (gemv_variants also times blocks of 16 and 32 warps, one row a warp: x
# rounded once for as many rows, with no fewer warps in flight), and q4-blocks-gemv.patch (own GEMVs for
# q4_0 and q4_1, whose files run the Triton GEMVs on main). Each GGUF file runs only its format's GEMV,
# so each file's after / main is its own patch's.
# In order, each step skipped once BUDGET is spent: main's own GEMVs in a graph (q6_k_split's 14,336-input
# rows among them, not yet run on a GPU); the after tree's likewise and its conformance quantized_linear
# checks; the Q8_0, Q4_K, Q6_K, Q4_0 and Q4_1 files at batch 1 on main, after and llama.cpp; the own
# GEMVs at 1, 2 and 4 row groups and at 16 and 32 warps a block beside Triton's. On an H200 also the record on
# main: the conformance kernels group, the Q4_K, Q8_0 and Q6_K files at batch 1 and 32 beside llama.cpp,
# the 1B and the 8B bf16 / fp8 decodes. (`parts/s37b.sh` is that record on any card, on the tree that
# lands: run it next on the same machine.)
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c37a 560
call_start
peer_start
MAKE_CORES=8-11 make_8b_files Q8_0 Q6_K Q4_1 &
MAKE_CORES=12-15 make_8b_files Q4_K Q4_0 &
install_after parts/pending/q8s-row-groups.patch parts/pending/q4k-row-groups.patch parts/pending/q6s-row-groups.patch \
  parts/pending/gemv-warps-variant.patch parts/pending/q4-blocks-gemv.patch
step gemv-check-main 40 taskset -c 0-1 python3 parts/gemv_check.py
after gemv-check-after 40 taskset -c 0-1 python3 parts/gemv_check.py
in_after kernels_group conf-after 150 "quantized_linear_equals"
for t in Q8_0 Q4_K Q6_K Q4_0 Q4_1; do
  wait_model $t
  file_step anydev-$t-main 40 $G/llama-8b-$t.gguf 1
  in_after file_step anydev-$t-after 40 $G/llama-8b-$t.gguf 1
  if [[ $t == Q4_[01] ]]; then llamacpp_step $t 1 20; else llamacpp_step $t 1,32 30; fi
done
after variants-after 180 taskset -c 0-1 python3 parts/gemv_variants.py --formats q8_0_split,q4_0,q4_k,q6_k_split,q4_1 \
  --groups 1,2,4 --warps 16,32
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
