#!/usr/bin/env bash
# Session 35, call C (issue 31): main with q6_k_split's own GEMV (landed from call A's patch) and
# q8_0_split's without the L2 ask (call A's variants: 2.714 -> 2.257 ms a token on an H100). In order:
# parts/gemv_check.py (every own GEMV in a graph, part-filled last blocks too); the conformance
# quantized_linear and engine checks (the full sweep: its 1,001-row case now K = 6,144); the Q8_0 file
# at batch 1 with the own GEMVs off and on, and llama.cpp; the Q6_K file at batch 1 and 32 beside
# llama.cpp; the variants of q8_0_split's and q6_k_split's GEMVs; the 8B decode in bf16 and fp8 (call B's
# timed out before fp8).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c35c 470
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
MAKE_CORES=12-15 make_8b_files Q8_0 Q6_K &
step gemv-check 40 taskset -c 0-1 python3 parts/gemv_check.py
kernels_group conf-linear 110 "quantized_linear or engine"
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
wait_model Q8_0
ANYDEV_NVIDIA_GEMV=0 step anydev-Q8_0-triton 40 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0-triton.json
step anydev-Q8_0-own 40 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0-own.json
llamacpp_step Q8_0 1 30
wait_model Q6_K
step anydev-Q6_K 50 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --batch-sizes 1,32 --out $R/anydev-Q6_K.json
llamacpp_step Q6_K 1,32 30
step gemv-variants 60 taskset -c 0-1 python3 parts/gemv_variants.py --formats q8_0_split,q6_k_split
step decode-8b 120 taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 \
  --prefill-len 0 --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count --shape 8b \
  --quantizations none,fp8 --out $R/decode-8b.json
cat $R/gemv-check.txt >> $LOG
grep -h "ms a token" $R/gemv-variants.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
grep -h "anydev graphs.*decode" $R/decode-*.txt >> $LOG 2>/dev/null
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
