#!/usr/bin/env bash
# Session 9, run 20 (first of two back-to-back calls): llama.cpp's build and the four 8B GGUF files started
# in the background (both outlast the call; run 21 uses them), then conformance -k linear, the batch-1 GEMM
# table with the integer-dot GEMVs and with main's float GEMVs (.before/: afcdfed's linear.py and
# linear_plans.py), the batch-1 plan sweep of q4_k and q8_0 (its table kept in /tmp for run 21), and greedy
# tokens of the tiny trained Llama's GGUF files, blocks kept against dequantized (.rec/tiny-llama).
# Run from .stage/h31 (the worktree copied into the lead's checkout), .whl linked beside it.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run20.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/steps.txt; }
PEER=$(cd ../../.peer && pwd)
setsid nohup bash $PEER/llamacpp-peer.sh build $PEER/llama.cpp /tmp/llamacpp-build > /tmp/llamacpp-build.out 2>&1 < /dev/null &
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .commit; nproc; df -h /tmp; cat $PEER/llama.cpp/SOURCE; } > $R/env.txt 2>&1
mkdir -p /tmp/gguf
SHAPE="--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256"
setsid nohup bash -c "for t in Q4_K Q8_0 Q6_K F16; do s=\$SECONDS; timeout 400 python3 benchmarks/make_random_model.py /tmp/gguf/llama-8b-\$t.gguf $SHAPE --gguf \$t || echo failed \$t; echo \$t \$((SECONDS - s)) s; done; touch /tmp/gguf/done" > /tmp/gguf/make.log 2>&1 < /dev/null &
step conf-linear 200 python3 -m anydev.conformance --device nvidia --report $R/conf-linear.json -- -k linear -rA
LB=(--device nvidia --models 8B --batches 1 --reps 50)
step linear 60 python3 benchmarks/linear_bench.py "${LB[@]}" --formats dense,int8,fp8_e4m3,q4_k,q8_0,q6_k,q4_0,q4_1 --out $R/linear.json
mkdir -p /tmp/new && cp backends/triton_kernels/linear.py backends/triton_kernels/linear_plans.py /tmp/new/
cp .before/linear.py .before/linear_plans.py backends/triton_kernels/
step linear-before 60 python3 benchmarks/linear_bench.py "${LB[@]}" --formats q4_k,q8_0,q6_k,q4_0,q4_1 --out $R/linear-before.json
cp /tmp/new/linear.py /tmp/new/linear_plans.py backends/triton_kernels/
step sweep 150 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-formats q4_k,q8_0 --table-out $R/plans-b1.txt --out $R/sweep.json
cp $R/plans-b1.txt /tmp/plans-b1.txt 2>/dev/null
step greedy 60 python3 results/2026-12-02-nvidia-h200-x1-session9/greedy_int_dot.py .rec/tiny-llama nvidia
cp /tmp/gguf/make.log $R/make-gguf.txt; tail -5 /tmp/llamacpp-build.out > $R/llamacpp-build-so-far.txt 2>&1; ls -la /tmp/gguf >> $R/make-gguf.txt
grep -h "^== \|GEMMs per token\|^qkv\|^o \|^gate_up\|^down\|^lm_head" $R/linear.txt $R/linear-before.txt
grep -h "heuristic" $R/sweep.txt | cut -c1-200; cat $R/greedy.txt; cat $R/steps.txt
