#!/usr/bin/env bash
# Session 33, call A (issue 31): main's tree on whichever card comes; each step skipped once BUDGET is spent.
# On an H200 (the issue's targets are an H200's; sessions 31-32 got only H100s) the record first: the
# whole conformance kernels group; the 8B Q4_K, Q8_0 and Q6_K files at batch 1 (and 32) beside llama.cpp
# (each engine in a step of its own); the 8B bf16/int8/fp8 decode at batch 1 in one process; the 1B
# decode; the Q4_K and 1B steps profiled. Then, on either card, two experiments:
# - decode attention with its keys and values read from HBM (parts/attn_cold.py: in a step each layer's
#   attention takes 11.4 us where the L2-hot sweep timed 7.3), on main and with attn-v-early.patch (the
#   values asked for with the keys), and that patch end to end on the Q4_K file at batch 1 and the 8B
#   bf16/fp8 decode beside main's;
# - the q4_k GEMVs at batch 1 with their activations rounded beforehand (parts/rounded_upper_bound.py:
#   what fusing the rounding into its producers could gain at most) beside main's.
# On an H100 the record's steps already run in session 32 on these kernels are skipped, but for the
# Q4_K pair (this call's baseline). Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c33a 555
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
H200=0; nvidia-smi -L | grep -q H200 && H200=1
make_models Q4_K Q8_0 Q6_K
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256
      --steps 8 --rows 30)
(( H200 )) && kernels_group conf-main 240
gguf_pair Q4_K 1,32
if (( H200 )); then
  gguf_pair Q8_0 1,32
  gguf_pair Q6_K 1
  step decode-8b 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
  step decode-1b 30 "${DB[@]}" --shape 1b --out $R/decode-1b.json
  step prof-Q4_K-b1 70 "${PROF[@]}" --batch-sizes 1 --model $G/llama-8b-Q4_K.gguf
  step prof-1b-b1 40 "${PROF[@]}" --batch-sizes 1
fi
step attn-cold 100 taskset -c 0-1 python3 parts/attn_cold.py --out $R/attn-cold.json
install_after parts/experiments/attn-v-early.patch
after after-attn-cold 100 taskset -c 0-1 python3 parts/attn_cold.py --out $R/after-attn-cold.json
after after-Q4_K-b1 35 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K-b1.json
step decode-8b-2 60 "${DB[@]}" --shape 8b --quantizations none,fp8 --out $R/decode-8b-2.json
after after-decode-8b 60 "${DB[@]}" --shape 8b --quantizations none,fp8 --out $R/after-decode-8b.json
install_after parts/experiments/q4k-rounded-once.patch
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --formats q4_k)
step lin-q4_k-b1 30 "${LB[@]}" --out $R/lin-q4_k-b1.json
after rounded-bound 30 taskset -c 0-1 python3 parts/rounded_upper_bound.py --device nvidia --models 8B --batches 1 \
  --formats q4_k --out $R/rounded-bound.json
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "GEMMs per token" $R/lin-*.txt $R/rounded-bound.txt >> $LOG 2>/dev/null
grep -h "anydev llama\|llama.cpp:\|anydev graphs.*decode\|decode batch 1" $R/anydev-*.txt $R/llamacpp-*.txt \
  $R/after-*.txt $R/decode-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
call_end
