#!/usr/bin/env bash
# Session 27, call B (issue 31), main's kernels (cea3648's; call A's integer dots are not in this tree):
#   1. the whole kernels group of the conformance suite on the GPU (issue 31's check of every format's
#      kernels on its card; call A passed it on the integer-dot tree, then hung at exit);
#   2. the 8B bf16 / int8 / fp8 decoded at batch 1 (call A's run of them was cut by its limit);
#   3. what bounds each batch-1 target: the step profiled (device time per kernel, host time a step) with
#      PDL off (profiles under PDL 3 overlap kernels) for the 8B Q8_0 file, the 8B int8 and the 1B bf16.
# Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c27b 450
call_start
G=/tmp/g; mkdir -p $G
make_models Q8_0
step conf-kernels 210 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-kernels.json \
  -- -k kernels
grep -h "passed\|failed" $R/conf-kernels.txt | tail -3 >> $LOG
pkill -f "anydev.conformance" ; pkill -f "xdist" ; sleep 1
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
step decode-8b-quant 100 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b-quant.json
SP=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256
    --steps 8 --rows 30 --batch-sizes 1)
wait
step prof-Q8_0-b1 40 "${SP[@]}" --model $G/llama-8b-Q8_0.gguf
step prof-1b-b1 30 "${SP[@]}" --shape 1b
step prof-int8-b1 40 "${SP[@]}" --shape 8b --quantization int8
grep -h "anydev graphs   decode\|device kernels" $R/decode-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
call_end
