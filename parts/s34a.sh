#!/usr/bin/env bash
# Session 34, call A (issue 31): session 33's call D (parts/s33d.sh: the batch-1 q4_k and q8_0_split
# GEMVs in CUDA C beside the Triton ones, and the nvrtc probe), then, on an H200 only, the conformance
# kernels group the record still lacks on that card. Build .cubin first (see parts/s33d.sh);
# carry .whl and .cubin.
set -uo pipefail
source parts/step.sh
call_init c34a 520
call_start
step cuda-gemv 150 taskset -c 0-1 python3 parts/cuda_gemv/bench.py --cubin .cubin/gemv.cubin --formats q4_k,q8_0_split \
  --out $R/cuda-gemv.json
step nvrtc-probe 40 python3 parts/cuda_gemv/nvrtc_probe.py --cubin .cubin/gemv.cubin
grep -h "GEMMs per token\|best CUDA" $R/cuda-gemv.txt >> $LOG 2>/dev/null
if nvidia-smi -L | grep -q H200; then
  kernels_group conf-main 260
  grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
fi
call_end
