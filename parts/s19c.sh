#!/usr/bin/env bash
# Session 19, call C on one H200 (issues 31 and 33):
#   1. q4_k plan sweeps: batch 1 (1 to 8 warps) on the 8B GEMMs, batch 32 on gate_up, qkv and lm_head
#      (no recorded plans there);
#   2. the 8B Q4_K GGUF decoded with the recorded plans and with the sweeps' plans added (--plans), batch 1
#      and 32, in the same call;
#   3. server against offline at saturation again (call A: 0.91x and 0.90x), and the core's step cost at 256.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
G=/tmp/g; mkdir -p $G
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( python3 benchmarks/make_random_model.py $G/llama-8b-Q4_K.gguf "${SHAPE[@]}" --gguf Q4_K > $R/make-Q4_K.txt 2>&1;
  python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1 ) &
LS=(python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-formats q4_k)
step sweep-q4_k-b1 130 "${LS[@]}" --sweep-batches 1 --table-out $R/plans-q4_k-b1.txt --out $R/sweep-q4_k-b1.json
step sweep-q4_k-b32 130 "${LS[@]}" --sweep-batches 32 --sweep-gemms gate_up,qkv,lm_head \
  --table-out $R/plans-q4_k-b32.txt --out $R/sweep-q4_k-b32.json
wait
PEER=(python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q4_K.gguf --device nvidia --batch-sizes 1,32 --repeats 2 --skip-llamacpp)
PLANS=(); for f in $R/plans-q4_k-b1.txt $R/plans-q4_k-b32.txt; do [[ -s $f ]] && PLANS+=(--plans $f); done
step recorded-Q4_K 60 "${PEER[@]}" --out $R/recorded-Q4_K.json
step swept-Q4_K 60 "${PEER[@]}" ${PLANS[@]+"${PLANS[@]}"} --out $R/swept-Q4_K.json
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-64-fe2 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
step core-step-256 60 python3 benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 256 --output-len 256 --deadline 50
grep -h "x)\|anydev llama\|server / offline\|served\|offline  \|front end" $R/sweep-*.txt $R/recorded-*.txt $R/swept-*.txt $R/serve-*.txt $R/core-step-256.txt >> $LOG 2>/dev/null
tar czf $OUT/cC.tgz -C $OUT r && rm -rf $R
echo "call C done in $((SECONDS - T0)) s" | tee -a $LOG
