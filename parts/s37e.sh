#!/usr/bin/env bash
# Written in session 37 after call D (issue 31): q4_0 / q4_1's own GEMVs (landed in e604010) without the
# L2 ask (their lm_head and gate_up were faster so, timed alone in call A) and with the down projection
# left to the Triton kernel (1 us faster there, timed alone). After trees: main with each edit alone
# (AFTER_EDIT). The Q4_0 and Q4_1 files at batch 1 on main, no-ask and triton-down, in that order.
# Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c37e 330
call_start
peer_start
MAKE_CORES=4-9 make_8b_files Q4_0 &
MAKE_CORES=10-15 make_8b_files Q4_1 &
AFTER_EDIT='sed -i "s/begin_block<MODE, true, true>/begin_block<MODE, false, true>/" backends/nvidia/gemv/gemv.cu' \
  install_after
mv /tmp/after /tmp/after-no-ask && mv /tmp/after-site /tmp/after-site-no-ask
AFTER_EDIT='sed -i "s/Gemv(\"q40\", 256, 16384/Gemv(\"q40\", 256, 8192/; s/Gemv(\"q41\", 256, 16384/Gemv(\"q41\", 256, 8192/" backends/nvidia/gemv/kernel.py' \
  install_after
grep -c "begin_block<MODE, false, true>" /tmp/after-no-ask/backends/nvidia/gemv/gemv.cu >> $R/env.txt
grep -n "Gemv(\"q4" /tmp/after/backends/nvidia/gemv/kernel.py >> $R/env.txt
for t in Q4_0 Q4_1; do
  wait_model $t
  file_step anydev-$t-main 40 $G/llama-8b-$t.gguf 1
  (cd /tmp/after-no-ask && PYTHONPATH=/tmp/after-site-no-ask:$SITE file_step anydev-$t-no-ask 40 $G/llama-8b-$t.gguf 1)
  in_after file_step anydev-$t-triton-down 40 $G/llama-8b-$t.gguf 1
done
summary
call_end
