#!/usr/bin/env bash
# Session 34, call D (issue 31, an H200 or an H100): the nvidia backend's own batch-1 GEMVs
# (backends/nvidia/gemv/, CUDA C through NVRTC) checked and timed beside the Triton ones
# (ANYDEV_NVIDIA_GEMV=0). In this order, each step skipped once BUDGET is spent: parts/gemv_check.py
# (NVRTC's compile time; the GEMVs in a captured graph between Triton kernels); the conformance
# kernels group's quantized_linear and engine checks; the 8B GEMVs at batch 1, q4_k and q8_0_split,
# Triton then own; the Q4_K and Q8_0 files at batch 1, Triton then own, and llama.cpp; the q8_0_split
# batch-1 plan sweep (all five GEMMs), its winners run on the Q8_0 file and through the conformance
# checks of every recorded plan (parts/merge_plans.py). Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c34d 560
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
( for t in Q4_K Q8_0; do taskset -c 12-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
step gemv-check 60 taskset -c 0-1 python3 parts/gemv_check.py
kernels_group conf-gemv 110 "quantized_linear or greedy"
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --formats q4_k,q8_0_split)
ANYDEV_NVIDIA_GEMV=0 step lin-triton 40 "${LB[@]}" --out $R/lin-triton.json
step lin-own 40 "${LB[@]}" --out $R/lin-own.json
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
for t in Q4_K Q8_0; do
  wait_model $t
  ANYDEV_NVIDIA_GEMV=0 step anydev-$t-triton 40 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-triton.json
  step anydev-$t-own 40 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-own.json
  LD_LIBRARY_PATH=$(peer_libs) step llamacpp-$t 30 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf \
    --llamacpp $B --batch-sizes 1 --skip-anydev --out $R/llamacpp-$t.json
done
step sweep-q8s-b1 130 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep \
  --sweep-batches 1 --sweep-widths 512,1024 --sweep-formats q8_0_split --sweep-gemms qkv,o,gate_up,down,lm_head \
  --table-out $R/plans-q8s.txt --out $R/sweep-q8s-b1.json
if [ -s $R/plans-q8s.txt ]; then
  step anydev-Q8_0-own-plans 40 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --plans $R/plans-q8s.txt --out $R/anydev-Q8_0-own-plans.json
  AFTER_EDIT="python3 $PWD/parts/merge_plans.py backends/triton_kernels/linear_plans.py $R/plans-q8s.txt" install_after
  (cd $AFTER && PYTHONPATH=/tmp/after-site:$SITE kernels_group conf-plans 120 recorded_linear_plan)
fi
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
cat $R/gemv-check.txt >> $LOG
grep -h "q4_k\|q8_0_split" $R/lin-*.txt | grep -v "^\\$" >> $LOG 2>/dev/null
grep -h "b1 " $R/sweep-*.txt | sed 's/Plan(block_m=1, //g' >> $LOG 2>/dev/null
grep -h "anydev llama\|llama.cpp:" $R/anydev-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
call_end
