#!/usr/bin/env bash
# Session 33, call B (issue 31): parts/pending/attention-whole-wide-tiles.patch (a sequence read whole by
# one program takes tiles of 128 keys, not 64) beside main. Call A timed decode attention with its cache
# read from HBM (parts/attn_cold.py): 128-key tiles took 256 keys of a 128-wide head in 6.7 us where
# main's path took 9.2. In this order, each step skipped once BUDGET is spent: the after tree's kernel
# compiled for sm_90 with the device's Triton (registers, spills); the whole path's tiles x warps from
# HBM; the 8B Q4_K file at batch 1 and 32, before and after (and after with 256-key tiles where the
# sweep favours them); the 1B bf16 decode before and after; the 8B bf16/fp8 decode before and after;
# the conformance checks of decode attention and the engines' greedy tokens on the after tree; then
# the q4_k GEMVs with their activations rounded beforehand (parts/rounded_upper_bound.py) beside main's.
# Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c33b 480
call_start
G=/tmp/g; mkdir -p $G
make_models Q4_K
install_after parts/pending/attention-whole-wide-tiles.patch
after attn-regs 40 python3 parts/attn_regs.py
after attn-whole 60 taskset -c 0-1 python3 parts/attn_cold.py --whole --out $R/attn-whole.json
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
wait_model Q4_K
step anydev-Q4_K 60 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K.json
after after-Q4_K 60 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K.json
WIDE=$(python3 -c "
import json; rows = json.load(open('$R/attn-whole.json'))
t = {r['whole_block_n']: r['cold_us'] for r in rows if (r['d'], r['context'], r['warps']) == (128, 256, 8)}
print(int(t.get(256, 99) + 0.3 < t.get(128, 0)))" 2>/dev/null)
if [[ $WIDE == 1 ]]; then
  after after-256-Q4_K-b1 35 taskset -c 0-1 python3 parts/with_attrs.py \
    anydev.backends.triton_kernels.attention_decode.WHOLE_BLOCK_N=256 -- benchmarks/gguf_peer_bench.py \
    --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1 $G/llama-8b-Q4_K.gguf --out $R/after-256-Q4_K-b1.json
fi
step decode-1b 25 "${DB[@]}" --shape 1b --out $R/decode-1b.json
after after-decode-1b 25 "${DB[@]}" --shape 1b --out $R/after-decode-1b.json
step decode-8b 65 "${DB[@]}" --shape 8b --quantizations none,fp8 --out $R/decode-8b.json
after after-decode-8b 65 "${DB[@]}" --shape 8b --quantizations none,fp8 --out $R/after-decode-8b.json
after conf-after 90 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-after.json \
  -- -k "kernels and (decode_attention or greedy)"
pkill -f "anydev.conformance"; sleep 1
install_after parts/experiments/q4k-rounded-once.patch
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --formats q4_k)
step lin-q4_k-b1 30 "${LB[@]}" --out $R/lin-q4_k-b1.json
after rounded-bound 30 taskset -c 0-1 python3 parts/rounded_upper_bound.py --device nvidia --models 8B --batches 1 \
  --formats q4_k --out $R/rounded-bound.json
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "GEMMs per token" $R/lin-*.txt $R/rounded-bound.txt >> $LOG 2>/dev/null
grep -h "anydev llama\|anydev graphs.*decode\|decode batch 1" $R/anydev-*.txt $R/after-*.txt $R/decode-*.txt \
  >> $LOG 2>/dev/null
call_end
