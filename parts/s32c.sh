#!/usr/bin/env bash
# Session 32, call C (issue 31): main's final tree. In this order, each step skipped once BUDGET is
# spent: the conformance kernels group (now with every recorded linear plan, the H200's included, run at
# its own shape); the 8B Q4_K file at batch 1 and 32 beside llama.cpp (the two batch-32 plans swept in
# call B now recorded); the 8B int8 and fp8 batch-1 plan sweep (no H100 plans are recorded for them),
# then the 8B bf16/int8/fp8 decode, and int8/fp8 again on the sweep's plans (--plans: not in the tree).
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c32c 470
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
make_models Q4_K
step conf-final 300 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-final.json \
  -- -k kernels
pkill -f "anydev.conformance"; sleep 1
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count --shape 8b)
wait_model Q4_K
step anydev-Q4_K 40 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K.json
LD_LIBRARY_PATH=$(peer_libs) step llamacpp-Q4_K 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q4_K.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-Q4_K.json
step sweep-8bit-b1 170 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
  --sweep --sweep-batches 1 --sweep-formats int8,fp8_e4m3 --table-out $R/plans-8bit-b1.txt --out $R/sweep-8bit-b1.json
step decode-8b 90 "${DB[@]}" --quantizations none,int8,fp8 --out $R/decode-8b.json
if [[ -s $R/plans-8bit-b1.txt ]]; then
  step swept-decode-8b 60 "${DB[@]}" --quantizations int8,fp8 --plans $R/plans-8bit-b1.txt --out $R/swept-decode-8b.json
fi
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "anydev llama\|llama.cpp:\|anydev graphs.*decode\|decode batch 1" $R/anydev-*.txt $R/llamacpp-*.txt \
  $R/*decode-*.txt >> $LOG 2>/dev/null
call_end
