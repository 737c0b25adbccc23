#!/usr/bin/env bash
# Written in session 34 for the next session's first call (issue 31). Main has the nvidia backend's own
# batch-1 q4_k / q8_0_split GEMVs, measured only on H100s; parts/pending/q6k-split-gemv.patch adds
# q6_k_split's. In this order, each step skipped once BUDGET is spent:
#   1. the after tree (main with the patch): parts/gemv_check.py (all three formats in a graph) and the
#      conformance quantized_linear checks;
#   2. the 8B Q6_K file at batch 1: main, the after tree, llama.cpp;
#   3. the Q4_K and Q8_0 files at batch 1: main with its GEMVs off (ANYDEV_NVIDIA_GEMV=0) and on,
#      llama.cpp (on an H200 this is the record of the landed GEMVs);
#   4. the 8B q6_k_split GEMVs at batch 1: main (Triton's) and the after tree (own);
#   5. variants of main's own q8_0_split and q4_k GEMVs (parts/gemv_variants.py: unrolling, the L2
#      prefetch) beside the landed ones and Triton's.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c35a 540
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
MAKE_CORES=12-15 make_8b_files Q6_K Q4_K Q8_0 &
install_after parts/pending/q6k-split-gemv.patch
after gemv-check-after 60 taskset -c 0-1 python3 parts/gemv_check.py
in_after kernels_group conf-after 110 "quantized_linear_equals"
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
wait_model Q6_K
step anydev-Q6_K-main 40 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K-main.json
after anydev-Q6_K-after 40 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K-after.json
llamacpp_step Q6_K 1 30
for t in Q4_K Q8_0; do
  wait_model $t
  ANYDEV_NVIDIA_GEMV=0 step anydev-$t-triton 40 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-triton.json
  step anydev-$t-own 40 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-own.json
  llamacpp_step $t 1 30
done
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --formats q6_k_split)
step lin-q6s-main 40 "${LB[@]}" --out $R/lin-q6s-main.json
after lin-q6s-after 40 "${LB[@]}" --out $R/lin-q6s-after.json
step gemv-variants 90 taskset -c 0-1 python3 parts/gemv_variants.py --formats q8_0_split,q4_k
cat $R/gemv-check-after.txt >> $LOG
grep -h "ms a token" $R/gemv-variants.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
grep -h "GEMMs per token" $R/lin-*.txt >> $LOG 2>/dev/null
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
