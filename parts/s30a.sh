#!/usr/bin/env bash
# Session 30, call A (issue 31, one H200). "After" is this tree: decode attention reads a sequence of at
# most 3 keys per head element whole in one program of a split launch (session 28's sweep: 7.3 us
# against 10.0 at 128-wide heads and 256 keys); "before" is .prev/ (main, installed apart).
#   1. the whole conformance kernels group on the nvidia backend, this tree; the decode attention
#      check of the before tree too (so whichever tree lands, its GPU kernels have passed);
#   2. every format's 8B decode GEMMs at batch 1 (linear_bench: us and TB/s a GEMM, ms a token);
#   3. each open target's figure and what bounds it, in the order below (a step is skipped once BUDGET
#      is spent), profiled with programmatic dependent launch off (each kernel's device time its own,
#      not time spent waiting on the one before): the 8B Q4_K file at batch 1 (before and after) and
#      32, Q8_0 at batch 1, the 1B bf16 at batch 1 (before and after), the 8B fp8 at batch 1; then
#      8B bf16 / int8 / fp8 decoded.
# llama.cpp runs on the same Q4_K and Q8_0 files in this call (gguf_peer_bench --skip-anydev, apart from
# anydev's runs, so that a peer that fails to load costs no anydev figure): llama-cpp-python 0.3.36's
# sources, built for sm_90 with CUDA 13.0 on the CPU machine (cuBLAS from NVIDIA's wheel; the GPU
# machine's own CUDA libraries load at run time). Carry .whl, .prev and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c30a 585
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
make_models Q4_K Q8_0
# llama.cpp's CUDA libraries: the GPU machine's toolkit, else torch's wheels
NVLIB=$(python3 -c "import os, nvidia; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
LLAMA_LIBS=$B/bin:/usr/local/cuda/lib64:${NVLIB:-/nonexistent}
llamacpp() { LD_LIBRARY_PATH=$LLAMA_LIBS step llamacpp-$1 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$1.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$1.json; }
wait_model() { for _ in $(seq 90); do grep -q " make-$1 " $LOG && return; sleep 2; done; }
before() { (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step "$@"); }
step conf-kernels 200 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-kernels.json \
  -- -k kernels
grep -h "passed\|failed" $R/conf-kernels.txt | tail -2 >> $LOG
pkill -f "anydev.conformance"; sleep 1
PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256
      --steps 8 --rows 30)
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
DB=(benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0 --new-tokens 64
    --modes graphs --hf none --repeats 1 --no-kernel-count)
wait_model Q4_K
step anydev-Q4_K 45 taskset -c 0-1 python3 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K.json
before anydev-Q4_K-b1-before 30 taskset -c 0-1 python3 $OLDPWD/.prev/"${PEER[0]}" "${PEER[@]:1}" --batch-sizes 1 \
  $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K-b1-before.json
llamacpp Q4_K
step prof-Q4_K 45 "${PROF[@]}" --batch-sizes 1,32 --model $G/llama-8b-Q4_K.gguf
wait_model Q8_0
step anydev-Q8_0 35 taskset -c 0-1 python3 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0.json
llamacpp Q8_0
step prof-Q8_0-b1 30 "${PROF[@]}" --batch-sizes 1 --model $G/llama-8b-Q8_0.gguf
step decode-1b 20 taskset -c 0-1 python3 "${DB[@]}" --shape 1b --out $R/decode-1b.json
before decode-1b-before 20 taskset -c 0-1 python3 $OLDPWD/.prev/"${DB[0]}" "${DB[@]:1}" --shape 1b \
  --out $R/decode-1b-before.json
step prof-1b-b1 25 "${PROF[@]}" --batch-sizes 1
step lin-8b-b1 40 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 \
  --out $R/lin-8b-b1.json
step prof-fp8-b1 45 "${PROF[@]}" --batch-sizes 1 --shape 8b --quantization fp8
step decode-8b 90 taskset -c 0-1 python3 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
before conf-attn-before 40 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 4 \
  --report $R/conf-attn-before.json -- -k "kernels and paged_decode_attention"
grep -h "passed\|failed" $R/conf-attn-before.txt | tail -2 >> $LOG
grep -h "llama.cpp:\|GEMMs per token\|anydev llama\|anydev graphs.*decode\|device busy" $R/lin-*.txt $R/anydev-*.txt $R/llamacpp-*.txt $R/decode-*.txt \
  $R/prof-*.txt >> $LOG 2>/dev/null
call_end
