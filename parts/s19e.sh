#!/usr/bin/env bash
# Session 19, call E on a fresh H200 (issue 31): contract 1.11's silu_and_mul_linear (SwiGLU's activation
# fused into the down projection's GEMV) checked on nvidia; then llama.cpp built on cores 2-15 while anydev
# decodes the 8B Q4_K, Q8_0 and Q6_K GGUF files on cores 0-1, with the fused kernel and this session's
# plans ("after"), and Q4_K and Q8_0 also on the tree before the fused kernel (.prev/, installed apart in
# /tmp/prev-site: the plans, not the fusion); then llama.cpp's benchmarks on the same files. Batch 1, 32.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
source scripts/device_setup.sh > $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 2-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q4_K Q8_0 Q6_K; do taskset -c 0-1 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
MAKES=$!
step conf-fused 110 taskset -c 0-1 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-fused.json -- \
  -k "kernels and silu_and_mul_linear" -rA
wait $MAKES
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
for t in Q4_K Q8_0 Q6_K; do
  step after-$t 60 taskset -c 0-1 python3 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/after-$t.json
  if [[ $t != Q6_K ]]; then    # the before tree's own copy of the benchmark and package (cwd /tmp)
    (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-$t 60 taskset -c 0-1 python3 \
      $OLDPWD/.prev/"${PEER[0]}" "${PEER[@]:1}" $G/llama-8b-$t.gguf --out $R/before-$t.json)
  fi
done
wait
for t in Q4_K Q8_0 Q6_K; do
  [[ -x $B/bin/llama-bench ]] || break
  step llamacpp-$t 30 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf --llamacpp $B --batch-sizes 1,32 \
    --skip-anydev --out $R/llamacpp-$t.json
done
grep -h "passed\|failed\|anydev llama\|llama.cpp:" $R/conf-fused.txt $R/after-*.txt $R/before-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cE.tgz -C $OUT r && rm -rf $R
echo "call E done in $((SECONDS - T0)) s" | tee -a $LOG
