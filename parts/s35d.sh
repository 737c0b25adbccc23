#!/usr/bin/env bash
# Session 35, call D (issue 31): parts/pending/q6s-no-l2-ask.patch (q6_k_split's own GEMV without the
# L2 ask: call C's variants, 2.114 -> 1.951 ms a token on an H100) beside main, on the Q6_K file at
# batch 1, with llama.cpp; the after tree's GEMVs in a graph (parts/gemv_check.py) and its variants
# (the unrolled loop on top of it); last its conformance quantized_linear checks.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c35d 220
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
MAKE_CORES=4-15 make_8b_files Q6_K &
install_after parts/pending/q6s-no-l2-ask.patch
after gemv-check-after 30 taskset -c 0-1 python3 parts/gemv_check.py
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
wait_model Q6_K
step anydev-Q6_K-main 40 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K-main.json
after anydev-Q6_K-after 40 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K-after.json
llamacpp_step Q6_K 1 25
after gemv-variants-after 30 taskset -c 0-1 python3 parts/gemv_variants.py --formats q6_k_split
in_after kernels_group conf-after 70 "quantized_linear_equals"
cat $R/gemv-check-after.txt >> $LOG
grep -h "ms a token" $R/gemv-variants-after.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
