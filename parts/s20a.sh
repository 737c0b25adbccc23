#!/usr/bin/env bash
# Session 20, call A on a fresh H200 (issue 31): weight prefetch into L2 (cp.async.bulk.prefetch, D steps
# ahead of a GEMV's loads; the first D before the programmatic-dependent-launch wait). llama.cpp built
# on cores 2-15 meanwhile; anydev on cores 0-1:
#   1. the chosen plans of the 8B decode GEMMs at batch 1 (q8_0, q4_k, dense, int8, fp8, q6_k) and of
#      the 1B's (dense; PDL off and on) without and with prefetch 1, 2, 4 (linear_bench --prefetch);
#      batch 32 for q8_0/q4_k;
#   2. the 8B Q8_0 and Q4_K GGUF files end to end (gguf_peer_bench, batch 1 and 32) without and with
#      ANYDEV_TRITON_PREFETCH, then llama.cpp on the same files;
#   3. the q8_0 and q4_k int8 tiles beside their float tiles at batch 32 (linear_bench --int8-tiles);
#   4. 1B bf16 decode at batch 1 (decode graphs): prefetch 0/2 x PDL 0/1; more GGUF distances last.
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
ANYDEV_TRITON_PDL=1 step pf-1b-b1-pdl1 40 "${LB[@]}" --models 1B --sweep-batches 1 --sweep-formats dense \
  --out $R/pf-1b-b1-pdl1.json
step pf-8b-b32 60 "${LB[@]}" --models 8B --sweep-batches 32 --sweep-formats q8_0,q4_k --sweep-gemms gate_up,down,qkv \
  --out $R/pf-8b-b32.json
step int8-tiles-b32 40 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 32 \
  --formats q8_0,q4_k --int8-tiles --out $R/int8-tiles-b32.json
wait $MAKES
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
e2e() {    # e2e FORMAT DISTANCE PDL
  ANYDEV_TRITON_PREFETCH=$2 ANYDEV_TRITON_PDL=$3 step e2e-$1-pf$2-pdl$3 50 "${PEER[@]}" $G/llama-8b-$1.gguf \
    --out $R/e2e-$1-pf$2-pdl$3.json
}
e2e Q8_0 0 0; e2e Q8_0 2 0; e2e Q4_K 0 0; e2e Q4_K 2 0
wait    # llama.cpp's build
for t in Q8_0 Q4_K; do
  [[ -x $B/bin/llama-bench ]] || break
  step llamacpp-$t 30 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf --llamacpp $B --batch-sizes 1,32 \
    --skip-anydev --out $R/llamacpp-$t.json
done
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 128 --modes graphs --hf none --repeats 2 --no-kernel-count)
for run in 0:0 2:0 2:1 0:1; do
  IFS=: read d pdl <<< "$run"
  ANYDEV_TRITON_PREFETCH=$d ANYDEV_TRITON_PDL=$pdl step decode-1b-pf$d-pdl$pdl 45 "${DB[@]}" --out $R/decode-1b-pf$d-pdl$pdl.json
done
e2e Q8_0 2 1; e2e Q8_0 4 0; e2e Q4_K 4 0
grep -h "best\|anydev llama\|llama.cpp:\|graphs \|GEMMs per token" $R/pf-*.txt $R/int8-*.txt $R/e2e-*.txt \
  $R/llamacpp-*.txt $R/decode-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cA.tgz -C $OUT r && rm -rf $R
echo "call A done in $((SECONDS - T0)) s" | tee -a $LOG
