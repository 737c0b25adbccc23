#!/usr/bin/env bash
# Session 23, call A (issues 31 and 33), tree q4k-tile-exp: the batch-32 tl.dot tiles with the weights
# as the dot's first operand (ANYDEV_Q4K_TILE=3: dot(W tile, x^T), which Triton lowers to sm_90's
# wgmma once the weight tile has 64 rows) against main's x @ W (=0): the 8B GEMMs of every format
# (linear_bench's table), the swapped tiles' plan sweep for q4_k, q6_k and q8_0_split, then the 8B
# Q4_K and Q6_K GGUF files end to end at batch 32 with each. Then issue 33: the server against
# offline at saturation (64 / 2 front ends, 256 / 4) on this tree (main's host path), and 256 / 4
# again with the interpreter's switch interval at 1 ms (sitecustomize; the default is 5 ms).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-560}; T0=$SECONDS
trap 'tar czf $OUT/cA.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
G=/tmp/g; mkdir -p $G
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q4_K Q6_K; do taskset -c 2-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done
  taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG ) &
MAKES=$!
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 32
    --formats dense,int8,fp8_e4m3,q8_0,q8_0_split,q4_0,q4_1,q4_k,q6_k)
ANYDEV_Q4K_TILE=0 step table-b32-t0 60 "${LB[@]}" --out $R/table-b32-t0.json
ANYDEV_Q4K_TILE=3 step table-b32-t3 60 "${LB[@]}" --out $R/table-b32-t3.json
SW=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 32)
for q in q4_k q6_k q8_0_split; do
  ANYDEV_Q4K_TILE=3 step sweep-$q-t3 70 "${SW[@]}" --sweep-formats $q --table-out $R/plans-$q-t3.txt --out $R/sweep-$q-t3.json
done
wait $MAKES
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 32 --repeats 2 --skip-llamacpp)
for t in Q4_K Q6_K; do
  for v in 0 3; do ANYDEV_Q4K_TILE=$v step e2e-$t-t$v 60 "${PEER[@]}" $G/llama-8b-$t.gguf --out $R/e2e-$t-t$v.json; done
done
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-64-fe2 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
mkdir -p /tmp/sc && echo 'import sys; sys.setswitchinterval(0.001)' > /tmp/sc/sitecustomize.py
PYTHONPATH=/tmp/sc:$PYTHONPATH python3 -c "import sys; print('switch interval with /tmp/sc:', sys.getswitchinterval())" >> $R/env.txt 2>&1
PYTHONPATH=/tmp/sc:$PYTHONPATH step serve-256-fe4-si1ms 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 \
  --out $R/serve-256-fe4-si1ms.json
grep -h "GEMMs per token\|best \|anydev llama\|server / offline" $R/table-*.txt $R/sweep-*.txt $R/e2e-*.txt \
  $R/serve-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cA.tgz -C $OUT r && rm -rf $R
echo "call A done in $((SECONDS - T0)) s" | tee -a $LOG
