#!/usr/bin/env bash
# Session 23, call E (issue 31), tree q6k-split-wf: Q6_K in split rows (f50a1e3's q6_k_split) with the
# tile that joins each group's halves back into input order, the weights first at batch 32 (64
# outputs, wgmma). Session 22's two-dot tile read at 0.12-0.16 TB/s at batch 32. The 8B GEMMs of q6_k
# and q6_k_split at batch 1 and 32 (linear_bench's table), the q6_k_split batch-32 sweep of gate_up and
# down (both operand orders), then the 8B Q6_K file end to end, batch 1 and 32, on this tree (the loader
# splits Q6_K's projections) and on main (.prev/, bf35477: the blocks), all on cores 0-1.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-240}; T0=$SECONDS
trap 'tar czf $OUT/cE.tgz -C $OUT r; exit 143' TERM
touch $LOG
source parts/step.sh
call_start
install_prev
G=/tmp/g; mkdir -p $G
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-15 python3 benchmarks/make_random_model.py $G/llama-8b-Q6_K.gguf "${SHAPE[@]}" --gguf Q6_K > $R/make-Q6_K.txt 2>&1
  echo "$? make-Q6_K $SECONDS" >> $LOG ) &
MAKE=$!
step table-q6 45 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1,32 \
  --formats q6_k,q6_k_split --out $R/table-q6.json
step sweep-q6_k_split-b32 60 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
  --sweep --sweep-batches 32 --sweep-formats q6_k_split --sweep-gemms gate_up,down --out $R/sweep-q6_k_split-b32.json
wait $MAKE
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
step after-Q6_K 50 taskset -c 0-1 python3 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/after-Q6_K.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q6_K 40 taskset -c 0-1 python3 \
  $OLDPWD/.prev/"${PEER[0]}" "${PEER[@]:1}" $G/llama-8b-Q6_K.gguf --out $R/before-Q6_K.json)
grep -h "GEMMs per token\|best \|anydev llama" $R/table-*.txt $R/sweep-*.txt $R/after-*.txt $R/before-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cE.tgz -C $OUT r && rm -rf $R
echo "call E done in $((SECONDS - T0)) s" | tee -a $LOG
