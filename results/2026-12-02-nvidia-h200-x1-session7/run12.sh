#!/usr/bin/env bash
# Lead's third record run of session 7: the conformance linear and attention checks on nvidia with the
# recorded plans (the new GGUF GEMVs against their torch references on the H200).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run12.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name: $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
step conf-linear 330 python3 -m anydev.conformance --device nvidia --report $R/conf-linear.json -- -k linear -rA
step conf-attn 150 python3 -m anydev.conformance --device nvidia --report $R/conf-attn.json -- -k "attention or prefill or decode" -rA
