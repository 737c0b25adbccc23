#!/usr/bin/env bash
# Session 23, call B (issue 31): the batch-32 tiles of q4_k, q4_0 and q4_1 with the weights as the
# dot's first operand (this tree) against main before them (.prev/, 1beced2): conformance on nvidia for
# the formats whose tiles changed, then the 8B Q4_K and Q6_K GGUF files end to end (batch 1 and 32)
# before and after, the Q4_K batch-32 step profiled, and llama.cpp on the same files. llama.cpp builds
# on cores 4-15 while anydev runs on cores 0-1 (the files are written on cores 2-3), then runs on the
# idle machine.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-565}; T0=$SECONDS
trap 'tar czf $OUT/cB.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 4-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q4_K Q6_K; do taskset -c 2-3 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
MAKES=$!
step conf-q4 110 taskset -c 0-1 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-q4.json -- \
  -k "kernels and quantized_linear and (q4_k or q4_0 or q4_1 or q6_k)" -rA
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
for t in Q4_K Q6_K; do
  for _ in $(seq 90); do grep -q " make-$t " $LOG && break; sleep 2; done    # its file written
  bs=1,32; [[ $t == Q6_K ]] && bs=32     # Q6_K's batch-1 GEMV is unchanged
  step after-$t 70 taskset -c 0-1 python3 "${PEER[@]}" --batch-sizes $bs $G/llama-8b-$t.gguf --out $R/after-$t.json
  (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-$t 70 taskset -c 0-1 python3 \
    $OLDPWD/.prev/"${PEER[0]}" "${PEER[@]:1}" --batch-sizes $bs $G/llama-8b-$t.gguf --out $R/before-$t.json)
done
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30)
step prof-Q4_K-b32 50 "${SP[@]}" --model $G/llama-8b-Q4_K.gguf --batch-sizes 32
wait
for t in Q4_K Q6_K; do
  [[ -x $B/bin/llama-bench ]] && step llamacpp-$t 30 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf \
    --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$t.json
done
grep -h "passed\|failed\|anydev llama\|llama.cpp:\|device busy" $R/conf-q4.txt $R/after-*.txt $R/before-*.txt \
  $R/prof-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cB.tgz -C $OUT r && rm -rf $R
echo "call B done in $((SECONDS - T0)) s" | tee -a $LOG
