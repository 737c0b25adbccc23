#!/usr/bin/env bash
# Session 23, call D (issues 33 and 31), this tree: the engine core process's switch interval
# (serving/engine_core.py's CORE_SWITCH_INTERVAL_S, 20 ms) against Python's 5 ms and 50 ms, each a
# serve_bench run of its own at 256 streams / 4 front ends (the constant edited in this machine's copy
# between runs); 64 / 2 at 5 and 20 ms. The offline engine in each run is the benchmark's own process
# (the default interval): the same reference every run, so its spread is the machine's noise. Before
# them, on cores 0-1: the 8B Q4_K file at batch 1 with the H100's q4_k batch-1 plans (call C's sweep)
# and without them (.prev/, 326b196).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-480}; T0=$SECONDS
trap 'sed -i "s/^CORE_SWITCH_INTERVAL_S = .*/CORE_SWITCH_INTERVAL_S = 0.02/" serving/engine_core.py; tar czf $OUT/cD.tgz -C $OUT r; exit 143' TERM
source parts/step.sh
call_start
install_prev
G=/tmp/g; mkdir -p $G
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 2-15 python3 benchmarks/make_random_model.py $G/llama-8b-Q4_K.gguf "${SHAPE[@]}" --gguf Q4_K > $R/make-Q4_K.txt 2>&1
  echo "$? make-Q4_K $SECONDS" >> $LOG
  taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG ) &
MAKES=$!
for _ in $(seq 60); do grep -q " make-Q4_K " $LOG && break; sleep 2; done
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --batch-sizes 1 --repeats 2 --skip-llamacpp)
step after-Q4_K-b1 50 taskset -c 0-1 python3 "${PEER[@]}" $G/llama-8b-Q4_K.gguf --out $R/after-Q4_K-b1.json
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step before-Q4_K-b1 50 taskset -c 0-1 python3 \
  $OLDPWD/.prev/"${PEER[0]}" "${PEER[@]:1}" $G/llama-8b-Q4_K.gguf --out $R/before-Q4_K-b1.json)
wait $MAKES
SV=(python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b --case-deadline 30 --workloads saturate --output-len 512)
for run in 256:0.02 256:0.005 256:0.05 64:0.02 64:0.005; do
  IFS=: read n si <<< "$run"
  sed -i "s/^CORE_SWITCH_INTERVAL_S = .*/CORE_SWITCH_INTERVAL_S = $si/" serving/engine_core.py
  grep "^CORE_SWITCH_INTERVAL_S" serving/engine_core.py >> $R/serve-$n-si$si.txt
  fe=$((n == 256 ? 4 : 2))
  step serve-$n-si$si 60 "${SV[@]}" --batch $n --max-num-seqs $n --api-server-count $fe --out $R/serve-$n-si$si.json
done
sed -i "s/^CORE_SWITCH_INTERVAL_S = .*/CORE_SWITCH_INTERVAL_S = 0.02/" serving/engine_core.py
grep -h "anydev llama\|server / offline\|saturate " $R/after-*.txt $R/before-*.txt $R/serve-*.txt >> $LOG 2>/dev/null
tar czf $OUT/cD.tgz -C $OUT r && rm -rf $R
echo "call D done in $((SECONDS - T0)) s" | tee -a $LOG
