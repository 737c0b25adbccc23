#!/usr/bin/env bash
# Issues 31 and 34 on one H200: the decode step's launches cut by fusion (contract 1.8's
# qk_norm_rotary_write_kv: Qwen3's per-head q/k norms inside the rotary/KV-write kernel), each case with
# the fused kernels on (--kernels native) and off (--kernels unfused: every fused kernel run as its parts,
# rotary_write_kv's too) in the same call. Steps, in order of importance, each under `timeout` and cut to
# what is left of BUDGET seconds (H31F_STEPS picks some, e.g. a second call for what the first cut):
#   conf-fused   the conformance kernels checks of the fused kernels and the Qwen3 engine tokens
#                (native = unfused = reference), on nvidia;
#   decode       bf16 random weights, decode at batch 1 and 32 (context 256, 64 new tokens, graphs):
#                Llama-3-8B and Qwen3-8B shapes, fused and unfused (issue 34's target: Qwen3 within 5%);
#   gguf         random Llama-3-8B-shaped Q4_K and Q8_0 GGUF files (made in the background at the
#                start), batch-1 decode tok/s fused and unfused (benchmarks/gguf_peer_bench.py
#                --skip-llamacpp; llama.cpp's figures for these files are session 10's);
#   conf-kernels the whole conformance kernels group (full sweep, 8 workers);
#   summary      the ratios, from the JSON files.
# All of it needs about 17 minutes of command, more than one call's 10: run it as two calls,
#   H31F_STEPS="conf-fused decode summary" bash parts/h31f.sh        (~7 min)
#   H31F_STEPS="gguf conf-kernels summary" bash parts/h31f.sh         (~8 min)
# Run from the repo root on the GPU machine; writes $OUT/r/h31f-* and logs to $OUT/h31f.log. H31F_TINY=1
# runs every step at tiny shapes on --device cpu (the kernel checks under Triton's interpreter; the
# engine steps on the torch references, so fused and unfused are the same there): how it was checked.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R
LOG=$OUT/h31f.log
BUDGET=${H31F_BUDGET:-560}; T0=$SECONDS
STEPS=" ${H31F_STEPS:-conf-fused decode gguf conf-kernels summary} "
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left): $*" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/h31f-$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit "$@" >> $R/h31f-$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit): $*" | tee -a $LOG
}
wanted() { [[ "$STEPS" == *" $1 "* ]]; }
if [[ "${H31F_TINY:-0}" == 1 ]]; then
  DEV=cpu; DECODE_SHAPES=(--tiny --contexts 32 --batch-sizes 1,2 --modes eager); NEW=4
  GGUF_SHAPE=(--hidden 512 --layers 2 --heads 4 --kv-heads 2 --intermediate 1024 --vocab 384)
  PEER=(--device cpu --new-tokens 4 --prompt-len 8 --batch-sizes 1 --repeats 1)
  KERN=(env TRITON_INTERPRET=1 ANYDEV_CPU_TRITON=1); CONF=(--quick -n 0); FULL=(--quick -n 0)
  FULL_K="qk_norm or rotary"      # the whole group takes too long under the interpreter
else
  DEV=nvidia; DECODE_SHAPES=(--contexts 256 --batch-sizes 1,32 --modes graphs); NEW=64
  GGUF_SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
  PEER=(--device nvidia --batch-sizes 1 --repeats 2); KERN=(); CONF=(-n 1); FULL=(-n 8); FULL_K=test_kernels
fi
[[ -n "${SKIP_SETUP:-}" ]] || source scripts/device_setup.sh > $R/h31f-setup.txt 2>&1 || echo "1 setup" | tee -a $LOG
{ date -u; nvidia-smi -L 2>/dev/null; git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null; nproc; df -h /tmp
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  python3 -c "from anydev.plugin_api import CONTRACT_VERSION; print('contract', CONTRACT_VERSION)"; } > $R/h31f-env.txt 2>&1

# the GGUF files, in the background (CPU and disk, ~13 GB) while the GPU runs the first steps
G=${H31F_GGUF_DIR:-/tmp/h31f-gguf}; mkdir -p $G
FORMATS=(Q4_K Q8_0)
if wanted gguf; then
  for t in "${FORMATS[@]}"; do
    ( s=$SECONDS; timeout 240 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${GGUF_SHAPE[@]}" --gguf $t \
        > $R/h31f-make-$t.txt 2>&1; echo "$? make $t ($((SECONDS - s)) s)" >> $LOG; touch $G/$t.done ) &
  done
fi

wanted conf-fused && step conf-fused 90 "${KERN[@]}" python3 -m anydev.conformance --device $DEV "${CONF[@]}" \
  --report $R/h31f-conf-fused.json -- -k "qk_norm or rotary_write_kv or qwen3_model" -rA

DECODE=(--device $DEV --prefill-len 0 --new-tokens $NEW --hf none --no-kernel-count "${DECODE_SHAPES[@]}")
if wanted decode; then
  for kernels in native unfused; do
    for shape in 8b qwen3-8b; do
      step decode-$shape-$kernels 75 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape $shape --kernels $kernels \
        --out $R/h31f-decode-$shape-$kernels.json
    done
  done
fi

if wanted gguf; then
  for t in "${FORMATS[@]}"; do
    while [[ ! -e $G/$t.done ]] && (( SECONDS - T0 < BUDGET - 20 )); do sleep 2; done
    [[ -s $G/llama-8b-$t.gguf ]] || { echo "no file for $t" | tee -a $LOG; continue; }
    for kernels in native unfused; do
      step gguf-$t-$kernels 60 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf "${PEER[@]}" --skip-llamacpp \
        --kernels $kernels --out $R/h31f-gguf-$t-$kernels.json
    done
  done
fi

wanted conf-kernels && step conf-kernels 175 "${KERN[@]}" python3 -m anydev.conformance --device $DEV "${FULL[@]}" \
  --report $R/h31f-conf-kernels.json -- -k "$FULL_K" --tb=short -rfE
wait

wanted summary && step summary 10 python3 - $R <<'EOF'
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
def load(name):
    path = r / f"h31f-{name}.json"
    return json.loads(path.read_text()) if path.exists() else None
def decode_rows(report):
    return {row["batch"]: row["decode_tokens_per_s"] for row in report["rows"] if row["case"] == "decode"} if report else {}
for kernels in ("native", "unfused"):
    llama, qwen = load(f"decode-8b-{kernels}"), load(f"decode-qwen3-8b-{kernels}")
    ll, qw = decode_rows(llama), decode_rows(qwen)
    for batch in sorted(set(ll) & set(qw)):
        per_layer = (qw[batch] * qwen["layers"]) / (ll[batch] * llama["layers"])
        print(f"{kernels:8s} batch {batch}: qwen3-8b {qw[batch]:.1f} tok/s, llama-3-8b {ll[batch]:.1f} tok/s: "
              f"{qw[batch] / ll[batch]:.3f}x ({per_layer:.3f}x per layer)")
for shape in ("8b", "qwen3-8b"):
    on, off = decode_rows(load(f"decode-{shape}-native")), decode_rows(load(f"decode-{shape}-unfused"))
    for batch in sorted(set(on) & set(off)):
        print(f"{shape} batch {batch}: fused {on[batch]:.1f} tok/s, unfused {off[batch]:.1f}: {on[batch] / off[batch]:.3f}x")
for t in ("Q4_K", "Q8_0"):
    speeds = {}
    for kernels in ("native", "unfused"):
        report = load(f"gguf-{t}-{kernels}")
        if report:
            speeds[kernels] = report["rows"][0]["anydev"]["speeds"]
    ratio = {b: round(v / speeds["unfused"][b], 3) for b, v in speeds.get("native", {}).items() if b in speeds.get("unfused", {})}
    print(f"{t} tok/s by batch: {json.dumps(speeds)}; fused / unfused {ratio}")
EOF
cat $R/h31f-summary.txt >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/h31f-conf-fused.txt $R/h31f-conf-kernels.txt 2>/dev/null | tail -4 | tee -a $LOG
echo "h31f done in $((SECONDS - T0)) s" | tee -a $LOG
