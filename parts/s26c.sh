#!/usr/bin/env bash
# Session 26, call C (issues 33 and 31), this tree:
#   1. issue 33: core_step_cost at 256 streams of 512-token prompts on the 1B, now with the prompts'
#      steps broken down (call A: serve_bench's prefill seconds 1.36x offline at 256 and 64 streams,
#      its decode steps 1.01-1.03x), then the served core alone under cProfile (top functions);
#   2. f6b162a (decode attention: the merge at once, 8 warps at batch 1) against .prev/ = 5cde3e9:
#      the 1B batch-1 step profiled with PDL off (call A's profiles ran under PDL 3, where a kernel's
#      time includes its wait on the one before), contexts 256 and 2048; decoded at 256 twice each;
#   3. on an H200 (the targets' card): the 8B Q4_K and Q8_0 files at batch 1 and 32 beside llama.cpp,
#      the 8B bf16 / int8 / fp8 and the 1B bf16 at batch 1.
# Carry .whl, .peer/llamacpp-bin.tar.xz and .prev.
set -uo pipefail
source parts/step.sh
call_init c26c 540
call_start
install_prev
H200=0; nvidia-smi -L | grep -q H200 && H200=1
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
  if (( H200 )); then for t in Q4_K Q8_0; do taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf \
    "${SHAPE[@]}" --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done; fi ) &
for _ in $(seq 60); do grep -q " make-1b " $LOG && break; sleep 2; done
CS=(taskset -c 0-11 python3 benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 256
    --prompt-len 512 --output-len 128 --max-num-seqs 256 --deadline 60)
step core-256 80 "${CS[@]}"
step core-256-prof 60 "${CS[@]}" --skip-offline --profile $R/core-256.prof
python3 -c "import pstats; s = pstats.Stats('$R/core-256.prof'); s.sort_stats('tottime').print_stats(35); s.sort_stats('cumulative').print_stats(35)" \
  > $R/core-256-prof-top.txt 2>&1
DB1=(--device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --repeats 1
     --no-kernel-count --shape 1b)
for run in 1 2; do
  (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-decode-1b-c256-$run 30 taskset -c 0-1 python3 \
    $OLDPWD/.prev/benchmarks/decode_bench.py "${DB1[@]}" --out $R/before-decode-1b-c256-$run.json)
  step after-decode-1b-c256-$run 30 taskset -c 0-1 python3 benchmarks/decode_bench.py "${DB1[@]}" \
    --out $R/after-decode-1b-c256-$run.json
done
for ctx in 256 2048; do
  SPC=(--device nvidia --graphs --context $ctx --steps 8 --rows 12 --batch-sizes 1 --shape 1b)
  (cd /tmp && ANYDEV_TRITON_PDL=0 PYTHONPATH=/tmp/prev-site:$SITE step before-prof0-1b-c$ctx 40 taskset -c 0-1 python3 \
    $OLDPWD/.prev/benchmarks/step_profile.py "${SPC[@]}")
  ANYDEV_TRITON_PDL=0 step after-prof0-1b-c$ctx 40 taskset -c 0-1 python3 benchmarks/step_profile.py "${SPC[@]}"
done
if (( H200 )); then
  wait
  PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
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
grep -h "served - offline\|^offline \|^served \|prefill seconds\|anydev llama\|llama.cpp:\|device busy\|x (decode\|_decode_kernel  \|anydev graphs   decode" \
  $R/core-256.txt $R/anydev-*.txt $R/llamacpp-*.txt $R/*decode-*.txt $R/*prof0-*.txt >> $LOG 2>/dev/null
call_end
