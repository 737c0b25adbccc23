#!/usr/bin/env bash
# Session 7, run 14 (last): q4_k GEMV variant b (per-step sums) and int8 GEMV by the exponent trick beside
# main's kernels; the int8 batch-32 tile sweep; where a quantized decode step's time goes (1B, step_profile);
# anydev serve and test_infer with quantized weights.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run14.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name: $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
use() { cp .rec/var/main/*.py backends/triton_kernels/; [ "$1" = main ] || cp .rec/var/$1/*.py backends/triton_kernels/; }
LB=(python3 benchmarks/linear_bench.py --device nvidia --batches 1)
use main;  step var-main 40 "${LB[@]}" --formats int8,q4_k --out $R/var-main.json
use q4kb;  step var-q4kb 40 "${LB[@]}" --formats q4_k --out $R/var-q4kb.json
           step var-q4kb-sweep 40 "${LB[@]}" --skip-table --sweep --sweep-formats q4_k --table-out $R/plans-q4kb.txt
use int8f; step var-int8f 30 "${LB[@]}" --formats int8 --out $R/var-int8f.json
use main
step make1b 30 python3 benchmarks/make_random_model.py /tmp/llama-1b
for q in none int8; do
    step profile-$q 40 python3 benchmarks/step_profile.py --device nvidia --batch-sizes 1 --graphs $([ $q = none ] || echo --quantization $q)
done
step infer-fp8 40 python3 examples/test_infer.py --device nvidia --model /tmp/llama-1b --quantization fp8 --max-new-tokens 64 --prompt Hello
step serve-fp8 60 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --quantization fp8 --case-deadline 40 --workloads saturate --batch 16 --output-len 64 --out $R/serve-fp8.json
step make1bq4k 30 python3 benchmarks/make_random_model.py /tmp/llama-1b-q4k.gguf --gguf Q4_K
step serve-q4k 60 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b-q4k.gguf --case-deadline 40 --workloads saturate --batch 16 --output-len 64 --out $R/serve-q4k.json
step tiles-int8 110 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 32 --sweep-formats int8 --table-out $R/plans-int8-b32.txt --out $R/tiles-int8.json
