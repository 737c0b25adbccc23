#!/usr/bin/env bash
# Session 29, call A (issue 31, on an H200; written in session 28, whose one call ran parts/s28c.sh), this tree:
#   1. the 8B Q4_K file at batch 32 with main's plans ("before": the H200 has no recorded q4_k batch-32
#      plans; session 27 read 1.19x llama.cpp's S_TG, the target is 1.2x);
#   2. the q4_k batch-32 plan sweep of the 8B GEMMs (weights first and second, linear_bench --sweep),
#      its winners pasted into this machine's copy of linear_plans.RECORDED (the editable install
#      reads it), then the Q4_K file at batch 1 and 32 again ("after") beside llama.cpp on the same file;
#   3. the Q4_K file's batch-1 step profiled with PDL off (what bounds it on the H200).
# Carry .whl and .peer/llamacpp-bin.tar.xz. Paste plans-q4_k-b32.txt into RECORDED when they help.
set -uo pipefail
source parts/step.sh
call_init c29a 540
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
make_models Q4_K
for _ in $(seq 60); do grep -q " make-Q4_K " $LOG && break; sleep 2; done
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp $G/llama-8b-Q4_K.gguf)
step before-Q4_K-b32 40 "${PEER[@]}" --batch-sizes 32 --out $R/before-Q4_K-b32.json
step sweep-q4_k-b32 220 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
  --sweep --sweep-batches 32 --sweep-formats q4_k --table-out $R/plans-q4_k-b32.txt --out $R/sweep-q4_k-b32.json
if [[ -s $R/plans-q4_k-b32.txt ]]; then
  python3 - "$R/plans-q4_k-b32.txt" <<'EOF' >> $LOG 2>&1
import sys
path = "backends/triton_kernels/linear_plans.py"
text = open(path).read()
end = text.index("\n}\n", text.index("RECORDED:")) + 1      # the dict's closing brace: later keys win
open(path, "w").write(text[:end] + open(sys.argv[1]).read() + text[end:])
print("pasted", open(sys.argv[1]).read().count("\n"), "plans")
EOF
fi
step after-Q4_K 50 "${PEER[@]}" --batch-sizes 1,32 --out $R/after-Q4_K.json
wait
LD_LIBRARY_PATH=$B/bin step llamacpp-Q4_K 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q4_K.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-Q4_K.json
step prof-Q4_K-b1 40 env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs \
  --context 256 --steps 8 --rows 30 --batch-sizes 1 --model $G/llama-8b-Q4_K.gguf
grep -h "anydev llama\|llama.cpp:\|heuristic\|device kernels" $R/*-Q4_K*.txt $R/llamacpp-*.txt $R/sweep-*.txt $R/prof-*.txt \
  >> $LOG 2>/dev/null
call_end
