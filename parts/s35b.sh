#!/usr/bin/env bash
# Session 35, call B (issue 31): the record of what bounds each target not met, on one card in one
# call (an H200 if one comes): the decode steps (1B bf16; 8B bf16, int8, fp8) at batch 1; the Q8_0 file
# at batch 1 and 32 beside llama.cpp; step profiles (PDL off, decode graphs: device time per kernel,
# the unprofiled wall a step) of the 1B, the 8B bf16 and fp8, and the Q8_0 file at batch 1; last the
# 8B GEMVs at batch 1 in every weight format (linear_bench: us and TB/s each).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c35b 550
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
MAKE_CORES=8-15 make_8b_files Q8_0 &
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
step decode-1b 35 "${DB[@]}" --shape 1b --out $R/decode-1b.json
step decode-8b 80 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256
      --steps 8 --rows 30)
step prof-1b-b1 40 "${PROF[@]}" --batch-sizes 1 --shape 1b
step prof-fp8-b1 60 "${PROF[@]}" --batch-sizes 1 --shape 8b --quantization fp8
step prof-bf16-8b-b1 60 "${PROF[@]}" --batch-sizes 1 --shape 8b
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
gguf_pair Q8_0 1,32
step prof-Q8_0-b1 70 "${PROF[@]}" --batch-sizes 1 --model $G/llama-8b-Q8_0.gguf
step lin-8b-b1 100 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 \
  --out $R/lin-8b-b1.json
grep -h "anydev graphs.*decode\|decode batch 1" $R/decode-*.txt >> $LOG 2>/dev/null
grep -h "device kernels\|wall" $R/prof-*.txt >> $LOG 2>/dev/null
grep -h "GEMMs per token\|a token" $R/lin-*.txt >> $LOG 2>/dev/null
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
