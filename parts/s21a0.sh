#!/usr/bin/env bash
# Session 21, call A0 on a fresh H200 (issue 31), short: session 20's call A on prefetch ended with the
# machine no longer answering and nothing back, so the first prefetching kernels run alone here, on the
# 1B's batch-1 GEMMs (linear_bench --prefetch 1,2,4, bit-identical outputs required), before the long
# call. It also starts, in their own sessions so that they outlive this call for call A1 on the warm
# machine: llama.cpp's build (cores 4-15; /tmp/llamacpp-build.rc when done) and the 8B Q8_0 and Q4_K
# random GGUF files, then the 1B random model (cores 2-3; /tmp/g/done-T when each is written).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-150}; T0=$SECONDS
source parts/step.sh
call_start
G=/tmp/g; mkdir -p $G
setsid nohup bash -c "taskset -c 4-15 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp /tmp/llamacpp-build \
  > /tmp/llamacpp-build.txt 2>&1; echo \$? > /tmp/llamacpp-build.rc" > /dev/null 2>&1 &
SHAPE="--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256"
setsid nohup bash -c "for t in Q8_0 Q4_K; do taskset -c 2-3 python3 benchmarks/make_random_model.py $G/llama-8b-\$t.gguf \
  $SHAPE --gguf \$t > $G/make-\$t.txt 2>&1; echo \$? > $G/done-\$t; done; taskset -c 2-3 python3 \
  benchmarks/make_random_model.py /tmp/llama-1b > $G/make-1b.txt 2>&1; echo \$? > $G/done-1b" > /dev/null 2>&1 &
step pf-1b-b1 90 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --skip-table --prefetch 1,2,4 \
  --models 1B --sweep-batches 1 --sweep-formats dense --out $R/pf-1b-b1.json
timeout 10 nvidia-smi --query-gpu=memory.used,temperature.gpu,clocks.sm --format=csv >> $R/env.txt 2>&1
grep -h "best\|prefetch\|identical" $R/pf-*.txt | head -40 >> $LOG
tar czf $OUT/cA0.tgz -C $OUT r && rm -rf $R
echo "call A0 done in $((SECONDS - T0)) s" | tee -a $LOG
