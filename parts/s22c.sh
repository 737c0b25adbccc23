#!/usr/bin/env bash
# Session 22, call C (issue 31): the 8B Q8_0 GGUF file end to end with its projections in split rows
# (this tree, contract 1.11's q8_0_split) and in blocks (.prev/: main before it, installed apart), batch
# 1 and 32, beside llama.cpp on the same file; conformance on nvidia for q8_0_split first. llama.cpp
# builds on cores 4-15 while anydev runs on cores 0-1 (the file is written on cores 2-3), then runs
# on the idle machine.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-560}; T0=$SECONDS
trap 'tar czf $OUT/cC.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 4-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-3 python3 benchmarks/make_random_model.py $G/llama-8b-Q8_0.gguf "${SHAPE[@]}" --gguf Q8_0 \
    > $R/make-Q8_0.txt 2>&1; echo "$? make-Q8_0 $SECONDS" >> $LOG ) &
MAKE=$!
step conf-split 100 taskset -c 0-1 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-split.json -- \
  -k "kernels and quantized_linear and q8_0" -rA
wait $MAKE
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
step after-Q8_0 70 taskset -c 0-1 python3 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --out $R/after-Q8_0.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q8_0 70 taskset -c 0-1 python3 \
  $OLDPWD/.prev/"${PEER[0]}" "${PEER[@]:1}" $G/llama-8b-Q8_0.gguf --out $R/before-Q8_0.json)
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30)
step prof-Q8_0-b1 60 "${SP[@]}" --model $G/llama-8b-Q8_0.gguf --batch-sizes 1
wait
[[ -x $B/bin/llama-bench ]] && step llamacpp-Q8_0 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q8_0.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-Q8_0.json
grep -h "passed\|failed\|anydev llama\|llama.cpp:\|device busy" $R/conf-split.txt $R/after-*.txt $R/before-*.txt \
  $R/prof-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cC.tgz -C $OUT r && rm -rf $R
echo "call C done in $((SECONDS - T0)) s" | tee -a $LOG
