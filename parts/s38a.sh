#!/usr/bin/env bash
# Written in session 38 (issue 31): blocks of 32 warps where a grid of them fills one wave
# (parts/pending/gemv-one-wave-warps.patch: q4_k's and q6_k_split's 4,096-row projections, q4_k's down
# projection taken from the Triton GEMV, q4_k's other blocks of 16 warps), and session 37's two q4_0 /
# q4_1 edits (timed alone in its call A). After trees: A1 = the patch with q4_0 / q4_1's L2 ask dropped
# (their files time the ask, the Q4_K and Q6_K files the warps); A2 = the patch with q4_0 / q4_1's down
# projection left to the Triton GEMV (max_k 8,192).
# In order, each step skipped once BUDGET is spent: A1's GEMVs in a graph against the float reference;
# the Q4_K, Q6_K, Q4_0, Q4_1 files at batch 1 on main, A1 (and A2 for q4_0 / q4_1); the GEMVs of q4_k and
# q6_k_split at 8, 16 and 32 warps a block. What it decides, the next call records beside llama.cpp
# (whose build was not ready for this one) with the conformance kernels group on the tree that lands.
# Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c38a 330
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
MAKE_CORES=8-11 make_8b_files Q4_K Q4_0 &
MAKE_CORES=12-15 make_8b_files Q6_K Q4_1 &
AFTER_EDIT='sed -i "s/Gemv(\"q40\", 256, 16384/Gemv(\"q40\", 256, 8192/; s/Gemv(\"q41\", 256, 16384/Gemv(\"q41\", 256, 8192/" backends/nvidia/gemv/kernel.py' \
  install_after parts/pending/gemv-one-wave-warps.patch
grep -n "Gemv(\"q4" /tmp/after/backends/nvidia/gemv/kernel.py >> $R/env.txt
mv /tmp/after /tmp/after-a2 && mv /tmp/after-site /tmp/after-site-a2
AFTER_EDIT='sed -i "s/begin_block<WARPS, MODE, true, true>/begin_block<WARPS, MODE, false, true>/" backends/nvidia/gemv/gemv.cu' \
  install_after parts/pending/gemv-one-wave-warps.patch
echo "A1 L2 ask dropped: $(grep -c "begin_block<WARPS, MODE, false, true>" /tmp/after/backends/nvidia/gemv/gemv.cu)" >> $R/env.txt
in_a2() { (cd /tmp/after-a2 && PYTHONPATH=/tmp/after-site-a2:$SITE "$@"); }
after gemv-check-a1 60 taskset -c 0-1 python3 parts/gemv_check.py
for t in Q4_K Q6_K Q4_0 Q4_1; do
  wait_model $t
  file_step anydev-$t-main 40 $G/llama-8b-$t.gguf 1
  in_after file_step anydev-$t-a1 40 $G/llama-8b-$t.gguf 1
  case $t in Q4_0|Q4_1) in_a2 file_step anydev-$t-a2 40 $G/llama-8b-$t.gguf 1 ;; esac
done
after variants-a1 70 taskset -c 0-1 python3 parts/gemv_variants.py --formats q4_k,q6_k_split --warps 8,16,32
summary
call_end
