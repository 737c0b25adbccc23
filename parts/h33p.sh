#!/usr/bin/env bash
# Issue 33 on one H200: decode at saturation with logprobs 5 on every request beside the same run without
# (benchmarks/logprobs_bench.py: the 1B Llama shape, 128-token prompts, 128 new tokens, 3 rounds), batch 64
# then 256, each under `timeout` (the whole under 60 s:
# batch 256 gets what batch 64 left of H33P_BUDGET, 58 s). Run from the repo root on the GPU machine; writes
# $OUT/r/h33p-logprobs-b64.{json,txt} and -b256, and logs each step's exit status and seconds to $OUT/h33p.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
LOG=$OUT/h33p.log
BUDGET=${H33P_BUDGET:-58}; T0=$SECONDS
for step in "64 27" "256 58"; do
  set -- $step; B=$1; LIMIT=$2; T=$SECONDS
  LEFT=$((BUDGET - (SECONDS - T0))); (( LIMIT > LEFT )) && LIMIT=$LEFT   # batch 256 gets what 64 left
  CMD=(python3 benchmarks/logprobs_bench.py --device nvidia --prompt-len 128 --new-tokens 128 --logprobs 5
       --repeats 3 --batch $B --out $R/h33p-logprobs-b$B.json)
  echo "\$ ${CMD[*]}" > $R/h33p-logprobs-b$B.txt
  timeout -k 3 $LIMIT "${CMD[@]}" >> $R/h33p-logprobs-b$B.txt 2>&1
  echo "$? batch $B ($((SECONDS - T)) s, limit $LIMIT)" | tee -a $LOG
  tail -3 $R/h33p-logprobs-b$B.txt | tee -a $LOG
done
