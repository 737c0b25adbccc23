#!/usr/bin/env bash
# Session 33, call D (issue 31; written in session 33, not run: its device time ran out): the batch-1
# q4_k and q8_0_split GEMVs of the 8B shapes in CUDA C (parts/cuda_gemv/gemv.cu, seven variants each,
# and for q4_k one more timing the GEMV without its rounding) beside the Triton kernel's, each checked
# against the float reference (parts/cuda_gemv/bench.py); then whether nvrtc there compiles the same
# file to a cubin that computes what nvcc's does (parts/cuda_gemv/nvrtc_probe.py). The timed cubin is
# built on the CPU machine (the GPU machine may lack nvcc); .cubin/ is in .git/info/exclude:
#   mkdir -p .cubin && nvcc -cubin -arch=sm_90 -O3 -maxrregcount=128 -o .cubin/gemv.cubin parts/cuda_gemv/gemv.cu
# Carry .whl and .cubin.
set -uo pipefail
source parts/step.sh
call_init c33d 240
call_start
step cuda-gemv 150 taskset -c 0-1 python3 parts/cuda_gemv/bench.py --cubin .cubin/gemv.cubin --formats q4_k,q8_0_split \
  --out $R/cuda-gemv.json
step nvrtc-probe 40 python3 parts/cuda_gemv/nvrtc_probe.py --cubin .cubin/gemv.cubin
grep -h "GEMMs per token\|best CUDA" $R/cuda-gemv.txt >> $LOG 2>/dev/null
call_end
