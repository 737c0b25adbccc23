#!/usr/bin/env bash
# Issue 31 on one H200: the batch-1 GGUF GEMVs on int8 activations (dp4a) for q4_k, q8_0, q4_1, q4_0 and
# q6_k. Steps, in order of importance, each under `timeout` and cut to what is left of BUDGET seconds:
#   1. four random Llama-3-8B-shaped GGUF files (Q4_K, Q8_0, Q6_K, Q4_0), written in the background on the
#      CPU while the GPU runs steps 2-3 (benchmarks/make_random_model.py --gguf);
#   2. the conformance kernels group's linear checks (every format, the integer-dot plans included);
#   3. each 8B decode GEMM at batch 1 (benchmarks/linear_bench.py --float-gemv): per GGUF format the
#      integer-dot plan ("q4_0") beside the float GEMV plan of the same kernel ("q4_0 float"), before and
#      after in one run, us and TB/s;
#   4. with LLAMA_BIN (a folder holding llama.cpp's llama-bench and llama-batched-bench): both engines on
#      the same files, batch 1 and 32 (benchmarks/gguf_peer_bench.py), one file a call so that a call cut
#      short keeps the files before it: Q4_K and Q8_0, then (5.) the batch-1 plan sweep of q6_k and q4_0
#      (RECORDED entries for linear_plans, $OUT/r/h31-plans-b1.txt), then Q6_K and Q4_0 as time allows.
#      The peer steps are skipped when LLAMA_BIN is unset.
# Run from the repo root on the GPU machine; writes $OUT/r/h31-* and logs to $OUT/h31.log. H31_TINY=1 runs
# every step at tiny shapes on --device cpu under Triton's interpreter (how it was checked off the GPU).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R
LOG=$OUT/h31.log
BUDGET=${H31_BUDGET:-400}; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/h31-$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/h31-$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit): $*" | tee -a $LOG
}
if [[ "${H31_TINY:-0}" == 1 ]]; then
  export TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1
  DEV=cpu; SHAPE=(--hidden 512 --layers 2 --heads 4 --kv-heads 2 --intermediate 1024 --vocab 384)
  LB=(--tiny --reps 1); PEER=(--device cpu --new-tokens 4 --prompt-len 8 --batch-sizes 1,2 --repeats 1); CONF=(-n 0)
else
  DEV=nvidia; SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
  LB=(--models 8B --reps 50); PEER=(--device nvidia --batch-sizes 1,32 --repeats 2); CONF=()
fi
[[ -n "${SKIP_SETUP:-}" ]] || source scripts/device_setup.sh > $R/h31-setup.txt 2>&1 || echo "1 setup" | tee -a $LOG
{ date -u; nvidia-smi -L 2>/dev/null; git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null; nproc; df -h /tmp
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  python3 -c "import msgspec, zmq, gguf; print('msgspec, pyzmq, gguf import')"
  [[ -n "${LLAMA_BIN:-}" ]] && ls -la "$LLAMA_BIN"/llama-bench "$LLAMA_BIN"/llama-batched-bench; } > $R/h31-env.txt 2>&1

# 1. the files, in the background (CPU and disk; about 24 GB in all)
G=${H31_GGUF_DIR:-/tmp/h31-gguf}; mkdir -p $G
FORMATS=(Q4_K Q8_0 Q6_K Q4_0)
for t in "${FORMATS[@]}"; do
  ( s=$SECONDS; timeout 240 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" --gguf $t \
      > $R/h31-make-$t.txt 2>&1; echo "$? make $t ($((SECONDS - s)) s)" >> $LOG; touch $G/$t.done ) &
done

# 2. correctness on the GPU of every plan the linear kernel chooses
step conf-linear 180 python3 -m anydev.conformance --device $DEV "${CONF[@]}" --report $R/h31-conf-linear.json -- \
  -k "kernels and linear" -rA

# 3. the batch-1 GEMM table: integer-dot plans against the float GEMV, per format
step linear 60 python3 benchmarks/linear_bench.py --device $DEV "${LB[@]}" --batches 1 --float-gemv \
  --formats dense,q4_k,q8_0,q6_k,q4_0,q4_1 --out $R/h31-linear.json

# 4. llama.cpp beside anydev on the same files (Q4_K, Q8_0 first: the targets), 5. between them the
# batch-1 plan sweep of q6_k and q4_0 (their integer-dot plans have no recorded ones yet)
peer() {
  local t=$1 w=$SECONDS
  while [[ ! -e $G/$t.done ]] && (( SECONDS - T0 < BUDGET - 20 )); do sleep 2; done
  echo "waited $((SECONDS - w)) s for $t" >> $LOG
  [[ -s $G/llama-8b-$t.gguf ]] || { echo "no file for $t" | tee -a $LOG; return; }
  step peer-$t 100 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf "${PEER[@]}" --llamacpp /tmp/h31-llama \
    --out $R/h31-peer-$t.json
}
if [[ -n "${LLAMA_BIN:-}" ]]; then
  mkdir -p /tmp/h31-llama && ln -sfn "$LLAMA_BIN" /tmp/h31-llama/bin     # gguf_peer_bench wants BUILD/bin/
  peer Q4_K; peer Q8_0
else
  echo "LLAMA_BIN unset: the llama.cpp comparison (step 4) skipped" | tee -a $LOG
fi
step sweep 50 python3 benchmarks/linear_bench.py --device $DEV "${LB[@]}" --skip-table --sweep --sweep-formats q6_k,q4_0 \
  --table-out $R/h31-plans-b1.txt --out $R/h31-sweep.json
[[ -n "${LLAMA_BIN:-}" ]] && { peer Q6_K; peer Q4_0; }
wait
ls -la $G >> $LOG 2>&1
grep -h "passed\|failed" $R/h31-conf-linear.txt | tail -3 | tee -a $LOG
grep -h "^== \|GEMMs per token\|^qkv\|^o \|^gate_up\|^down\|^lm_head" $R/h31-linear.txt | tee -a $LOG
grep -h "heuristic" $R/h31-sweep.txt 2>/dev/null | cut -c1-220 | tee -a $LOG
for t in "${FORMATS[@]}"; do tail -4 $R/h31-peer-$t.txt 2>/dev/null | tee -a $LOG; done
echo "h31 done in $((SECONDS - T0)) s" | tee -a $LOG
