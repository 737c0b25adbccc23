#!/usr/bin/env bash
# Session 34, call C (issue 31, on an H200): the 8-bit batch-1 plans this card never had swept, run end
# to end in the same call. The q8_0_split GEMVs (the Q8_0 file's; no H200 plan is recorded) and the fp8
# qkv and lm_head, 512 or 1,024 inputs a step, each table of winners then taken with --plans beside a run
# without it: the Q8_0 file at batch 1 (anydev before and after, llama.cpp once; before and llama.cpp
# also at batch 32), the 8B bf16 and fp8 decode at batch 1 (one process each, before and after); then,
# on this tree with the winners merged into linear_plans.RECORDED (parts/merge_plans.py), the
# conformance checks of every recorded linear plan; last the Q6_K file at batch 1 beside llama.cpp.
# Carry .whl and .peer/llamacpp-bin.tar.xz.
set -uo pipefail
source parts/step.sh
call_init c34c 530
call_start
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
MAKE_CORES=2-15 make_8b_files Q8_0 Q6_K &
LB=(taskset -c 0-1 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table --sweep --sweep-batches 1
    --sweep-widths 512,1024)
step sweep-q8s-b1 150 "${LB[@]}" --sweep-formats q8_0_split --sweep-gemms qkv,o,gate_up,down,lm_head \
  --table-out $R/plans-q8s.txt --out $R/sweep-q8s-b1.json
step sweep-fp8-b1 80 "${LB[@]}" --sweep-formats fp8_e4m3 --sweep-gemms qkv,lm_head \
  --table-out $R/plans-fp8.txt --out $R/sweep-fp8-b1.json
plans() { [ -s $R/plans-$1.txt ] && echo --plans $R/plans-$1.txt; }
PEER=(taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp --batch-sizes 1)
wait_model Q8_0
step anydev-Q8_0-before 50 "${PEER[@]}" $G/llama-8b-Q8_0.gguf --batch-sizes 1,32 --out $R/anydev-Q8_0-before.json
step anydev-Q8_0-after 40 "${PEER[@]}" $G/llama-8b-Q8_0.gguf $(plans q8s) --out $R/anydev-Q8_0-after.json
llamacpp_step Q8_0 1,32 30
DB=(taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 --prefill-len 0
    --new-tokens 64 --modes graphs --hf none --repeats 1 --no-kernel-count --shape 8b --quantizations none,fp8)
step decode-8b-before 70 "${DB[@]}" --out $R/decode-8b-before.json
step decode-8b-after 70 "${DB[@]}" $(plans fp8) --out $R/decode-8b-after.json
AFTER_EDIT="python3 $PWD/parts/merge_plans.py backends/triton_kernels/linear_plans.py $R/plans-q8s.txt $R/plans-fp8.txt" \
  install_after
in_after kernels_group conf-plans 150 recorded_linear_plan
wait_model Q6_K
step anydev-Q6_K 40 "${PEER[@]}" $G/llama-8b-Q6_K.gguf --out $R/anydev-Q6_K.json
llamacpp_step Q6_K 1 30
grep -h "b1 " $R/sweep-*.txt | sed 's/Plan(block_m=1, //g' >> $LOG 2>/dev/null
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
grep -h "anydev llama\|llama.cpp:\|anydev graphs.*decode\|decode batch 1" $R/anydev-*.txt $R/llamacpp-*.txt \
  $R/decode-*.txt >> $LOG 2>/dev/null
call_end
