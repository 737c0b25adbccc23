#!/usr/bin/env bash
# Session 15, call 1 on one H200: llama.cpp's build and the five 8B GGUF files in the background (cores
# 4-15, setsid: they outlast the call while the machine stays warm; the call meant to use them
# landed on a fresh machine, and parts/s15c3.sh builds and measures in one call instead), and on cores 0-3 the profiles that say
# what bounds each open target: quantized_embedding's conformance, the MoE decode step (issue 34), the 1B
# step with and without logprobs=5 at batch 64 (issue 33), structured output's host work at batch 32
# (issue 33), the 8B Q4_K and Q8_0 steps at batch 1 (issue 31). Bounded to BUDGET seconds.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-540}; T0=$SECONDS
source parts/step.sh
STEP_WRAP=(taskset -c 0-3)
{ date -u; nvidia-smi -L; nproc; df -h /tmp | tail -1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
echo "PYTHONPATH=$PYTHONPATH" > /tmp/s15-env
setsid nohup taskset -c 4-15 nice -n 5 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp /tmp/llamacpp-build \
  > /tmp/llamacpp-build.out 2>&1 < /dev/null &
G=/tmp/g; mkdir -p $G
SHAPE="--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256"
setsid nohup taskset -c 4-15 bash -c "for t in Q4_K Q8_0 Q6_K Q4_0 Q4_1; do s=\$SECONDS; python3 benchmarks/make_random_model.py \
  $G/llama-8b-\$t.gguf $SHAPE --gguf \$t > $G/make-\$t.txt 2>&1; echo \"\$? make \$t \$((SECONDS - s)) s\" >> $G/made.log; done" \
  > /dev/null 2>&1 < /dev/null &
step conf-embed 80 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-embed.json -- -k "kernels and embedding" -rA
PROF=(python3 benchmarks/step_profile.py --device nvidia --graphs --steps 8 --rows 30)
step prof-moe-b1 90 "${PROF[@]}" --shape qwen3-30b-a3b --layers 8 --batch-sizes 1 --context 256
step prof-1b-b64 60 "${PROF[@]}" --batch-sizes 64 --context 128
step prof-1b-b64-logprobs 60 "${PROF[@]}" --batch-sizes 64 --context 128 --logprobs 5
step structured-b32 70 python3 benchmarks/structured_bench.py --device nvidia --prompt-len 128 --new-tokens 128 \
  --vocab 32000 --repeats 2 --batch 32 --host-steps 60 --out $R/structured-b32.json
for t in Q4_K Q8_0; do
  while ! grep -q "make $t" $G/made.log 2>/dev/null && (( SECONDS - T0 < BUDGET - 60 )); do sleep 2; done
  step prof-$t-b1 75 "${PROF[@]}" --model $G/llama-8b-$t.gguf --batch-sizes 1 --context 128
done
cat $G/made.log >> $LOG 2>/dev/null; tail -3 /tmp/llamacpp-build.out >> $LOG 2>/dev/null
ls /tmp/llamacpp-build/bin 2>/dev/null | head -3 >> $LOG
grep -h "device busy\|kernels per" $R/prof-*.txt >> $LOG 2>/dev/null
tar czf $OUT/c1.tgz -C $OUT r && rm -rf $R
echo "call 1 done in $((SECONDS - T0)) s" | tee -a $LOG
