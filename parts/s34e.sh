#!/usr/bin/env bash
# Session 34, call E (issue 31): the nvidia backend's own batch-1 GEMVs after call D (an H100): the
# graph check (parts/gemv_check.py); the conformance checks of every recorded linear plan, which now
# call the Triton family under nvidia's wrapper; the 8B GEMVs at batch 1, Triton then own; the Q4_K and
# Q8_0 files at batch 1, Triton (ANYDEV_NVIDIA_GEMV=0) then own, and llama.cpp. Carry .whl and
# .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c34e 250
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
( for t in Q4_K Q8_0; do taskset -c 12-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
step gemv-check 60 taskset -c 0-1 python3 parts/gemv_check.py
kernels_group conf-plans 90 recorded_linear_plan
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
cat $R/gemv-check.txt >> $LOG
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
grep -h "GEMMs per token" $R/lin-*.txt >> $LOG 2>/dev/null
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
