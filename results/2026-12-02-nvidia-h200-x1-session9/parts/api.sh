#!/usr/bin/env bash
# Issue 33's GPU target, logprobs: decode at saturation with logprobs=5 on every request beside the same
# run without (target >= 0.9x), the 1B shape, batch 64 and 256, three rounds in alternating order each.
# Run from the repo root after `source scripts/device_setup.sh`; writes $OUT/r/api-*.{json,txt}; < 3 min.
# (The structured-output target is not measured: structured output is not built yet.)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/api-steps.txt; }
LP=(--device nvidia --prompt-len 128 --new-tokens 128 --logprobs 5 --repeats 3)
step api-logprobs-b64 70 python3 benchmarks/logprobs_bench.py "${LP[@]}" --batch 64 --out $R/api-logprobs-b64.json
step api-logprobs-b256 90 python3 benchmarks/logprobs_bench.py "${LP[@]}" --batch 256 --out $R/api-logprobs-b256.json
