#!/usr/bin/env bash
# Session 32, call B (issue 31, one H200; written in session 31): the conformance kernels group on this
# tree (main with session 32's two landed kernel changes), the 8B Q4_K file at batch 1 and 32 beside
# llama.cpp on it, then the profiles the record lacks. Session 31's Q4_K batch-32 and Q8_0 batch-1
# profiles were cut while Triton compiled the profiled graphs' kernels, so each profile here is a step
# of its own with room for that. In this order, each
# step skipped once BUDGET is spent: the 1B bf16 at batch 1 (decode_bench) and its profile; the 8B Q4_K
# file at batch 32 profiled; the 8B Q8_0 file at batch 1 and 32 beside llama.cpp, its batch-1 step
# profiled; the 8B Q6_K file at batch 1 beside llama.cpp (each engine in a step of its own, so that a
# peer that fails to load costs no anydev figure); last, the q4_k batch-32 plan sweep of the 8B GEMMs
# and one more Q4_K batch-32 run on its winners (--plans: not pasted into the tree; Q4_K at batch 32 is
# at 1.16-1.19x llama.cpp, the target 1.2x), which needs BUDGET raised to about 700 to finish. Profiles
# run with programmatic dependent launch off, so that each kernel's device time is its own. Carry .whl
# and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c32b 470
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
make_models Q4_K Q8_0 Q6_K
step conf-main 210 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-main.json \
  -- -k kernels
pkill -f "anydev.conformance"; sleep 1
PROF=(env ANYDEV_TRITON_PDL=0 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256
      --steps 8 --rows 30)
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
LLAMA_LIBS=$(peer_libs)
llamacpp() { LD_LIBRARY_PATH=$LLAMA_LIBS step llamacpp-$1 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$1.gguf \
  --llamacpp $B --batch-sizes $2 --skip-anydev --out $R/llamacpp-$1.json; }
wait_model Q4_K
step anydev-Q4_K 40 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K.json
llamacpp Q4_K 1,32
step decode-1b 30 taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 \
  --prefill-len 0 --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count --shape 1b --out $R/decode-1b.json
step prof-1b-b1 40 "${PROF[@]}" --batch-sizes 1
wait_model Q4_K
step prof-Q4_K-b32 90 "${PROF[@]}" --batch-sizes 32 --model $G/llama-8b-Q4_K.gguf
wait_model Q8_0
step anydev-Q8_0 40 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0.json
llamacpp Q8_0 1,32
step prof-Q8_0-b1 70 "${PROF[@]}" --batch-sizes 1 --model $G/llama-8b-Q8_0.gguf
wait_model Q6_K
step anydev-Q6_K-b1 35 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K-b1.json
llamacpp Q6_K 1
step sweep-q4_k-b32 200 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
  --sweep --sweep-batches 32 --sweep-formats q4_k --table-out $R/plans-q4_k-b32.txt --out $R/sweep-q4_k-b32.json
if [[ -s $R/plans-q4_k-b32.txt ]]; then
  step swept-Q4_K-b32 40 "${PEER[@]}" --batch-sizes 32 --plans $R/plans-q4_k-b32.txt $G/llama-8b-Q4_K.gguf \
    --out $R/swept-Q4_K-b32.json
fi
grep -h "passed\|failed" $R/conf-*.txt | tail -2 >> $LOG
grep -h "anydev llama\|llama.cpp:\|anydev graphs.*decode\|device busy" $R/anydev-*.txt $R/llamacpp-*.txt \
  $R/swept-*.txt $R/decode-*.txt $R/prof-*.txt >> $LOG 2>/dev/null
call_end
