#!/usr/bin/env bash
# Session 27, call A (issues 33 and 31), this tree:
#   1. issue 33: serve_bench saturate with the client processes pinned apart (cores 12-15; the server and
#      the offline run on 0-11), 64 streams / 2 front ends and 256 / 4 (session 26 call D: 256 / 4 read
#      1.00x apart, 0.82x with the clients beside the server; 64 / 2 not yet run apart);
#   2. on an H200 (issue 31's card): the 8B Q4_K and Q8_0 files at batch 1 and 32 beside llama.cpp
#      (carried: .peer/llamacpp-bin.tar.xz), the 8B bf16 / int8 / fp8 and 1B bf16 at batch 1, and the
#      whole kernels group of the conformance suite (issue 31's check of the GPU kernels on its card).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c27a 540
call_start
H200=0; nvidia-smi -L | grep -q H200 && H200=1
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
  if (( H200 )); then for t in Q4_K Q8_0; do taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf \
    "${SHAPE[@]}" --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done; fi ) &
for _ in $(seq 60); do grep -q " make-1b " $LOG && break; sleep 2; done
SV=(taskset -c 0-11 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30
    --workloads saturate --output-len 512 --client-cpus 12-15)
step serve-64-apart 50 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-apart.json
step serve-256-apart 70 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-apart.json
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
  step decode-8b-quant 70 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b-quant.json
  step decode-1b 30 "${DB[@]}" --shape 1b --out $R/decode-1b.json
  step conf-kernels 200 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-kernels.json \
    -- -k kernels -v
  grep -h "passed\|failed" $R/conf-kernels.txt | tail -3 >> $LOG
fi
grep -h "steps: \|server CPU\|saturate \|x$\|anydev llama\|llama.cpp:\|anydev graphs   decode" \
  $R/serve-*.txt $R/anydev-*.txt $R/llamacpp-*.txt $R/decode-*.txt >> $LOG 2>/dev/null
call_end
