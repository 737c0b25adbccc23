#!/usr/bin/env bash
# Lead's first record run of session 7 (one H200): the rewritten GEMV/dot weight loading (variants
# under .rec/var: before = d9f4f45's kernels, words/bytes = two q4_k GEMV shapes), side by side.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run10.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name: $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
cp .rec/linear_bench.py benchmarks/linear_bench.py
use() { cp .rec/var/$1/*.py backends/triton_kernels/; }
ALL=dense,int8,fp8_e4m3,q4_k,q6_k,q8_0
use words
step conf-words 110 python3 -m anydev.conformance --device nvidia -- -k "linear or attention or prefill or decode"
step lin-words 150 python3 benchmarks/linear_bench.py --device nvidia --models 8B --formats $ALL --out $R/lin-words.json
use bytes
step lin-bytes 45 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --formats q4_k --out $R/lin-bytes.json
use before
step lin-before 110 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --formats $ALL --out $R/lin-before.json
use words
step sweep-words 100 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-formats q4_k,int8,fp8_e4m3 --out $R/sweep-words.json
