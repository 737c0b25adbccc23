#!/usr/bin/env bash
# Session 20, call A on a fresh H200 (issue 31): weight prefetch into L2 (cp.async.bulk.prefetch, D steps
# ahead of a GEMV's loads). llama.cpp built on cores 2-15 meanwhile; anydev on cores 0-1:
#   1. the chosen plans of the 8B decode GEMMs at batch 1 (dense, int8, fp8, q8_0, q4_k, q6_k) and of the
#      1B's (dense) without and with prefetch 1, 2, 4 (linear_bench --prefetch); batch 32 for q8_0/q4_k;
#   2. the 8B Q8_0 and Q4_K GGUF files end to end (gguf_peer_bench, batch 1 and 32) without and with
#      ANYDEV_TRITON_PREFETCH, and with programmatic dependent launch; then llama.cpp on the same files.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 2-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q8_0 Q4_K; do taskset -c 0-1 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
MAKES=$!
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --skip-table --prefetch 1,2,4)
step pf-8b-b1 170 "${LB[@]}" --models 8B --sweep-batches 1 --sweep-formats q8_0,q4_k,dense,int8,fp8_e4m3,q6_k \
  --out $R/pf-8b-b1.json
step pf-1b-b1 40 "${LB[@]}" --models 1B --sweep-batches 1 --sweep-formats dense --out $R/pf-1b-b1.json
step pf-8b-b32 60 "${LB[@]}" --models 8B --sweep-batches 32 --sweep-formats q8_0,q4_k --sweep-gemms gate_up,down,qkv \
  --out $R/pf-8b-b32.json
wait $MAKES
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
for run in Q8_0:0:0 Q8_0:2:0 Q4_K:0:0 Q4_K:2:0 Q8_0:2:1 Q8_0:4:0 Q4_K:4:0 Q8_0:0:1; do
  IFS=: read t d pdl <<< "$run"
  ANYDEV_TRITON_PREFETCH=$d ANYDEV_TRITON_PDL=$pdl step e2e-$t-pf$d-pdl$pdl 50 "${PEER[@]}" $G/llama-8b-$t.gguf \
    --out $R/e2e-$t-pf$d-pdl$pdl.json
  if [[ $run == Q4_K:2:0 ]]; then wait; fi     # llama.cpp's build is done by now: its runs come next
  if [[ $run == Q4_K:2:0 && -x $B/bin/llama-bench ]]; then
    for f in Q8_0 Q4_K; do
      step llamacpp-$f 30 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$f.gguf --llamacpp $B --batch-sizes 1,32 \
        --skip-anydev --out $R/llamacpp-$f.json
    done
  fi
done
grep -h "best\|anydev llama\|llama.cpp:" $R/pf-*.txt $R/e2e-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cA.tgz -C $OUT r && rm -rf $R
echo "call A done in $((SECONDS - T0)) s" | tee -a $LOG
