#!/usr/bin/env bash
# Session 21, call E, short, on the machine calls B-D kept warm (issue 31): the 8B Q6_K random GGUF
# file, anydev beside llama.cpp (B's build, still in /tmp/llamacpp-build), batch 1 and 32.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-100}; T0=$SECONDS
trap 'tar czf $OUT/cE.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
G=/tmp/g; B=/tmp/llamacpp-build
step make-Q6_K 40 taskset -c 2-15 python3 benchmarks/make_random_model.py $G/llama-8b-Q6_K.gguf --hidden 4096 --layers 32 \
  --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256 --gguf Q6_K
step e2e-Q6_K 30 python3 benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1,32 --repeats 1 --skip-llamacpp \
  $G/llama-8b-Q6_K.gguf --out $R/e2e-Q6_K.json
[[ -x $B/bin/llama-bench ]] && step llamacpp-Q6_K 20 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-Q6_K.gguf \
  --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-Q6_K.json
grep -h "anydev llama\|llama.cpp:" $R/e2e-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cE.tgz -C $OUT r && rm -rf $R
echo "call E done in $((SECONDS - T0)) s" | tee -a $LOG
