#!/usr/bin/env bash
# Session 26, call D (issues 33 and 31), this tree. Calls A and C (H100): the served run's prefill
# steps take 1.35x offline's at 256 and 64 streams, its decode steps 1.01-1.03x; the core loop's own
# work is ~0.2 ms a prefill step. Is a 512-token step host-bound, and slowed by the other processes
# (front ends, clients) that keep the host's cores busy?
#   1. parts/offline_load.py: the offline run alone (cores 0-3), then with busy loops on cores 4-13;
#   2. core_step_cost at 256 streams of 512-token prompts in 512-token steps, both runs warm now, with
#      the garbage collector's pauses;
#   3. serve_bench 256 streams / 4 front ends with the clients pinned apart (cores 12-15, the server and
#      offline on 0-11), and at the engine's default 2048-token steps;
#   4. decode attention at batch 1 with 4 warps in the split launch (f6b162a's merge kept): the 1B step
#      profiled with PDL off at contexts 256 and 2048 (call C: 8 warps 6.35 / 10.66 us, 5cde3e9 5.67 /
#      10.97 us);
#   5. on an H200: the 8B Q4_K and Q8_0 files beside llama.cpp, 8B bf16 / int8 / fp8 and 1B bf16.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c26d 480
call_start
H200=0; nvidia-smi -L | grep -q H200 && H200=1
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
  if (( H200 )); then for t in Q4_K Q8_0; do taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf \
    "${SHAPE[@]}" --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done; fi ) &
for _ in $(seq 60); do grep -q " make-1b " $LOG && break; sleep 2; done
step offline-load 70 taskset -c 0-3 python3 parts/offline_load.py /tmp/llama-1b 4-14 1
step core-256 90 taskset -c 0-11 python3 benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 256 \
  --prompt-len 512 --output-len 128 --max-num-seqs 256 --max-num-batched-tokens 512 --deadline 60
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
  step decode-8b-quant 60 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b-quant.json
  step decode-1b 25 "${DB[@]}" --shape 1b --out $R/decode-1b.json
fi
SV=(taskset -c 0-11 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30
    --workloads saturate --output-len 512 --batch 256 --max-num-seqs 256 --api-server-count 4)
step serve-256-apart 70 "${SV[@]}" --client-cpus 12-15 --out $R/serve-256-apart.json
W4="import runpy, sys; sys.path.insert(0, 'benchmarks'); import anydev.backends.triton_kernels.attention_decode as a; a.ONE_WAVE_WARPS = 4; \
sys.argv = ['step_profile.py'] + sys.argv[1:]; runpy.run_path('benchmarks/step_profile.py', run_name='__main__')"
for ctx in 256 2048; do
  SPC=(--device nvidia --graphs --context $ctx --steps 8 --rows 12 --batch-sizes 1 --shape 1b)
  ANYDEV_TRITON_PDL=0 step w4-prof0-1b-c$ctx 40 taskset -c 0-1 python3 -c "$W4" "${SPC[@]}"
  ANYDEV_TRITON_PDL=0 step w8-prof0-1b-c$ctx 40 taskset -c 0-1 python3 benchmarks/step_profile.py "${SPC[@]}"
done
step serve-256-2048 70 "${SV[@]}" --client-cpus 12-15 --max-num-batched-tokens 2048 --out $R/serve-256-2048.json
grep -h "^run \|gc: \|^offline \|^served \|steps: \|server CPU\|server / offline\|mean decode step\|prefill seconds\|saturate \|anydev llama\|llama.cpp:\|device busy\|x (decode\|_decode_kernel  \|anydev graphs   decode" \
  $R/offline-load.txt $R/core-256.txt $R/serve-*.txt $R/anydev-*.txt $R/llamacpp-*.txt $R/decode-*.txt $R/*prof0-*.txt >> $LOG 2>/dev/null
call_end
