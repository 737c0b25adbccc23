#!/usr/bin/env bash
# Session 20, call C on one H200 (issue 31), for after call A: if a prefetch distance D won there, the
# kernels group of the conformance suite on nvidia with ANYDEV_TRITON_PREFETCH=D (the check a default
# needs), then the q8_0 and q4_k batch-1 plan sweeps at that distance (plans may move once loads are
# prefetched), then the 8B Q8_0 file end to end with those plans (gguf_peer_bench --plans).
# D comes from the environment (PF, default 2).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
call_start
PF=${PF:-2}; export ANYDEV_TRITON_PREFETCH=$PF
G=/tmp/g; mkdir -p $G
( taskset -c 2-15 python3 benchmarks/make_random_model.py $G/llama-8b-Q8_0.gguf --hidden 4096 --layers 32 --heads 32 \
    --kv-heads 8 --intermediate 14336 --vocab 128256 --gguf Q8_0 > $R/make-Q8_0.txt 2>&1; echo "$? make-Q8_0 $SECONDS" >> $LOG ) &
MAKES=$!
step conf-prefetch 150 taskset -c 0-1 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-prefetch.json -- \
  -k "kernels and (linear or quantized)" -rA
for f in q8_0 q4_k; do
  step sweep-$f-pf$PF 110 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep \
    --sweep-batches 1 --sweep-formats $f --table-out $R/plans-$f-pf$PF.txt --out $R/sweep-$f-pf$PF.json
done
wait $MAKES
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
step e2e-Q8_0-pf$PF 50 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --out $R/e2e-Q8_0-pf$PF.json
[[ -s $R/plans-q8_0-pf$PF.txt ]] && step e2e-Q8_0-pf$PF-plans 50 "${PEER[@]}" $G/llama-8b-Q8_0.gguf \
  --plans $R/plans-q8_0-pf$PF.txt --out $R/e2e-Q8_0-pf$PF-plans.json
grep -h "passed\|failed\|x)\|anydev llama" $R/conf-prefetch.txt $R/sweep-*.txt $R/e2e-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cC.tgz -C $OUT r && rm -rf $R
echo "call C done in $((SECONDS - T0)) s" | tee -a $LOG
