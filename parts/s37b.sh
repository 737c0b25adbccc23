#!/usr/bin/env bash
# Written in session 37 for the call after parts/s37a.sh and parts/s37c.sh, on the same machine (issue
# 31's record on the tree that lands). Tree: main with PATCHES applied (space-separated paths of
# parts/pending/; unset: main itself) and AFTER_EDIT if set (see install_after in parts/step.sh). The
# pending patches apply only in their order (each over the ones before; branch pending-s37 holds them as
# commits): to land some and not others, drop the others' commits from that branch (git rebase
# --onto) and give its diff from main as one patch file. In order,
# each step skipped once BUDGET is spent: the whole conformance kernels group on that tree (the issue's
# check of every format's GPU kernels); the 8B Q4_K, Q8_0 and Q6_K files at batch 1 and 32 on it beside
# llama.cpp; the 1B and the 8B bf16 / fp8 decodes on it. The GGUF files s37a made on this machine are
# kept (KEEP_FILES=1). Where the tree is not main, each file also runs at batch 1 on main, beside it.
#   PATCHES="parts/pending/q8s-row-groups.patch" bash parts/s37b.sh
#   AFTER_EDIT='sed -i "s/^#define WARPS 8$/#define WARPS 16/" backends/nvidia/gemv/gemv.cu &&
#     sed -i "s/^WARPS = 8$/WARPS = 16/" backends/nvidia/gemv/kernel.py' bash parts/s37b.sh   # 16 warps a block
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c37b 580
call_start
peer_start
KEEP_FILES=1 MAKE_CORES=12-15 make_8b_files Q4_K Q8_0 Q6_K &
install_after ${PATCHES:-}
in_after kernels_group conf-kernels 260
for t in Q4_K Q8_0 Q6_K; do
  wait_model $t
  in_after file_step record-$t 60 $G/llama-8b-$t.gguf 1,32
  [ -n "${PATCHES:-}${AFTER_EDIT:-}" ] && file_step main-$t 40 $G/llama-8b-$t.gguf 1
  llamacpp_step $t 1,32 30
done
in_after decode_step decode-1b 40 --shape 1b
in_after decode_step decode-8b 120 --shape 8b --quantizations none,fp8
summary
call_end
