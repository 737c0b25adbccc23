#!/usr/bin/env bash
# Session 21, one call on a fresh H200 (issues 31 and 33): what session 20's calls A and D were to
# measure, in the one call this session's device time still allows. Session 20's call A ended with the
# machine no longer answering and nothing back, so the first prefetching kernels run alone first.
# llama.cpp builds on cores 4-15 and the random models are written on cores 2-3 meanwhile; anydev on
# cores 0-1:
#   1. the 1B's batch-1 GEMMs, then the 8B's (q8_0, q4_k, int8, fp8), without and with prefetch 1, 2,
#      4 (linear_bench --prefetch: the chosen plans, bit-identical outputs required);
#   2. the q8_0 and q4_k int8 tiles beside their float tiles at batch 32 (linear_bench --int8-tiles);
#   3. the 8B Q8_0 and Q4_K GGUF files end to end (gguf_peer_bench, batch 1 and 32) without and with
#      ANYDEV_TRITON_PREFETCH=2, then llama.cpp on the same files;
#   4. issue 33: anydev serve against offline at saturation, 512-token answers, 64 streams / 2 front
#      ends and 256 / 4 (all cores).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-530}; T0=$SECONDS
trap 'tar czf $OUT/cB.tgz -C $OUT r; exit 143' TERM     # cut short: what ran still comes back (8 files at most)
source parts/step.sh
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 4-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q8_0 Q4_K; do taskset -c 2-3 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done
  taskset -c 2-3 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG ) &
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --skip-table --prefetch 1,2,4)
step pf-1b-b1 60 "${LB[@]}" --models 1B --sweep-batches 1 --sweep-formats dense --out $R/pf-1b-b1.json
step pf-8b-b1 100 "${LB[@]}" --models 8B --sweep-batches 1 --sweep-formats q8_0,q4_k,int8,fp8_e4m3 --out $R/pf-8b-b1.json
step int8-tiles-b32 40 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 32 \
  --formats q8_0,q4_k --int8-tiles --out $R/int8-tiles-b32.json
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
for run in Q8_0:0 Q8_0:2 Q4_K:0 Q4_K:2; do
  IFS=: read t d <<< "$run"
  for _ in $(seq 60); do grep -q " make-$t " $LOG && break; sleep 2; done    # its file written
  ANYDEV_TRITON_PREFETCH=$d step e2e-$t-pf$d 45 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/e2e-$t-pf$d.json
done
wait    # the models and llama.cpp's build: nothing else runs beside the server's host-bound steps
for t in Q8_0 Q4_K; do
  [[ -x $B/bin/llama-bench ]] || break
  step llamacpp-$t 30 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf --llamacpp $B --batch-sizes 1,32 \
    --skip-anydev --out $R/llamacpp-$t.json
done
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-64-fe2 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
grep -h "best\|anydev llama\|llama.cpp:\|server / offline" $R/pf-*.txt $R/int8-*.txt $R/e2e-*.txt \
  $R/llamacpp-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cB.tgz -C $OUT r && rm -rf $R
echo "call B done in $((SECONDS - T0)) s" | tee -a $LOG
