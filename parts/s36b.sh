#!/usr/bin/env bash
# Ran in session 36 on branch dense-gemv (30b4bb0), whose parts/pending held the two patches it names;
# kept as it ran (results/2026-12-07-nvidia-h100-session36/).
# Session 36's first call (issue 31). This tree: main with the nvidia backend's own dense batch-1 GEMVs
# (bfloat16 `linear`, fp8_e4m3 `quantized_linear`; gemv.cu's bf16 / e4m3, the first 8 steps of each
# warp's row read before the wait for the kernel before). After tree: the two pending patches
# (split-long-rows: the own q8_0_split / q6_k_split GEMVs take the down projection; gemv-early-loads).
# In order of need, each step skipped once BUDGET is spent: every own GEMV in a graph; the conformance
# linear checks on this tree; the dense GEMVs' variants (1B, 8B); the 1B and 8B fp8 decodes with the own
# GEMVs and without (ANYDEV_NVIDIA_GEMV=0); the Q8_0 file on this tree, the after tree and llama.cpp;
# the conformance quantized_linear checks on the after tree; the Q6_K file likewise.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c36b 560
call_start
peer_start
MAKE_CORES=8-15 make_8b_files Q8_0 Q6_K &
install_after parts/pending/split-long-rows.patch parts/pending/gemv-early-loads.patch
step gemv-check 40 taskset -c 0-1 python3 parts/gemv_check.py
kernels_group conf-main 60 "linear_equals"
step variants-dense-8b 50 taskset -c 0-1 python3 parts/gemv_variants.py --formats dense,fp8_e4m3 --model 8B
step variants-dense-1b 25 taskset -c 0-1 python3 parts/gemv_variants.py --formats dense --model 1B
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
step decode-1b-own 30 "${DB[@]}" --shape 1b --out $R/decode-1b-own.json
ANYDEV_NVIDIA_GEMV=0 step decode-1b-triton 30 "${DB[@]}" --shape 1b --out $R/decode-1b-triton.json
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
wait_model Q8_0
step anydev-Q8_0-main 30 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0-main.json
after anydev-Q8_0-after2 30 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0-after2.json
llamacpp_step Q8_0 1 20
step decode-8b-own 110 "${DB[@]}" --shape 8b --quantizations none,fp8 --out $R/decode-8b-own.json
ANYDEV_NVIDIA_GEMV=0 step decode-8b-fp8-triton 55 "${DB[@]}" --shape 8b --quantizations fp8 --out $R/decode-8b-fp8-triton.json
in_after kernels_group conf-after2 50 "quantized_linear_equals"
wait_model Q6_K
step anydev-Q6_K-main 30 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K-main.json
after anydev-Q6_K-after2 30 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K-after2.json
llamacpp_step Q6_K 1 20
cat $R/gemv-check.txt >> $LOG
grep -h "ms a token" $R/variants-*.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "anydev graphs.*decode" $R/decode-*.txt >> $LOG 2>/dev/null
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do
  [ -f $f ] && echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
