#!/usr/bin/env bash
# Session 8, run 15: 30c27fe/f6ec830/fe6c479's kernels against the reference on the H200 (conformance
# -k linear), every format end to end (perplexity of the tiny Llama carried in .rec/tiny-llama), the
# per-GEMM table at batch 1 and 32, and the 8B Q4_K GGUF through test_infer.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run15.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
step conf-linear 200 python3 -m anydev.conformance --device nvidia --report $R/conf-linear.json -- -k linear -rA
T=.rec/tiny-llama
step ppl 90 python3 benchmarks/perplexity.py --device nvidia --model $T --reference --gguf $(ls $T/*.gguf | paste -sd,) --out $R/ppl.json
step linear 150 python3 benchmarks/linear_bench.py --device nvidia --out $R/linear.json
f=/tmp/llama-8b-q4_k.gguf
step gguf 40 python3 benchmarks/make_random_model.py $f --hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256 --gguf Q4_K
step gguf 60 python3 examples/test_infer.py --device nvidia --model $f --max-new-tokens 256 --max-cache-len 1024 --prompt Hello
