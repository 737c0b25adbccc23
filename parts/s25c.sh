#!/usr/bin/env bash
# Session 25, call C (issue 31), this tree, on an H200 (RECORDED has no q8_0_split plans for it and
# q4_k plans from before sessions 22-24): the batch-1 plan sweeps of the 8B GEMMs for q8_0_split and
# q4_k, then the 8B Q4_K and Q8_0 files at batch 1 and 32 with the sweeps' plans (gguf_peer_bench
# --plans) and without, and llama.cpp on the same files, all in this call. PDL (ANYDEV_TRITON_PDL) as
# the caller sets it, the same for every run. On an H100 (its plans are recorded) only the last step:
# the whole kernels group of the conformance suite on nvidia (every format; issue 31's check of the
# GPU kernels).
set -uo pipefail
source parts/step.sh
call_init c25c 540
call_start
echo "ANYDEV_TRITON_PDL=${ANYDEV_TRITON_PDL:-unset}" >> $R/env.txt
conf_kernels() {
  step conf-kernels $1 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-kernels.json \
    -- -k kernels -v
}
if ! nvidia-smi -L | grep -q H200; then conf_kernels 400; call_end; exit 0; fi
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( for t in Q4_K Q8_0; do taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
LB=(taskset -c 0-3 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 1)
step sweep-split-b1 90 "${LB[@]}" --sweep-formats q8_0_split --sweep-widths 512,1024 --table-out $R/plans-split-b1.txt \
  --out $R/sweep-split-b1.json
step sweep-q4_k-b1 90 "${LB[@]}" --sweep-formats q4_k --table-out $R/plans-q4_k-b1.txt --out $R/sweep-q4_k-b1.json
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
for t in Q8_0 Q4_K; do
  for _ in $(seq 90); do grep -q " make-$t " $LOG && break; sleep 2; done
  plans=$R/plans-split-b1.txt; [[ $t == Q4_K ]] && plans=$R/plans-q4_k-b1.txt
  step recorded-$t 60 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-$t.gguf --out $R/recorded-$t.json
  [[ -s $plans ]] && step swept-$t 60 "${PEER[@]}" --batch-sizes 1,32 --plans $plans $G/llama-8b-$t.gguf \
    --out $R/swept-$t.json
done
wait
for t in Q4_K Q8_0; do
  LD_LIBRARY_PATH=$B/bin step llamacpp-$t 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf \
    --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$t.json
done
conf_kernels 240
grep -h "passed\|failed" $R/conf-kernels.txt | tail -3 >> $LOG
grep -h "best \|anydev llama\|llama.cpp:" $R/sweep-*.txt $R/recorded-*.txt $R/swept-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
call_end
