#!/usr/bin/env bash
# Session 26, call B (issues 31 and 33), this tree, after s26a; on an H200 run parts/s25c.sh instead
# (its plan sweeps). Here:
#   1. f6b162a-8609cf7 at the batches that split in few partitions (batch 32: three) or none (256),
#      where the merge change alone applies: the 1B decode at batch 32 and 256, context 512, before
#      (.prev/ = 5cde3e9) and after, alternating twice, and the batch-32 step profiled both ways;
#   2. issue 33: serve_bench at 256 streams with 8 front ends instead of 4 (if s26a shows a front end
#      near 100% of a core, more of them should close the gap to offline).
# Carry .whl and .prev.
set -uo pipefail
source parts/step.sh
call_init c26b 400
call_start
install_prev
( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG ) &
DB=(--device nvidia --batch-sizes 32,256 --contexts 512 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --repeats 1
    --no-kernel-count --shape 1b)
for run in 1 2; do
  (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-decode-1b-$run 60 taskset -c 0-1 python3 \
    $OLDPWD/.prev/benchmarks/decode_bench.py "${DB[@]}" --out $R/before-decode-1b-$run.json)
  step after-decode-1b-$run 60 taskset -c 0-1 python3 benchmarks/decode_bench.py "${DB[@]}" --out $R/after-decode-1b-$run.json
done
SPC=(--device nvidia --graphs --context 512 --steps 8 --rows 12 --batch-sizes 32 --shape 1b)
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-prof-1b-b32 40 taskset -c 0-1 python3 \
  $OLDPWD/.prev/benchmarks/step_profile.py "${SPC[@]}")
step after-prof-1b-b32 40 taskset -c 0-1 python3 benchmarks/step_profile.py "${SPC[@]}"
wait
step serve-256-fe8 80 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 \
  --workloads saturate --output-len 512 --batch 256 --max-num-seqs 256 --api-server-count 8 --out $R/serve-256-fe8.json
grep -h "anydev graphs   decode\|_decode_kernel  \|device busy\|steps: \|server CPU\|server / offline\|saturate " \
  $R/*decode-*.txt $R/*prof-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
call_end
