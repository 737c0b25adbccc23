#!/usr/bin/env bash
# Session 8, run 17: split-K summed in the kernel (33d5256) checked against the reference (conformance
# -k linear) and timed beside the two-launch sum it replaces (.rec/var/before: 1943247's linear.py);
# then decode at the 8B and 1B shapes with run 16's batch-32 plans, two rounds in alternating order.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run17.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
step conf-linear 130 python3 -m anydev.conformance --device nvidia --report $R/conf-linear.json -- -k linear -rA
step linear 45 python3 benchmarks/linear_bench.py --device nvidia --formats dense,int8,fp8_e4m3,q4_k,q8_0 --out $R/linear.json
cp backends/triton_kernels/linear.py $R/linear-main.py.txt
cp .rec/var/before/linear.py backends/triton_kernels/linear.py
step linear-before 45 python3 benchmarks/linear_bench.py --device nvidia --formats dense,int8,fp8_e4m3,q4_k,q8_0 --out $R/linear-before.json
cp $R/linear-main.py.txt backends/triton_kernels/linear.py
DECODE=(--device nvidia --contexts 256 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --no-kernel-count --quantizations none,int8,fp8 --repeats 2)
step decode8b 230 python3 benchmarks/decode_bench.py "${DECODE[@]}" --batch-sizes 1,32 --shape 8b --out $R/decode8b.json
step decode1b 80 python3 benchmarks/decode_bench.py "${DECODE[@]}" --batch-sizes 1 --shape 1b --out $R/decode1b.json
