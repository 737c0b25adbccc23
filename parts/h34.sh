#!/usr/bin/env bash
# Issue 34 (model families) on one H200, bf16, random weights made in process (no disk). Steps, in order,
# each under `timeout` and cut to what is left of BUDGET seconds (the whole run stays under 6 minutes):
#   1. decode-llama8b, decode-qwen3-8b: decode at batch 1 and 32 (context 256, 64 new tokens, decode graphs),
#      the Llama-3-8B shape, then the Qwen3-8B shape (hidden 4096, 36 layers, 32 heads of 128, 8 KV heads,
#      MLP 12288, vocab 151936, per-head q/k norms) in the same run (target: Qwen3 within 5% of Llama;
#      the summary compares per layer too, as Qwen3-8B has 36 layers to Llama's 32);
#   2. decode-moe: a Qwen3-30B-A3B-shaped MoE with 8 of its 48 layers (hidden 2048, 32 heads of 128, 4 KV
#      heads, 128 experts of width 768, 8 active, vocab 151936), batch 1 and 32, each row with the weight
#      bytes a step reads and the active experts' GB/s (target at batch 1: >= 60% of HBM, 4.8 TB/s);
#   3. moe-bench: moe_route and moe_linear (Triton) beside their torch references at that expert shape;
#   4. conf-moe: the conformance kernels group's MoE checks on nvidia (every format and dtype);
#   5. families: llama, qwen3 and qwen3_moe (tiny, random, float32) through test_infer.py on the GPU beside the
#      cpu backend, and qwen3_moe through `anydev serve` (parts/h34-families.sh);
#   6. summary: the ratios and rates above, from the JSON files.
# Run from the repo root on the GPU machine; writes $OUT/r/h34-* and logs to $OUT/h34.log. H34_TINY=1 runs
# every step at tiny shapes on --device cpu under Triton's interpreter (how it was checked off the GPU).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
R=$OUT/r; mkdir -p $R
LOG=$OUT/h34.log
BUDGET=${H34_BUDGET:-340}; T0=$SECONDS
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/h34-$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/h34-$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit): $*" | tee -a $LOG
}
if [[ "${H34_TINY:-0}" == 1 ]]; then
  # cpu: no graphs; the engine on the torch references, the kernel steps on the Triton ones, interpreted
  DEV=cpu; TINY=(--tiny --contexts 32 --batch-sizes 1,2 --modes eager); MOE_LAYERS=2; NEW=4
  MOE=(--tiny --iters 2 --reps 1); KERN=(env TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1)
else
  DEV=nvidia; TINY=(--contexts 256 --batch-sizes 1,32 --modes graphs); MOE_LAYERS=8; NEW=64; MOE=(); KERN=()
fi
[[ -n "${SKIP_SETUP:-}" ]] || source scripts/device_setup.sh > $R/h34-setup.txt 2>&1 || echo "1 setup" | tee -a $LOG
{ date -u; nvidia-smi -L 2>/dev/null; git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null; nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/h34-env.txt 2>&1

DECODE=(--device $DEV --prefill-len 0 --new-tokens $NEW --hf none --no-kernel-count "${TINY[@]}")
step decode-llama8b 75 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape 8b --out $R/h34-decode-llama8b.json
step decode-qwen3-8b 75 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape qwen3-8b --out $R/h34-decode-qwen3-8b.json
step decode-moe 70 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape qwen3-30b-a3b --layers $MOE_LAYERS \
  --out $R/h34-decode-moe.json
step moe-bench 30 "${KERN[@]}" python3 benchmarks/moe_bench.py --device $DEV "${MOE[@]}" --out $R/h34-moe-bench.json
step conf-moe 100 "${KERN[@]}" python3 -m anydev.conformance --device $DEV --report $R/h34-conf-moe.json -- -k moe -rA
step families 90 bash parts/h34-families.sh $DEV $R
step summary 10 python3 - $R <<'EOF'
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
def rows(name):
    path = r / f"h34-{name}.json"
    if not path.exists():
        print(f"{name}: no results"); return {}, {}
    report = json.loads(path.read_text())
    return report, {row["batch"]: row for row in report["rows"] if row["case"] == "decode"}
(llama, ll), (qwen, qw), (moe, mo) = rows("decode-llama8b"), rows("decode-qwen3-8b"), rows("decode-moe")
for batch in sorted(set(ll) & set(qw)):
    a, b = ll[batch]["decode_tokens_per_s"], qw[batch]["decode_tokens_per_s"]
    per_layer = (b * qwen["layers"]) / (a * llama["layers"])
    print(f"batch {batch}: qwen3-8b {b:.1f} tok/s, llama-3-8b {a:.1f} tok/s: {b / a:.3f}x "
          f"({per_layer:.3f}x per layer: {qwen['layers']} vs {llama['layers']} layers)")
for batch, row in sorted(mo.items()):
    gbps = row.get("experts_gbps")
    print(f"moe ({moe['layers']} layers) batch {batch}: {row['decode_tokens_per_s']:.1f} tok/s, step "
          f"{row['decode_step_ms']:.3f} ms, active experts {gbps and round(gbps, 1)} GB/s"
          + (f" = {gbps / 4800:.1%} of 4.8 TB/s" if gbps else "")
          + f", all weights read {row.get('weights_gbps') and round(row['weights_gbps'], 1)} GB/s")
EOF
cat $R/h34-summary.txt >> $LOG; grep -h "^families:" $R/h34-families.txt >> $LOG
