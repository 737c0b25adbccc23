#!/usr/bin/env bash
# Session 31, call B (issue 31, one H200; written in session 30), this tree: anydev beside llama.cpp on
# the same random 8B GGUF files, each pair in one run (gguf_peer_bench: 128-token prompts, 128 new
# tokens; llama.cpp's llama-bench tg128 and llama-batched-bench S_TG): Q4_K and Q8_0 at batch 1 and 32,
# Q6_K at batch 1; then the q4_k batch-32 plan sweep of the 8B GEMMs, its winners taken for one more
# Q4_K batch-32 run (--plans: not pasted into the tree), and the Q4_K batch-32 step profiled with PDL off.
# llama.cpp: llama-cpp-python 0.3.36's sources (../shared/tools/llamacpp-peer.sh fetch), built for
# sm_90 with CUDA 13.0 on the CPU machine (cuBLAS from NVIDIA's wheel; the GPU machine's own CUDA
# libraries load at run time). Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c31b 560
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG; ldd $B/bin/llama-bench > $R/peer-ldd.txt 2>&1 ) &
UNPACK=$!
make_models Q4_K Q8_0 Q6_K
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --llamacpp $B)
LLAMA_LIBS=$(peer_libs)
wait $UNPACK
for t in Q4_K Q8_0; do
  wait_model $t
  LD_LIBRARY_PATH=$LLAMA_LIBS step peer-$t 90 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-$t.gguf --out $R/peer-$t.json
done
wait_model Q6_K
LD_LIBRARY_PATH=$LLAMA_LIBS step peer-Q6_K-b1 50 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q6_K.gguf --out $R/peer-Q6_K-b1.json
step sweep-q4_k-b32 200 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
  --sweep --sweep-batches 32 --sweep-formats q4_k --table-out $R/plans-q4_k-b32.txt --out $R/sweep-q4_k-b32.json
if [[ -s $R/plans-q4_k-b32.txt ]]; then
  step swept-Q4_K-b32 40 taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp \
    --batch-sizes 32 --plans $R/plans-q4_k-b32.txt $G/llama-8b-Q4_K.gguf --out $R/swept-Q4_K-b32.json
fi
step prof-Q4_K-b32 40 env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs \
  --context 256 --steps 8 --rows 30 --batch-sizes 32 --model $G/llama-8b-Q4_K.gguf
grep -h "anydev llama\|llama.cpp:\|x (\|heuristic\|device busy" $R/peer-*.txt $R/swept-*.txt $R/sweep-*.txt \
  $R/prof-*.txt >> $LOG 2>/dev/null
call_end
