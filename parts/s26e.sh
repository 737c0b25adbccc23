#!/usr/bin/env bash
# Session 26, call E (issue 33), this tree: serve_bench saturate with the client processes pinned apart
# (cores 12-15; the server and the offline run on 0-11), as call D ran it at 256 streams / 4 front ends
# (1.00x): now 64 streams / 2 front ends, then 256 / 4 again if time is left.
set -uo pipefail
source parts/step.sh
call_init c26e 100
call_start
taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
SV=(taskset -c 0-11 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30
    --workloads saturate --output-len 512 --client-cpus 12-15)
step serve-64-apart 40 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-apart.json
step serve-256-apart 45 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-apart.json
grep -h "steps: \|server CPU\|saturate \|x$" $R/serve-*.txt >> $LOG 2>/dev/null
call_end
