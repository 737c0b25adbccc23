#!/usr/bin/env bash
# Session 35, call E (issue 31): parts/pending/split-long-rows.patch (the own q8_0_split and q6_k_split
# GEMVs take rows of up to 16,384 inputs: the down projection, which the Triton GEMV reads at 2.3 and
# 1.3 TB/s on an H100) beside main: the after tree's GEMVs in a graph, the Q8_0 and Q6_K files at
# batch 1 with llama.cpp, its conformance quantized_linear checks, last its variants (down included).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c35e 165
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
MAKE_CORES=4-15 make_8b_files Q8_0 Q6_K &
install_after parts/pending/split-long-rows.patch
after gemv-check-after 30 taskset -c 0-1 python3 parts/gemv_check.py
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
for t in Q8_0 Q6_K; do
  wait_model $t
  step anydev-$t-main 30 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-main.json
  after anydev-$t-after 30 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/anydev-$t-after.json
  llamacpp_step $t 1 20
done
in_after kernels_group conf-after 45 "quantized_linear_equals"
after gemv-variants-after 30 taskset -c 0-1 python3 parts/gemv_variants.py --formats q8_0_split,q6_k_split
cat $R/gemv-check-after.txt >> $LOG
grep -h "^down\|ms a token" $R/gemv-variants-after.txt | cut -c1-400 >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
