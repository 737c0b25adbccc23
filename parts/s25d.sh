#!/usr/bin/env bash
# Session 25, call D (issues 31 and 33), this tree, after call B (parts/s24b.sh):
#   1. the 1B bf16 at batch 1 with ANYDEV_TRITON_PDL 0 and 3, alternating twice (call B had 559 and
#      927 tok/s, each once: a 1.66x that a kernel-launch mode should not give a host-bound step);
#   2. issue 33's target: serve_bench against offline at 256 streams / 4 front ends and 64 / 2 (call B's
#      core_step_cost had served and offline steps equal at 256 streams).
set -uo pipefail
source parts/step.sh
call_init c25d 260
call_start
( taskset -c 4-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG ) &
MAKE=$!
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count --shape 1b)
for run in 1 2; do
  for m in 0 3; do ANYDEV_TRITON_PDL=$m step decode-1b-pdl$m-$run 30 "${DB[@]}" --out $R/decode-1b-pdl$m-$run.json; done
done
wait $MAKE
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-256 70 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256.json
step serve-64 50 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64.json
grep -h "anydev graphs   decode\|server / offline\|saturate " $R/decode-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
call_end
