#!/usr/bin/env bash
# Session 23, call C (issues 33 and 31), tree main: where the served core's time goes at 256 streams.
# Call A found a 1 ms switch interval slowing both the server and the offline engine (their threads
# share the GIL). Here, each a serve_bench run of its own (server and offline in the same run, 256
# streams / 4 front ends, 512-token answers): the default again; a 20 ms switch interval (fewer forced
# hand-offs); the rank in a process of its own (--executor processes: no GIL shared with the core's
# loop). Then 64 / 2 with the better one. Before them, on cores 0-1 while the 1B model is written: the
# q4_k batch-1 plan sweep of the 8B GEMMs (1 to 8 warps), which the H100 has no recorded plans of.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-450}; T0=$SECONDS
trap 'tar czf $OUT/cC.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG ) &
MAKE=$!
step sweep-q4_k-b1 110 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep \
  --sweep-batches 1 --sweep-formats q4_k --table-out $R/plans-q4_k-b1.txt --out $R/sweep-q4_k-b1.json
wait $MAKE
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
S256=(--batch 256 --max-num-seqs 256 --api-server-count 4)
step serve-256 60 "${SV[@]}" "${S256[@]}" --out $R/serve-256.json
mkdir -p /tmp/sc && echo 'import sys; sys.setswitchinterval(0.02)' > /tmp/sc/sitecustomize.py
PYTHONPATH=/tmp/sc:$PYTHONPATH python3 -c "import sys; print('switch interval with /tmp/sc:', sys.getswitchinterval())" >> $R/env.txt 2>&1
PYTHONPATH=/tmp/sc:$PYTHONPATH step serve-256-si20ms 60 "${SV[@]}" "${S256[@]}" --out $R/serve-256-si20ms.json
step serve-256-procs 75 "${SV[@]}" "${S256[@]}" --executor processes --out $R/serve-256-procs.json
step serve-64-procs 60 "${SV[@]}" --batch 64 --api-server-count 2 --executor processes --out $R/serve-64-procs.json
step serve-64 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64.json
grep -h "best \|server / offline\|saturate " $R/sweep-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cC.tgz -C $OUT r && rm -rf $R
echo "call C done in $((SECONDS - T0)) s" | tee -a $LOG
