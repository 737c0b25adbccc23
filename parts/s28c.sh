#!/usr/bin/env bash
# Session 28, call C (issue 31; the branch's measurement with call A's two GPU timings: the one call the
# device time left allows), the branch int8-fewer-ops against .prev/ = main (5c142ae's kernels):
# the batch-1 float GEMVs of dense, int8 and fp8 add their products up elementwise (one fma a value,
# summed after the loop), and int8 / q8_0_split codes become floats four a word (prmt, float16 pairs).
# In the sm_90 SASS the loop takes 4.69 instructions a value for int8 (6.53 on main), 4.03 for fp8
# (5.03), 4.28 for bf16 (6.38) and 5.55 for q8_0_split (6.27). Session 27 found the 8-bit GEMVs issue-
# bound on an H200 (fp8 reads int8's bytes 1.18x faster). This call:
#   1. conformance on nvidia, the linear groups (the prmt conversion runs only on a GPU);
#   2. the 1B and 8B GEMVs at batch 1, before and after (linear_bench, each tree in its own run);
#   2b. main's greedy argmax (two passes) against torch's max (parts/row_max_bench.py);
#   3. the 8B Q8_0 file at batch 1, the 8B bf16 / int8 / fp8 decoded, before and after;
#   4. decode attention alone against its partition count, warps and tile (parts/attn_sweep.py), then
#      the 1B decoded, before and after. Each step's limit is cut to what is left of BUDGET.
# Carry .whl and .prev (git archive of main: `git archive main | tar -x -C .prev`, TREE naming it).
set -uo pipefail
source parts/step.sh
call_init c28c 570
call_start
install_prev
G=/tmp/g; mkdir -p $G
make_models Q8_0
step conf-linear 100 taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/conf-linear.json \
  -- -k "kernels and linear"
grep -h "passed\|failed" $R/conf-linear.txt | tail -2 >> $LOG
pkill -f "anydev.conformance"; sleep 1
step row-max 20 taskset -c 0-1 python3 parts/row_max_bench.py --out $R/row-max.json
LB=(benchmarks/linear_bench.py --device nvidia --models 1B,8B --batches 1 --formats dense,int8,fp8_e4m3,q8_0_split)
step lin-after 45 taskset -c 0-1 python3 "${LB[@]}" --out $R/lin-after.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step lin-before 45 taskset -c 0-1 python3 $OLDPWD/.prev/"${LB[0]}" \
  "${LB[@]:1}" --out $R/lin-before.json)
for _ in $(seq 60); do grep -q " make-Q8_0 " $LOG && break; sleep 2; done
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1 $G/llama-8b-Q8_0.gguf)
step after-Q8_0-b1 40 taskset -c 0-1 python3 "${PEER[@]}" --out $R/after-Q8_0-b1.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q8_0-b1 40 taskset -c 0-1 python3 $OLDPWD/.prev/"${PEER[0]}" \
  "${PEER[@]:1}" --out $R/before-Q8_0-b1.json)
DB=(benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0 --new-tokens 64
    --modes graphs --hf none --repeats 1 --no-kernel-count)
step after-decode-8b 95 taskset -c 0-1 python3 "${DB[@]}" --shape 8b --quantizations none,int8,fp8 --out $R/after-decode-8b.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-decode-8b 95 taskset -c 0-1 python3 $OLDPWD/.prev/"${DB[0]}" \
  "${DB[@]:1}" --shape 8b --quantizations none,int8,fp8 --out $R/before-decode-8b.json)
step attn-sweep 60 taskset -c 0-1 python3 parts/attn_sweep.py --out $R/attn-sweep.json
step after-decode-1b 20 taskset -c 0-1 python3 "${DB[@]}" --shape 1b --out $R/after-decode-1b.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-decode-1b 20 taskset -c 0-1 python3 $OLDPWD/.prev/"${DB[0]}" \
  "${DB[@]:1}" --shape 1b --out $R/before-decode-1b.json)
grep -h "GEMMs per token\|anydev llama\|anydev graphs.*decode\|x (decode" $R/lin-*.txt $R/*-Q8_0-*.txt $R/*decode-*.txt $R/row-max.txt \
  >> $LOG 2>/dev/null
call_end
