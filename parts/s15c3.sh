#!/usr/bin/env bash
# Session 15, one call on a fresh H200: llama.cpp built on cores 2-15 while anydev decodes the 8B GGUF files on
# cores 0-1 (gguf_peer_bench --skip-llamacpp, batch 1 and 32), then llama.cpp's benchmarks on the same files
# (--skip-anydev, with its time to first token): both engines in one call, not at the same time. Issue 31.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-575}; T0=$SECONDS
source parts/step.sh
source scripts/device_setup.sh > $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
{ date -u; nvidia-smi -L; nproc; } >> $R/env.txt 2>&1
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 2-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
FORMATS=(Q4_K Q8_0 Q4_0 Q6_K Q4_1)
for t in "${FORMATS[@]}"; do
  step make-$t 60 taskset -c 0-1 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" --gguf $t
  step anydev-$t 75 taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf --device nvidia \
    --batch-sizes 1,32 --repeats 2 --skip-llamacpp --out $R/anydev-$t.json
done
wait
for t in "${FORMATS[@]}"; do
  [[ -x $B/bin/llama-bench ]] || break
  step llamacpp-$t 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf --llamacpp $B --batch-sizes 1,32 \
    --skip-anydev $([[ $t == Q4_K ]] && echo --ttft) --out $R/llamacpp-$t.json
done
grep -h "anydev llama\|llama.cpp" $R/anydev-*.txt $R/llamacpp-*.txt >> $LOG
tar czf $OUT/c3.tgz -C $OUT r && rm -rf $R
echo "call done in $((SECONDS - T0)) s" | tee -a $LOG
