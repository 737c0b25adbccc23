#!/usr/bin/env bash
# Session 30, call C (issue 31, one H200): call A cut to the device time left (about 270 s of command).
# "After" is this tree (decode attention reads a sequence of at most 3 keys per head element whole in
# one program of a split launch); "before" is .prev/ (main without it, installed apart).
#   1. the whole conformance kernels group on the nvidia backend, this tree;
#   2. the 8B Q4_K file at batch 1, after and before, and llama.cpp on the same file (its sources from
#      llama-cpp-python 0.3.36, built for sm_90 with CUDA 13.0 on the CPU machine);
#   3. its batch-1 step profiled with programmatic dependent launch off.
# Each step is skipped once BUDGET is spent. Carry .whl, .prev and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c30c 265
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
( taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-Q4_K.gguf --hidden 4096 --layers 32 --heads 32 \
    --kv-heads 8 --intermediate 14336 --vocab 128256 --gguf Q4_K > $R/make-Q4_K.txt 2>&1; echo "$? make-Q4_K $SECONDS" >> $LOG ) &
step conf-kernels 200 taskset -c 0-13 python3 -m anydev.conformance --device nvidia -n 14 --report $R/conf-kernels.json \
  -- -k kernels
grep -h "passed\|failed" $R/conf-kernels.txt | tail -2 >> $LOG
pkill -f "anydev.conformance"
for _ in $(seq 60); do grep -q " make-Q4_K " $LOG && break; sleep 2; done
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1 $G/llama-8b-Q4_K.gguf)
step anydev-Q4_K-b1 30 taskset -c 0-1 python3 "${PEER[@]}" --out $R/anydev-Q4_K-b1.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step anydev-Q4_K-b1-before 30 taskset -c 0-1 python3 $OLDPWD/.prev/"${PEER[0]}" \
  "${PEER[@]:1}" --out $R/anydev-Q4_K-b1-before.json)
NVLIB=$(python3 -c "import os, nvidia; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
LD_LIBRARY_PATH=$B/bin:/usr/local/cuda/lib64:${NVLIB:-/nonexistent} step llamacpp-Q4_K 25 python3 benchmarks/gguf_peer_bench.py \
  $G/llama-8b-Q4_K.gguf --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-Q4_K.json
step prof-Q4_K-b1 30 env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs \
  --context 256 --steps 8 --rows 30 --batch-sizes 1 --model $G/llama-8b-Q4_K.gguf
grep -h "llama.cpp:\|anydev llama\|device busy" $R/anydev-*.txt $R/llamacpp-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
call_end
