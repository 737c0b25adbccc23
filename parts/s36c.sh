#!/usr/bin/env bash
# Session 36's second call (issue 31): the issue's figures on this tree (main with what call b landed),
# each ratio within this call. In order, each step skipped once BUDGET is spent: the 1B and the 8B
# bf16 / fp8 decodes; the Q8_0 and Q4_K files at batch 1 and 32 beside llama.cpp; the Q6_K file at
# batch 1; the 8B int8 decode; profiles of the 1B and fp8 steps.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c36c 540
call_start
peer_start
MAKE_CORES=8-15 make_8b_files Q8_0 Q4_K Q6_K &
step gemv-check 40 taskset -c 0-1 python3 parts/gemv_check.py
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
step decode-1b 30 "${DB[@]}" --shape 1b --out $R/decode-1b.json
step decode-8b 110 "${DB[@]}" --shape 8b --quantizations none,fp8 --out $R/decode-8b.json
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
for t in Q8_0 Q4_K; do
  wait_model $t
  step anydev-$t 50 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-$t.gguf --out $R/anydev-$t.json
  llamacpp_step $t 1,32 30
done
wait_model Q6_K
step anydev-Q6_K 30 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K.json
llamacpp_step Q6_K 1 20
step decode-8b-int8 55 "${DB[@]}" --shape 8b --quantizations int8 --out $R/decode-8b-int8.json
PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs
      --context 256 --steps 8 --rows 30 --batch-sizes 1)
step prof-1b-b1 35 "${PROF[@]}" --shape 1b
step prof-fp8-b1 50 "${PROF[@]}" --shape 8b --quantization fp8
cat $R/gemv-check.txt >> $LOG
grep -h "anydev graphs.*decode\|decode step wall" $R/decode-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
for f in $R/anydev-*.txt $R/llamacpp-*.txt; do
  [ -f $f ] && echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
call_end
