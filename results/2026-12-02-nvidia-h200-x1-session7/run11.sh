#!/usr/bin/env bash
# Lead's second record run of session 7 (one H200): batch-1 plan sweep of every format, the plans pasted
# into linear_plans.RECORDED on this copy, then the GEMM table, decode at the 8B and 1B shapes, the 8B
# Q4_K GGUF end to end, and the linear conformance checks.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run11.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name: $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .rec/commit; } > $R/env.txt 2>&1
ALL=dense,int8,fp8_e4m3,q4_k,q6_k,q8_0
step sweep 150 python3 benchmarks/linear_bench.py --device nvidia --skip-table --sweep --sweep-formats $ALL --table-out $R/plans-b1.txt --out $R/sweep.json
python3 - "$R/plans-b1.txt" <<'PY' >> $R/steps.txt 2>&1
import sys
p = "backends/triton_kernels/linear_plans.py"
s = open(p).read()
head = "RECORDED: dict[tuple[str, int, str, int, int], tuple[int, int, int, int, int, int]] = {"
s = s.replace(head + "}", head + "\n" + open(sys.argv[1]).read() + "}")
open(p, "w").write(s)
print("pasted", s.count("NVIDIA"), "plans")
PY
step linear 120 python3 benchmarks/linear_bench.py --device nvidia --formats $ALL --out $R/linear.json
DECODE=(--device nvidia --batch-sizes 1,32 --contexts 256 --prefill-len 0 --new-tokens 64 --modes graphs --hf none --no-kernel-count --quantizations none,int8,fp8)
step decode8b 150 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape 8b --out $R/decode8b.json
step decode1b 90 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape 1b --out $R/decode1b.json
f=/tmp/llama-8b-q4_k.gguf
step gguf 40 python3 benchmarks/make_random_model.py $f --hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256 --gguf Q4_K
step gguf 60 python3 examples/test_infer.py --device nvidia --model $f --max-new-tokens 256 --max-cache-len 1024 --prompt Hello
step conformance 150 python3 -m anydev.conformance --device nvidia -- -k "linear or attention"
