#!/usr/bin/env bash
# Session 7, run 13: the attention checks on nvidia one by one (no xdist), main then d9f4f45's attention kernels.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run13.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name: $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
step attn-main 200 python3 -m anydev.conformance --device nvidia -n 0 -- -k "attention or prefill or decode" -v --durations=0
cp .rec/var/attn-before/*.py backends/triton_kernels/
step attn-before 150 python3 -m anydev.conformance --device nvidia -n 0 -- -k "attention or prefill or decode" -v --durations=0
