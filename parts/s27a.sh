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
# the clients keep off 14-15 while the 8B files are written there
if (( H200 )); then make_models Q4_K Q8_0; CLIENTS=12-13; else make_models; CLIENTS=12-15; fi
SV=(taskset -c 0-11 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30
    --workloads saturate --output-len 512 --client-cpus $CLIENTS)
step serve-64-apart 50 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-apart.json
step serve-256-apart 70 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-apart.json
if (( H200 )); then
  wait
  gguf_peers Q4_K Q8_0
  step conf-kernels 200 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-kernels.json \
    -- -k kernels -v
  grep -h "passed\|failed" $R/conf-kernels.txt | tail -3 >> $LOG
fi
grep -h "steps: \|server CPU\|saturate \|x$\|anydev llama\|llama.cpp:\|anydev graphs   decode" \
  $R/serve-*.txt $R/anydev-*.txt $R/llamacpp-*.txt $R/decode-*.txt >> $LOG 2>/dev/null
call_end
