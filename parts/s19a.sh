#!/usr/bin/env bash
# Session 19, call A on one H200 (issues 33 and 31):
#   1. server against offline at saturation (512-token answers), 64 streams / 2 front ends and 256 / 4, on
#      this tree: front ends on asyncio, TCP_NODELAY on the handed-over sockets, the detokenizer's dropped
#      windows, the core's token-only outputs and the coalesced SSE writes (all after session 18's run);
#   2. the engine core's host time per step served against offline (benchmarks/core_step_cost.py);
#   3. the greedy row maximum, torch.max against row_max's two stages;
#   4. the q8_0 batch-1 plan sweep on the 8B GEMMs (the aligned-chunk GEMV has no recorded plans);
#   5. 1B bf16 decode at batch 1 (the 1,400 tok/s target).
# Bounded to BUDGET seconds; everything under $OUT/r, tarred at the end.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-570}; T0=$SECONDS
source parts/step.sh
{ date -u; nvidia-smi -L; nproc; lscpu | head -20
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
step make-1b 30 python3 benchmarks/make_random_model.py /tmp/llama-1b
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
step serve-64-fe2 60 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-fe2.json
step serve-256-fe4 75 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-fe4.json
step core-step-64 60 python3 benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 64 --output-len 256 --deadline 50
step row-max 30 python3 benchmarks/row_max_bench.py --device nvidia
step sweep-q8_0-b1 170 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 1 \
  --sweep-formats q8_0 --sweep-gemms gate_up,down,qkv,o --table-out $R/plans-q8_0-b1.txt --out $R/sweep-q8_0-b1.json
step decode-1b-b1 45 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0 \
  --new-tokens 128 --modes graphs --hf none --repeats 2 --out $R/decode-1b-b1.json
grep -h "server / offline\|ratio\|x)\|tok/s\|served\|offline" $R/serve-*.txt $R/core-step-64.txt $R/row-max.txt $R/sweep-q8_0-b1.txt $R/decode-1b-b1.txt >> $LOG 2>/dev/null
tar czf $OUT/cA.tgz -C $OUT r && rm -rf $R
echo "call A done in $((SECONDS - T0)) s" | tee -a $LOG
