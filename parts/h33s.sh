#!/usr/bin/env bash
# Issue 33 on one H200: decode with a JSON schema on every request (structured output, llguidance masks filled
# on the sampling rank beside the step) beside the same run without (benchmarks/structured_bench.py: the 1B Llama
# shape, a 32,000-token BPE vocabulary, 128-token prompts, 128 new tokens, 3 rounds), batch 32 (the target:
# >= 0.9x), then batch 8 for the trend, each under `timeout` (the whole under 60 s: batch 8 gets what batch 32
# left of H33S_BUDGET, 58 s). Needs llguidance (pip install -c keep-torch.txt -e ".[test]" installs it).
# Run from the repo root on the GPU machine; writes $OUT/r/h33s-structured-b32.{json,txt} and -b8, and logs each
# step's exit status and seconds to $OUT/h33s.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
LOG=$OUT/h33s.log
BUDGET=${H33S_BUDGET:-58}; T0=$SECONDS
python3 -c "import llguidance; print('llguidance', llguidance.__version__)" 2>&1 | tee -a $LOG
for step in "32 40" "8 58"; do
  set -- $step; B=$1; LIMIT=$2; T=$SECONDS
  LEFT=$((BUDGET - (SECONDS - T0))); (( LIMIT > LEFT )) && LIMIT=$LEFT   # batch 8 gets what 32 left
  CMD=(python3 benchmarks/structured_bench.py --device nvidia --prompt-len 128 --new-tokens 128 --vocab 32000
       --repeats 3 --batch $B --out $R/h33s-structured-b$B.json)
  echo "\$ ${CMD[*]}" > $R/h33s-structured-b$B.txt
  timeout -k 3 $LIMIT "${CMD[@]}" >> $R/h33s-structured-b$B.txt 2>&1
  echo "$? batch $B ($((SECONDS - T)) s, limit $LIMIT)" | tee -a $LOG
  tail -3 $R/h33s-structured-b$B.txt | tee -a $LOG
done
