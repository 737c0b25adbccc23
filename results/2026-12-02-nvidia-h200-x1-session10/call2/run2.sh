#!/usr/bin/env bash
# Session 10, call 2, on the integrated tree (.stage/integ): issue 31's record (parts/h31.sh: conformance
# linear checks, the batch-1 GEMM table integer against float, llama.cpp beside anydev on four 8B GGUF
# files, the q6_k/q4_0 plan sweep), then issue 33's logprobs cost (api.sh). llama.cpp: call 1's build.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
ROOT=$PWD; cd .stage/integ && ln -sfn $ROOT/.whl .whl
mkdir -p $OUT/r
source scripts/device_setup.sh > $OUT/r/setup.txt 2>&1
mkdir -p /tmp/lb && cat $ROOT/.peer/lb/lb.txz.part-* | tar -xJ -C /tmp/lb && ls -la /tmp/lb/bin > $OUT/r/llama-bin.txt 2>&1
/tmp/lb/bin/llama-bench --help > /dev/null 2>> $OUT/r/llama-bin.txt; echo "llama-bench --help rc $?" >> $OUT/r/llama-bin.txt
LLAMA_BIN=/tmp/lb/bin H31_BUDGET=385 SKIP_SETUP=1 bash parts/h31.sh
R=$OUT/r
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/api-steps.txt; }
LP=(--device nvidia --prompt-len 128 --new-tokens 128 --logprobs 5 --repeats 3)
left=$((575 - SECONDS)); (( left > 150 )) && left=150
step api-logprobs-b64 $((left * 4 / 10)) python3 benchmarks/logprobs_bench.py "${LP[@]}" --batch 64 --out $R/api-logprobs-b64.json
left=$((580 - SECONDS)); (( left > 5 )) && step api-logprobs-b256 $left python3 benchmarks/logprobs_bench.py "${LP[@]}" --batch 256 --out $R/api-logprobs-b256.json
tail -30 $OUT/h31.log; cat $R/api-steps.txt 2>/dev/null; tail -6 $R/api-logprobs-b*.txt
(cd $OUT && tar -czf r.tgz r && rm -rf r)
