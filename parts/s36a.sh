#!/usr/bin/env bash
# Written in session 35 for the next session's first call (issue 31), two pending patches:
#   split-long-rows.patch   the own q8_0_split / q6_k_split GEMVs take rows of up to 16,384 inputs (the
#                           down projection: Triton's GEMV reads it at 2.3 / 1.3 TB/s on an H100);
#   gemv-early-loads.patch  their first step's weights read before the wait for x (PDL), so that the
#                           HBM latency passes while x is rounded (31 -> 39-46 registers a thread).
# In order, each step skipped once BUDGET is spent: the tree with both ("after2") checked in a graph
# and by the conformance quantized_linear checks; the GEMV variants in after2 (the registers capped at
# 32 among them) and main; the Q8_0 and Q6_K files at batch 1 on main, after2, llama.cpp; then after1
# (split-long-rows alone) on the same files. On an H200 also the record on main: Q4_K and Q8_0
# at batch 1 and 32 beside llama.cpp, the 1B and the 8B bf16 / int8 / fp8 decodes, profiles of the 1B
# and fp8 steps.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c36a 560
call_start
peer_start
MAKE_CORES=8-15 make_8b_files Q8_0 Q6_K Q4_K &
install_after parts/pending/split-long-rows.patch parts/pending/gemv-early-loads.patch
after gemv-check-after2 30 taskset -c 0-1 python3 parts/gemv_check.py
in_after kernels_group conf-after2 50 "quantized_linear_equals"
after variants-after2 45 taskset -c 0-1 python3 parts/gemv_variants.py --formats q8_0_split,q6_k_split
step variants-main 35 taskset -c 0-1 python3 parts/gemv_variants.py --formats q8_0_split,q6_k_split
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
for t in Q8_0 Q6_K; do
  wait_model $t
  step anydev-$t-main 30 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-main.json
  after anydev-$t-after2 30 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-after2.json
  llamacpp_step $t 1 20
done
install_after parts/pending/split-long-rows.patch
for t in Q8_0 Q6_K; do
  after anydev-$t-after1 30 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-after1.json
done
if nvidia-smi -L | grep -q H200; then
  for t in Q4_K Q8_0; do
    wait_model $t
    step record-$t 50 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-$t.gguf --out $R/record-$t.json
    LD_LIBRARY_PATH=$(peer_libs) step llamacpp-record-$t 30 python3 benchmarks/gguf_peer_bench.py \
      $G/llama-8b-$t.gguf --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-record-$t.json
  done
  DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
      --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
  step decode-1b 30 "${DB[@]}" --shape 1b --out $R/decode-1b.json
  step decode-8b 120 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
  PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs
        --context 256 --steps 8 --rows 30 --batch-sizes 1)
  step prof-1b-b1 35 "${PROF[@]}" --shape 1b
  step prof-fp8-b1 50 "${PROF[@]}" --shape 8b --quantization fp8
fi
cat $R/gemv-check-after2.txt >> $LOG
grep -h "ms a token" $R/variants-*.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
grep -h "anydev graphs.*decode\|decode step wall" $R/decode-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
for f in $R/anydev-*.txt $R/record-*.txt $R/llamacpp-*.txt; do
  [ -f $f ] && echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
