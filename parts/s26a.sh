#!/usr/bin/env bash
# Session 26, call A (issues 33 and 31), this tree (PDL 3 by default on sm_90; the engine's steps in
# /metrics, which serve_bench reads for both saturate rows):
#   1. issue 33: serve_bench at 256 streams / 4 front ends and 64 / 2, each against offline in the same
#      run, now with each run's prefill steps and seconds and its mean decode step (session 25: 0.87x
#      at 256 with equal core steps in core_step_cost: which part of the run is slower?);
#   2. issue 31 on an H200 (the targets' card): the 8B Q4_K and Q8_0 files at batch 1 and 32 beside
#      llama.cpp (carried: .peer/llamacpp-bin.tar.xz), the 8B bf16 / int8 / fp8 and 1B bf16 at batch 1;
#      and on either the Q4_K batch-1 step profiled under PDL 3 (device time per kernel);
#   3. (run before 2) f6b162a, decode attention's split launch (the merge's loads at once, 8 warps, no
#      spills), against .prev/ = 5cde3e9 (before it): the 1B batch-1 step profiled at contexts 256 and
#      2048 (the kernel's device time) and decoded at 2048, before and after.
# Carry .whl, .peer/llamacpp-bin.tar.xz and .prev (git archive 5cde3e9 ..., as session 25 made it).
# The 8B files are written on cores 14-15 while serve_bench runs on 0-13.
set -uo pipefail
source parts/step.sh
call_init c26a 540
call_start
install_prev
H200=0; nvidia-smi -L | grep -q H200 && H200=1
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
  for t in Q4_K Q8_0; do taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
for _ in $(seq 60); do grep -q " make-1b " $LOG && break; sleep 2; done
SV=(taskset -c 0-13 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-256 70 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256.json
step serve-64 50 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64.json
wait
DB1=(--device nvidia --batch-sizes 1 --contexts 2048 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --repeats 1
     --no-kernel-count --shape 1b)
for run in 1 2; do
  (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-decode-1b-c2048-$run 30 taskset -c 0-1 python3 \
    $OLDPWD/.prev/benchmarks/decode_bench.py "${DB1[@]}" --out $R/before-decode-1b-c2048-$run.json)
  step after-decode-1b-c2048-$run 30 taskset -c 0-1 python3 benchmarks/decode_bench.py "${DB1[@]}" \
    --out $R/after-decode-1b-c2048-$run.json
done
for ctx in 256 2048; do
  SPC=(--device nvidia --graphs --context $ctx --steps 8 --rows 12 --batch-sizes 1 --shape 1b)
  (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-prof-1b-c$ctx 40 taskset -c 0-1 python3 \
    $OLDPWD/.prev/benchmarks/step_profile.py "${SPC[@]}")
  step after-prof-1b-c$ctx 40 taskset -c 0-1 python3 benchmarks/step_profile.py "${SPC[@]}"
done
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30 --batch-sizes 1)
if (( H200 )); then
  for t in Q4_K Q8_0; do
    step anydev-$t 60 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-$t.gguf --out $R/anydev-$t.json
    LD_LIBRARY_PATH=$B/bin step llamacpp-$t 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf \
      --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$t.json
  done
  DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
      --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
  step decode-8b-quant 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b-quant.json
  step decode-1b 40 "${DB[@]}" --shape 1b --out $R/decode-1b.json
fi
step prof-Q4_K-b1 40 "${SP[@]}" --model $G/llama-8b-Q4_K.gguf
grep -h "steps: \|server CPU\|server / offline\|mean decode step\|prefill seconds\|saturate \|anydev llama\|llama.cpp:\|device busy\|x (decode\|_decode_kernel  \|anydev graphs   decode" \
  $R/serve-*.txt $R/anydev-*.txt $R/llamacpp-*.txt $R/*decode-*.txt $R/*prof-*.txt >> $LOG 2>/dev/null
call_end
