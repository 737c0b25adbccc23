#!/usr/bin/env bash
# Session 33, call A (issue 31; written in session 32): main's tree on whichever card comes (the issue's
# targets are an H200's; sessions 31-32 got only H100s, so an H200 run of this is the record the issue
# still lacks). In this order, each step skipped once BUDGET is spent: the whole conformance kernels group
# (every recorded linear plan at its shape among it); the 8B Q4_K, Q8_0 and Q6_K files at batch 1 and 32
# beside llama.cpp (each engine in a step of its own), and after the Q4_K pair the q4_k GEMVs at batch 1
# with their activations rounded beforehand (parts/rounded_upper_bound.py: what fusing the rounding into
# its producers could gain at most) beside main's; the 8B bf16/int8/fp8 decode at batch 1 in one
# process; the 1B bf16 decode; last, the q6_k batch-1 plan sweep (no H100 q6_k batch-1 plans are
# recorded; Q6_K tensors are in every Q4_K_M file) and the Q6_K file on its winners (--plans), then the
# 1B's bf16 batch-1 sweep and its decode on the winners (the 1B target is 1,400 tok/s on an H200).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c33a 555
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
make_models Q4_K Q8_0 Q6_K
kernels_group conf-main 240
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
gguf_pair Q4_K 1,32
install_after parts/experiments/q4k-rounded-once.patch
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --formats q4_k)
step lin-q4_k-b1 30 "${LB[@]}" --out $R/lin-q4_k-b1.json
after rounded-bound 30 taskset -c 0-1 python3 parts/rounded_upper_bound.py --device nvidia --models 8B --batches 1 \
  --formats q4_k --out $R/rounded-bound.json
gguf_pair Q8_0 1,32
gguf_pair Q6_K 1
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
step decode-8b 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b.json
step decode-1b 30 "${DB[@]}" --shape 1b --out $R/decode-1b.json
if nvidia-smi -L | grep -q H200; then      # the profiles an H200 record lacks come before the sweeps
  PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256
        --steps 8 --rows 30)
  step prof-Q4_K-b1 70 "${PROF[@]}" --batch-sizes 1 --model $G/llama-8b-Q4_K.gguf
  step prof-1b-b1 40 "${PROF[@]}" --batch-sizes 1
fi
step sweep-q6_k-b1 120 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
  --sweep --sweep-batches 1 --sweep-formats q6_k --table-out $R/plans-q6_k-b1.txt --out $R/sweep-q6_k-b1.json
if [[ -s $R/plans-q6_k-b1.txt ]]; then
  step swept-Q6_K-b1 35 "${PEER[@]}" --batch-sizes 1 --plans $R/plans-q6_k-b1.txt $G/llama-8b-Q6_K.gguf \
    --out $R/swept-Q6_K-b1.json
fi
step sweep-dense-1b 90 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 1B --skip-table \
  --sweep --sweep-batches 1 --sweep-formats dense --table-out $R/plans-dense-1b.txt --out $R/sweep-dense-1b.json
if [[ -s $R/plans-dense-1b.txt ]]; then
  step swept-decode-1b 30 "${DB[@]}" --shape 1b --plans $R/plans-dense-1b.txt --out $R/swept-decode-1b.json
fi
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "GEMMs per token" $R/lin-*.txt $R/rounded-bound.txt >> $LOG 2>/dev/null
grep -h "anydev llama\|llama.cpp:\|anydev graphs.*decode\|decode batch 1" $R/anydev-*.txt $R/llamacpp-*.txt \
  $R/swept-*.txt $R/decode-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
call_end
