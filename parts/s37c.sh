#!/usr/bin/env bash
# Written in session 37 for the call after parts/s37a.sh, on the same machine (issue 31): the dense / fp8
# half of the pending patches. After tree: main with the eight patches of parts/pending/ in order, as
# s37a's; only fp8-mma-gemv, bf16-mma-gemv and int8-mma-gemv (fp8_e4m3, linear's bfloat16 and int8 at
# batch 1 on the tensor cores) change what these decodes run. In order, each step skipped once BUDGET
# is spent: the 1B bf16 decode on main and after; the 8B bf16, fp8 and int8 decodes on main and after
# (each tree's 8-bit / bf16 from one process); their GEMVs' variants (2 and 8 steps ahead, 16 warps a
# block) on the 8B and the 1B beside Triton's. A gemv_check and the conformance checks of the after
# tree are s37a's.
# Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c37c 560
call_start
install_after parts/pending/{q8s-row-groups,q4k-row-groups,q6s-row-groups,gemv-warps-variant,q4-blocks-gemv}.patch \
  parts/pending/{fp8-mma-gemv,bf16-mma-gemv,int8-mma-gemv}.patch
decode_step decode-1b-main 40 --shape 1b
in_after decode_step decode-1b-after 40 --shape 1b
decode_step decode-8b-main 120 --shape 8b --quantizations none,fp8,int8
in_after decode_step decode-8b-after 120 --shape 8b --quantizations none,fp8,int8
after variants-8b 150 taskset -c 0-1 python3 parts/gemv_variants.py --formats fp8_e4m3,int8,dense --warps 16
after variants-1b 60 taskset -c 0-1 python3 parts/gemv_variants.py --formats dense --model 1B
summary
call_end
