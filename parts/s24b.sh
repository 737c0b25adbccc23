#!/usr/bin/env bash
# Session 24, call B (issue 31), this tree (the decode attention merging only the partitions that hold
# keys; ANYDEV_TRITON_PDL=3, the linear kernels prefetching their first weights before they wait),
# .prev/ = b1d07a3 (session 23's main: before the attention change), llama.cpp's binaries from call A carried
# (.peer/llamacpp-bin.tar.xz: no build):
#   1. conformance on nvidia: decode attention, and the linear kernels with ANYDEV_TRITON_PDL=3;
#   2. the 8B Q4_K file at batch 1: before, after, after with PDL 1 and 3 (one process each);
#   3. the 8B Q4_K and Q8_0 files (batch 1 and 32) and llama.cpp on them, in this call;
#   4. 8B bf16 / int8 / fp8 at batch 1 (the 1.7x target) and the 1B bf16 at batch 1 (the 1,400 tok/s
#      target), PDL off and 3; the Q4_K, int8 and 1B batch-1 steps profiled;
#   5. issue 33: core_step_cost's phases of a served and an offline step at 256 streams (1B shape).
# BUDGET: 555 s with a fresh session's device time (360 by default, what session 24 had left).
set -uo pipefail
source parts/step.sh
call_init c24b 360
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG
  LD_LIBRARY_PATH=$B/bin ldd $B/bin/llama-bench > $R/llamacpp-ldd.txt 2>&1 ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 14-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
  for t in Q4_K Q8_0; do taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
step conf-decode 60 taskset -c 0-3 python3 -m anydev.conformance --device nvidia -n 4 --report $R/conf-decode.json -- \
  -k "kernels and decode_attention" -rA
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
for _ in $(seq 90); do grep -q " make-Q4_K " $LOG && break; sleep 2; done
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q4_K-b1 60 taskset -c 0-1 python3 $OLDPWD/.prev/"${PEER[0]}" \
  "${PEER[@]:1}" --batch-sizes 1 $G/llama-8b-Q4_K.gguf --out $R/before-Q4_K-b1.json)
step after-Q4_K 70 taskset -c 0-1 python3 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K.json
for m in 1 3; do
  ANYDEV_TRITON_PDL=$m step pdl$m-Q4_K-b1 60 taskset -c 0-1 python3 "${PEER[@]}" --batch-sizes 1 $G/llama-8b-Q4_K.gguf \
    --out $R/pdl$m-Q4_K-b1.json
done
SP=(taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 --rows 30 --batch-sizes 1)
step prof-Q4_K-b1 40 "${SP[@]}" --model $G/llama-8b-Q4_K.gguf
for _ in $(seq 60); do grep -q " make-Q8_0 " $LOG && break; sleep 2; done
step after-Q8_0 60 taskset -c 0-1 python3 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-Q8_0.gguf --out $R/after-Q8_0.json
for t in Q4_K Q8_0; do
  LD_LIBRARY_PATH=$B/bin step llamacpp-$t 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf \
    --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$t.json
done
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count)
step decode-8b-quant-pdl0 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/decode-8b-quant-pdl0.json
step decode-1b-pdl0 40 "${DB[@]}" --shape 1b --out $R/decode-1b-pdl0.json
step prof-1b-b1 40 "${SP[@]}" --shape 1b
ANYDEV_TRITON_PDL=3 step decode-1b-pdl3 40 "${DB[@]}" --shape 1b --out $R/decode-1b-pdl3.json
ANYDEV_TRITON_PDL=3 step decode-8b-quant-pdl3 90 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 \
  --out $R/decode-8b-quant-pdl3.json
step prof-int8-b1 50 "${SP[@]}" --shape 8b --quantization int8
step core-phases 60 taskset -c 0-3 python3 benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 256 \
  --max-num-seqs 256 --output-len 256 --deadline 60
ANYDEV_TRITON_PDL=3 step conf-linear-pdl3 120 taskset -c 0-3 python3 -m anydev.conformance --device nvidia -n 4 \
  --report $R/conf-linear-pdl3.json -- -k "kernels and linear" -rA
grep -h "passed\|failed\|anydev llama\|llama.cpp:\|device busy\|graphs \|engine.step" $R/conf-*.txt $R/core-*.txt $R/before-*.txt $R/after-*.txt \
  $R/pdl*.txt $R/prof-*.txt $R/llamacpp-*.txt $R/decode-*.txt >> $LOG 2>/dev/null
call_end
