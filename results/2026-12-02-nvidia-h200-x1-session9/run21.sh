#!/usr/bin/env bash
# Session 9, run 21 (straight after run 20, on the same warm machine): run 20's batch-1 sweep pasted into
# linear_plans.RECORDED of this copy, then both engines on the same four 8B GGUF files (gguf_peer_bench:
# llama.cpp's llama-bench and llama-batched-bench, anydev's generate_ids; batch 1 and 32, 128-token
# prompts, 128 new tokens; llama.cpp's start to first token), the batch-1 GEMM table with those plans, and
# (time allowing) the step profile of the Q4_K file at batch 1 (decode graphs).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R
pack() { (cd $R && tar -czf $OUT/run21.tgz .); }
trap pack EXIT
step() { local name=$1 limit=$2; shift 2; echo "\$ $*" >> $R/$name.txt; local t=$SECONDS; timeout -k 5 -s ABRT $limit "$@" >> $R/$name.txt 2>&1; echo "$? $name ($((SECONDS - t)) s): $*" | tee -a $R/steps.txt; }
source scripts/device_setup.sh > $R/setup.txt 2>&1 || echo "1 setup" >> $R/steps.txt
{ date -u; nvidia-smi -L; cat .commit; } > $R/env.txt 2>&1
if [[ -s /tmp/plans-b1.txt ]]; then
    python3 - <<'PY' >> $R/plans-pasted.txt 2>&1
from pathlib import Path
p = Path("backends/triton_kernels/linear_plans.py")
s = p.read_text()
entries = Path("/tmp/plans-b1.txt").read_text()
head, tail = s.split("\n}\n", 1)
p.write_text(head + "\n" + entries.rstrip("\n") + "\n}\n" + tail)
print(entries)
PY
fi
t=$SECONDS; while [[ ! -x /tmp/llamacpp-build/bin/llama-batched-bench || ! -e /tmp/gguf/done ]] && (( SECONDS - t < 300 )); do sleep 5; done
echo "waited $((SECONDS - t)) s for the build and the files" >> $R/steps.txt
cp /tmp/gguf/make.log $R/make-gguf.txt; ls -la /tmp/gguf >> $R/make-gguf.txt; tail -20 /tmp/llamacpp-build.out > $R/llamacpp-build.txt 2>&1
F=(/tmp/gguf/llama-8b-Q4_K.gguf /tmp/gguf/llama-8b-Q8_0.gguf /tmp/gguf/llama-8b-Q6_K.gguf /tmp/gguf/llama-8b-F16.gguf)
step peer 330 python3 benchmarks/gguf_peer_bench.py "${F[@]}" --device nvidia --llamacpp /tmp/llamacpp-build --ttft --repeats 2 --out $R/peer.json
python3 -c "import json; r=json.load(open('$R/peer.json'))['rows']; [print(x['file'], 'llama-bench -p 16 -n 1 -r 1 wall', round(x['llamacpp_ttft_s'], 2), 's') for x in r if 'llamacpp_ttft_s' in x]" > $R/llamacpp-ttft.txt 2>&1
step linear-after 50 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 --reps 50 --formats q4_k,q8_0,q6_k,q4_0,q4_1 --out $R/linear-after.json
(( SECONDS < 400 )) && step profile-q4k 45 python3 benchmarks/step_profile.py --device nvidia --model /tmp/gguf/llama-8b-Q4_K.gguf --context 128 --steps 4 --graphs --rows 20
tail -12 $R/peer.txt; cat $R/llamacpp-ttft.txt; grep -h "GEMMs per token" $R/linear-after.txt; cat $R/steps.txt
