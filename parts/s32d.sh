#!/usr/bin/env bash
# Session 32, call D (issue 31): main's final tree, with the eight int8/fp8 batch-1 plans call C swept on
# this H100 recorded. The kernels group's recorded-plan checks (each plan at its own shape; the new ones
# among them), then the 8B bf16/int8/fp8 decode at batch 1 in one process, three rounds in alternating
# order, medians: the 8-bit over bf16 ratios of one run. Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c32d 300
call_start
step conf-plans 150 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-plans.json \
  -- -k "kernels and recorded_linear_plan"
pkill -f "anydev.conformance"; sleep 1
step decode-8b 220 taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 \
  --prefill-len 0 --new-tokens 64 --modes graphs --hf none --repeats 3 --no-kernel-count --shape 8b \
  --quantizations none,int8,fp8 --out $R/decode-8b.json
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "anydev graphs.*decode\|decode batch 1" $R/decode-*.txt >> $LOG 2>/dev/null
call_end
