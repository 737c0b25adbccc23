#!/usr/bin/env bash
# Session 32, call E (issue 31; the session's last 278 s of device time): parts/pending/decode-read-ahead.patch
# beside main (32fd5b6's kernels). In this order, each step skipped once BUDGET is spent: the 8B Q4_K
# file at batch 1 before and after; the conformance checks of decode attention and the engines' greedy
# tokens on the after tree; the 1B bf16 decode (64-wide heads) before and after. Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c32e 190
call_start
install_after parts/pending/decode-read-ahead.patch
G=/tmp/g; mkdir -p $G
make_models Q4_K
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count --shape 1b)
wait_model Q4_K
step anydev-Q4_K-b1 30 "${PEER[@]}" $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K-b1.json
after after-Q4_K-b1 30 "${PEER[@]}" $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K-b1.json
after conf-after 90 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-after.json \
  -- -k "kernels and (decode_attention or greedy)"
pkill -f "anydev.conformance"; sleep 1
step decode-1b 25 "${DB[@]}" --out $R/decode-1b.json
after after-decode-1b 25 "${DB[@]}" --out $R/after-decode-1b.json
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "anydev llama\|anydev graphs.*decode" $R/*Q4_K*.txt $R/*decode-*.txt >> $LOG 2>/dev/null
call_end
