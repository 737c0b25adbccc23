#!/usr/bin/env bash
# Prepared in session 23 for the next device call (issues 31 and 33), tree main, with .prev/ the branch
# core-busy-events (`git archive core-busy-events --prefix=.prev/ | tar x`, then a TREE file):
#   1. conformance on nvidia for q6_k_split, whose tl.dot tile (halves joined, the weights first) no
#      GPU has checked yet (session 23 call E timed it only);
#   2. the q6_k_split batch-1 plan sweep of the 8B GEMMs (the H100 has no recorded plans of it);
#   3. issue 33: anydev serve against offline at 256 streams / 4 front ends, main and the branch (the
#      core reads its socket's event flags on a busy step instead of polling), alternating, three
#      runs each: single runs spread by 0.77-0.90x on one machine in session 23.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-560}; T0=$SECONDS
trap 'tar czf $OUT/c24a.tgz -C $OUT r; exit 143' TERM
touch $LOG
source parts/step.sh
call_start
install_prev
( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG ) &
MAKE=$!
step conf-q6-split 100 taskset -c 0-1 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-q6-split.json -- \
  -k "kernels and quantized_linear and q6_k_split" -rA
step sweep-q6_k_split-b1 120 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
  --sweep --sweep-batches 1 --sweep-formats q6_k_split --table-out $R/plans-q6_k_split-b1.txt --out $R/sweep-q6_k_split-b1.json
wait $MAKE
SV=(benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512
    --batch 256 --max-num-seqs 256 --api-server-count 4)
for i in 1 2 3; do
  step serve-256-main-$i 55 python3 "${SV[@]}" --out $R/serve-256-main-$i.json
  (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step serve-256-branch-$i 55 python3 $OLDPWD/.prev/"${SV[0]}" "${SV[@]:1}" \
    --out $R/serve-256-branch-$i.json)
done
grep -h "passed\|failed\|best \|server / offline" $R/conf-*.txt $R/sweep-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
tar czf $OUT/c24a.tgz -C $OUT r && rm -rf $R
echo "call 24a done in $((SECONDS - T0)) s" | tee -a $LOG
