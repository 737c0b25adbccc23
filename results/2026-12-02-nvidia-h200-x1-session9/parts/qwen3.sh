#!/usr/bin/env bash
# Session 9, issue 34 (model families): Qwen3 and Qwen3-MoE on one H200, bf16, random weights made in
# process. Run from the repo root after `source scripts/device_setup.sh`; writes $OUT/r/ (packed into
# $OUT/qwen3.tgz). Bounded to 235 s in all: each step gets at most its own limit and what is left.
#   decode-llama8b, decode-qwen3-8b: decode at batch 1 and 32 (context 256, 32 new tokens, decode
#     graphs), the Llama-3-8B shape beside the Qwen3-8B shape (target: Qwen3 within 5% of Llama);
#   decode-moe: a Qwen3-30B-A3B-shaped MoE with 8 of its 48 layers (hidden 2048, 32 heads of 128, 4 KV
#     heads, 128 experts of width 768, 8 active, vocab 151936; ~5.6 B parameters, 11 GB), batch 1 and
#     32, each row's weight reads and the active experts' GB/s (target at batch 1: >= 60% of HBM);
#   moe-bench: moe_route and moe_linear (Triton) beside their torch references at that expert shape;
#   conf-moe: the conformance kernels group's MoE checks on nvidia (every format and dtype).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
BUDGET=235
pack() { (cd $R && tar -czf $OUT/qwen3.tgz .); }
trap pack EXIT
step() {
    local name=$1 limit=$2; shift 2
    local left=$((BUDGET - SECONDS)); (( left < limit )) && limit=$left
    if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a $R/steps.txt; return; fi
    echo "\$ $*" >> $R/$name.txt; local t=$SECONDS
    timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1
    echo "$? $name ($((SECONDS - t)) s of $limit): $*" | tee -a $R/steps.txt
}
{ date -u; nvidia-smi -L; git rev-parse HEAD 2>/dev/null || cat .rec/commit 2>/dev/null; } > $R/env.txt 2>&1
DECODE=(--device nvidia --contexts 256 --prefill-len 0 --new-tokens 32 --modes graphs --hf none --no-kernel-count
        --batch-sizes 1,32)
step decode-llama8b 45 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape 8b --out $R/decode-llama8b.json
step decode-qwen3-8b 45 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape qwen3-8b --out $R/decode-qwen3-8b.json
step decode-moe 50 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape qwen3-30b-a3b --layers 8 --out $R/decode-moe.json
step moe-bench 25 python3 benchmarks/moe_bench.py --device nvidia --out $R/moe-bench.json
step conf-moe 70 python3 -m anydev.conformance --device nvidia --report $R/conf-moe.json -- -k moe -rA
