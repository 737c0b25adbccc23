#!/usr/bin/env bash
# Session 21, call A1 on the machine call A0 left warm (issues 31 and 33). llama.cpp's build and the
# random models A0 started are waited for through their marker files. anydev on cores 0-1:
#   1. the chosen plans of the 8B decode GEMMs at batch 1 (q8_0, q4_k, int8, fp8) without and with
#      prefetch 1, 2, 4 (linear_bench --prefetch);
#   2. the q8_0 and q4_k int8 tiles beside their float tiles at batch 32 (linear_bench --int8-tiles);
#   3. the 8B Q8_0 and Q4_K GGUF files end to end (gguf_peer_bench, batch 1 and 32) without and with
#      ANYDEV_TRITON_PREFETCH=2, then llama.cpp on the same files;
#   4. issue 33: anydev serve against offline at saturation, 512-token answers, 64 streams / 2 front
#      ends and 256 / 4 (all cores).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-470}; T0=$SECONDS
source parts/step.sh
call_start
B=/tmp/llamacpp-build; G=/tmp/g
wait_for() {   # wait_for FILE LIMIT: until FILE exists, at most LIMIT seconds
  local t=$SECONDS; while [[ ! -e $1 ]] && (( SECONDS - t < $2 )); do sleep 2; done
  echo "waited $((SECONDS - t)) s for $1: $(cat $1 2>/dev/null || echo missing)" | tee -a $LOG
}
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --skip-table --prefetch 1,2,4)
step pf-8b-b1 110 "${LB[@]}" --models 8B --sweep-batches 1 --sweep-formats q8_0,q4_k,int8,fp8_e4m3 \
  --out $R/pf-8b-b1.json
step int8-tiles-b32 40 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 32 \
  --formats q8_0,q4_k --int8-tiles --out $R/int8-tiles-b32.json
wait_for $G/done-Q4_K 60
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
e2e() {    # e2e FORMAT DISTANCE
  ANYDEV_TRITON_PREFETCH=$2 step e2e-$1-pf$2 45 "${PEER[@]}" $G/llama-8b-$1.gguf --out $R/e2e-$1-pf$2.json
}
e2e Q8_0 0; e2e Q8_0 2; e2e Q4_K 0; e2e Q4_K 2
wait_for /tmp/llamacpp-build.rc 60
cp /tmp/llamacpp-build.txt $R/build.txt 2>/dev/null
for t in Q8_0 Q4_K; do
  [[ -x $B/bin/llama-bench ]] || break
  step llamacpp-$t 30 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf --llamacpp $B --batch-sizes 1,32 \
    --skip-anydev --out $R/llamacpp-$t.json
done
wait_for $G/done-1b 10
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-64-fe2 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
grep -h "best\|anydev llama\|llama.cpp:\|server / offline" $R/pf-*.txt $R/int8-*.txt $R/e2e-*.txt \
  $R/llamacpp-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cA1.tgz -C $OUT r && rm -rf $R
echo "call A1 done in $((SECONDS - T0)) s" | tee -a $LOG
