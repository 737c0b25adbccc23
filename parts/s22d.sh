#!/usr/bin/env bash
# Session 22, call D (issue 31): the 8B Q6_K GGUF file end to end with its projections in split rows
# (this tree, contract 1.11's q6_k_split) and in blocks (.prev/: main before it, installed apart), batch
# 1 and 32, beside llama.cpp on the same file; first conformance on nvidia for both split formats and
# linear_bench's q6_k and q6_k_split GEMMs. llama.cpp builds on cores 4-15 while anydev runs on cores
# 0-1 (the file is written on cores 2-3), then runs on the idle machine.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-560}; T0=$SECONDS
trap 'tar czf $OUT/cD.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 4-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-3 python3 benchmarks/make_random_model.py $G/llama-8b-Q6_K.gguf "${SHAPE[@]}" --gguf Q6_K \
    > $R/make-Q6_K.txt 2>&1; echo "$? make-Q6_K $SECONDS" >> $LOG ) &
MAKE=$!
step conf-split 100 taskset -c 0-1 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-split.json -- \
  -k "kernels and quantized_linear and split" -rA
step table-q6 60 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1,32 \
  --formats q6_k,q6_k_split --out $R/table-q6.json
wait $MAKE
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
step after-Q6_K 70 taskset -c 0-1 python3 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/after-Q6_K.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q6_K 70 taskset -c 0-1 python3 \
  $OLDPWD/.prev/"${PEER[0]}" "${PEER[@]:1}" $G/llama-8b-Q6_K.gguf --out $R/before-Q6_K.json)
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30)
step prof-Q6_K-b1 40 "${SP[@]}" --model $G/llama-8b-Q6_K.gguf --batch-sizes 1
wait
[[ -x $B/bin/llama-bench ]] && step llamacpp-Q6_K 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q6_K.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-Q6_K.json
grep -h "passed\|failed\|anydev llama\|llama.cpp:\|device busy\|GEMMs per" $R/conf-split.txt $R/table-q6.txt $R/after-*.txt $R/before-*.txt \
  $R/prof-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cD.tgz -C $OUT r && rm -rf $R
echo "call D done in $((SECONDS - T0)) s" | tee -a $LOG
