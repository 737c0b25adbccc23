#!/usr/bin/env bash
# Written in session 38 (issue 31) after parts/s38a.sh, for the next session's first call: the gate and
# record of parts/pending/gemv-one-wave-warps.patch. After tree: main with the patch (one-wave blocks of
# 32 warps for q4_k and q6_k_split, q4_k's other blocks of 16 warps and its loop not unrolled, q4_0 /
# q4_1 without the L2 ask). U4: the same with q4_k's loop unrolled 4 times (as s38a's A1); W8: with
# q4_k's other blocks of 8 warps, not 16 (Q4_K only, each).
# In order, each step skipped once BUDGET is spent: the after tree's GEMVs in a graph against the float
# reference; the conformance kernels group on it (the Llama 8B files made meanwhile on other cores); the
# Q4_K file at batch 1 on main, U4, W8, after and llama.cpp; the Q4_0, Q4_1, Q6_K and Q8_0 files on after
# and llama.cpp (Q4_K and Q8_0 also at batch 32, the issue's batch-32 target; the patch takes batch 1
# only); q4_k's GEMVs at 8 and 16 warps on the after tree.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c38b 560
call_start
peer_start
MAKE_CORES=12-13 make_8b_files Q4_K Q4_1 Q8_0 &
MAKE_CORES=14-15 make_8b_files Q4_0 Q6_K &
AFTER_EDIT='perl -0pi -e "s/#pragma unroll 1\n  for \(int s = lane/#pragma unroll 4\n  for (int s = lane/" backends/nvidia/gemv/gemv.cu' \
  install_after parts/pending/gemv-one-wave-warps.patch
echo "U4 q4_k loop unrolled 4 times: $(grep -c "pragma unroll 4" /tmp/after/backends/nvidia/gemv/gemv.cu)" >> $R/env.txt
mv /tmp/after /tmp/after-u4 && mv /tmp/after-site /tmp/after-site-u4
in_u4() { (cd /tmp/after-u4 && PYTHONPATH=/tmp/after-site-u4:$SITE "$@"); }
AFTER_EDIT='sed -i "s/Gemv(\"q4k\", 256, 8192, warps=16,/Gemv(\"q4k\", 256, 8192, warps=8,/" backends/nvidia/gemv/kernel.py && sed -i "s/^ENTRIES(q4k, 16)$/ENTRIES(q4k, 8)/" backends/nvidia/gemv/gemv.cu' \
  install_after parts/pending/gemv-one-wave-warps.patch
echo "W8: $(grep -c "ENTRIES(q4k, 8)" /tmp/after/backends/nvidia/gemv/gemv.cu) $(grep -o "q4k\", 256, 8192, warps=8" /tmp/after/backends/nvidia/gemv/kernel.py)" >> $R/env.txt
mv /tmp/after /tmp/after-w8 && mv /tmp/after-site /tmp/after-site-w8
in_w8() { (cd /tmp/after-w8 && PYTHONPATH=/tmp/after-site-w8:$SITE "$@"); }
install_after parts/pending/gemv-one-wave-warps.patch
after gemv-check-after 60 taskset -c 0-1 python3 parts/gemv_check.py
in_after kernels_group conf-kernels-after 240
wait_model Q4_K
file_step anydev-Q4_K-main 40 $G/llama-8b-Q4_K.gguf 1
in_u4 file_step anydev-Q4_K-u4 30 $G/llama-8b-Q4_K.gguf 1
in_w8 file_step anydev-Q4_K-w8 30 $G/llama-8b-Q4_K.gguf 1
for t in Q4_K Q8_0 Q4_0 Q4_1 Q6_K; do
  case $t in Q4_K|Q8_0) batches=1,32 ;; *) batches=1 ;; esac
  wait_model $t
  in_after file_step record-$t-after 60 $G/llama-8b-$t.gguf $batches
  llamacpp_step $t $batches 30
done
after variants-after 40 taskset -c 0-1 python3 parts/gemv_variants.py --formats q4_k --warps 8,16
summary
call_end
