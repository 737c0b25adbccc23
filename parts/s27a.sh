#!/usr/bin/env bash
# Session 27, call A (issues 33 and 31), this tree (ba641b5: the batch-1 GEMVs of int8 and q8_0_split
# as integer dots):
#   1. issue 33: serve_bench saturate with the client processes pinned apart (the server and the offline
#      run on 0-11), 64 streams / 2 front ends and 256 / 4 (session 26 call D: 256 / 4 read 1.00x apart,
#      0.82x with the clients beside the server; 64 / 2 not yet run apart);
#   2. issue 31, ba641b5 against .prev/ = cea3648 (the float GEMVs): the 8B GEMMs at batch 1 (q8_0_split
#      and int8 as integer dots and as floats in one run, fp8 and bf16 beside), the 8B Q8_0 file at batch
#      1 before and after beside llama.cpp (carried: .peer/llamacpp-bin.tar.xz), the whole kernels group
#      of the conformance suite (the GPU check of the new GEMVs and every other format's kernels), the 8B
#      bf16 / int8 / fp8 at batch 1 (after; int8 before too);
#   3. on an H200 (issue 31's card) with the time left: the Q4_K file at batch 1 and 32 beside llama.cpp,
#      Q8_0 at batch 32, the 1B bf16 at batch 1.
# Carry .whl, .peer/llamacpp-bin.tar.xz and .prev.
set -uo pipefail
source parts/step.sh
call_init c27a 540
call_start
install_prev
H200=0; nvidia-smi -L | grep -q H200 && H200=1
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
# the clients keep off 14-15 while the 8B files are written there
if (( H200 )); then make_models Q8_0 Q4_K; else make_models Q8_0; fi
SV=(taskset -c 0-11 python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30
    --workloads saturate --output-len 512 --client-cpus 12-13)
step serve-64-apart 50 "${SV[@]}" --batch 64 --api-server-count 2 --out $R/serve-64-apart.json
step serve-256-apart 70 "${SV[@]}" --batch 256 --max-num-seqs 256 --api-server-count 4 --out $R/serve-256-apart.json
step lin-8b-b1 60 taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --batches 1 \
  --formats dense,int8,fp8_e4m3,q8_0_split --float-gemv --out $R/lin-8b-b1.json
for _ in $(seq 60); do grep -q " make-Q8_0 " $LOG && break; sleep 2; done
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1 $G/llama-8b-Q8_0.gguf)
step after-Q8_0-b1 50 taskset -c 0-1 python3 "${PEER[@]}" --out $R/after-Q8_0-b1.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q8_0-b1 50 taskset -c 0-1 python3 $OLDPWD/.prev/"${PEER[0]}" \
  "${PEER[@]:1}" --out $R/before-Q8_0-b1.json)
wait
for t in Q8_0 $( (( H200 )) && echo Q4_K); do
  LD_LIBRARY_PATH=$B/bin step llamacpp-$t 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf \
    --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$t.json
done
step conf-kernels 170 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-kernels.json \
  -- -k kernels
grep -h "passed\|failed" $R/conf-kernels.txt | tail -3 >> $LOG
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
step decode-8b-quant 70 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b-quant.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-decode-8b-int8 35 "${DB[@]:0:4}" $OLDPWD/.prev/"${DB[4]}" \
  "${DB[@]:5}" --shape 8b --quantizations int8 --out $R/before-decode-8b-int8.json)
if (( H200 )); then
  step anydev-Q4_K 45 taskset -c 0-1 python3 "${PEER[@]:0:6}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/anydev-Q4_K.json
  step anydev-Q8_0-b32 30 taskset -c 0-1 python3 "${PEER[@]:0:6}" --batch-sizes 32 $G/llama-8b-Q8_0.gguf --out $R/anydev-Q8_0-b32.json
  step decode-1b 20 "${DB[@]}" --shape 1b --out $R/decode-1b.json
fi
grep -h "steps: \|server CPU\|saturate \|x$\|anydev llama\|llama.cpp:\|anydev graphs   decode\|GEMMs per token" \
  $R/serve-*.txt $R/lin-*.txt $R/*-Q*.txt $R/llamacpp-*.txt $R/*decode-*.txt >> $LOG 2>/dev/null
call_end
