#!/usr/bin/env bash
# Written in session 37 after parts/s37a.sh ran (issue 31): the tree to land. After tree: main with
# parts/pending/land-s37.patch (branch land-s37: the pending patches without the row groups, which
# s37a found slower on every GGUF file; q4_0 / q4_1's own GEMVs, which it found faster; the
# tensor-core GEMVs of fp8_e4m3, int8 and linear's bfloat16, not yet timed). In order, each step
# skipped once BUDGET is spent: its own GEMVs in a graph against the float reference; the whole
# conformance kernels group on it; the 8B bf16 / fp8 / int8 decodes on main and after (each tree's
# 8-bit / bf16 from one process); the 1B on main and after; the 8-bit and dense GEMVs' variants.
# Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c37d 560
call_start
install_after parts/pending/land-s37.patch
after gemv-check-after 60 taskset -c 0-1 python3 parts/gemv_check.py
in_after kernels_group conf-kernels-after 240
decode_step decode-8b-main 110 --shape 8b --quantizations none,fp8,int8
in_after decode_step decode-8b-after 110 --shape 8b --quantizations none,fp8,int8
decode_step decode-1b-main 40 --shape 1b
in_after decode_step decode-1b-after 40 --shape 1b
after variants-8b 120 taskset -c 0-1 python3 parts/gemv_variants.py --formats fp8_e4m3,int8,dense
summary
call_end
