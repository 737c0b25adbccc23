#!/usr/bin/env bash
# Issue 34's MoE target on one H200 (bf16, Qwen3-30B-A3B experts: hidden 2048, 128 experts of width 768,
# 8 active): moe_linear's few-rows GEMV by plans (backends/triton_kernels/moe_plans.py) beside the first
# path's plan, kernel time from device graphs. Steps, each under `timeout`, cut to what is left of
# BUDGET seconds (the whole run stays under 4 minutes):
#   1. moe-bench: moe_route and moe_linear beside the torch references at batch 1 and 32, with graph us
#      (L2-cold: other experts each captured call) and, at batch 1, the legacy and chosen GEMV plans;
#   2. moe-sweep: batch 1's candidate GEMV plans, the best printed, those > 3% better than the chosen
#      written as moe_plans.RECORDED lines to $OUT/r/h34m-plans.txt;
#   3. conf-moe: the conformance kernels group's MoE checks on nvidia;
#   4. decode-moe: decode_bench at the MoE shape (8 of its 48 layers), batch 1 and 32, decode graphs, as
#      parts/h34.sh's decode-moe step.
# Run from the repo root on the GPU machine; writes $OUT/r/h34m-* and logs to $OUT/h34m.log.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
LOG=$OUT/h34m.log
BUDGET=${H34M_BUDGET:-230}; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/h34m-$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/h34m-$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit): $*" | tee -a $LOG
}
[[ -n "${SKIP_SETUP:-}" ]] || source scripts/device_setup.sh > $R/h34m-setup.txt 2>&1 || echo "1 setup" | tee -a $LOG
{ date -u; nvidia-smi -L 2>/dev/null; git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null; nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/h34m-env.txt 2>&1

step moe-bench 45 python3 benchmarks/moe_bench.py --device nvidia --plans legacy,chosen --out $R/h34m-moe-bench.json
step moe-sweep 75 python3 benchmarks/moe_bench.py --device nvidia --batch-sizes 1 --sweep --table-out $R/h34m-plans.txt \
  --out $R/h34m-moe-sweep.json
step conf-moe 60 python3 -m anydev.conformance --device nvidia -n 8 --report $R/h34m-conf-moe.json -- -k "kernels and moe"
step decode-moe 60 python3 benchmarks/decode_bench.py --device nvidia --prefill-len 0 --new-tokens 64 --hf none \
  --no-kernel-count --contexts 256 --batch-sizes 1,32 --modes graphs --shape qwen3-30b-a3b --layers 8 \
  --out $R/h34m-decode-moe.json
grep -h "moe_linear\|moe_route\|plan \|sweep:" $R/h34m-moe-bench.txt $R/h34m-moe-sweep.txt >> $LOG 2>/dev/null
grep -h "active experts" $R/h34m-decode-moe.txt | head -2 >> $LOG 2>/dev/null
