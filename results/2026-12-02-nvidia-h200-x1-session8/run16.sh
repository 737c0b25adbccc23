#!/usr/bin/env bash
# Session 8, run 16: linear_bench's batch-32 tl.dot tile sweep on the 8B shape (64-plan grid, K split up
# to 8) for int8, fp8, q4_k and q8_0; the plans that beat the heuristic go into linear_plans.RECORDED.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run16.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
for f in int8:140 fp8_e4m3:140 q4_k:100 q8_0:130; do
    fmt=${f%:*}
    step tiles-$fmt ${f#*:} python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 32 \
        --sweep-formats $fmt --table-out $R/plans-$fmt.txt --out $R/tiles-$fmt.json
done
