#!/usr/bin/env bash
# Session 24, call A (issues 31 and 33), tree main at cac3bf6 (the sampler's chunked row maximum),
# .prev/ = core-busy-events-2 (ac22919: the same tree, the engine core reading its socket's event flags
# on a busy step instead of polling):
#   1. conformance on nvidia for q6_k_split (its tl.dot tile has not run on a GPU);
#   2. the 8B Q4_K and Q8_0 GGUF files end to end (batch 1 and 32) and llama.cpp on the same files in
#      the same call (built on cores 4-13 meanwhile, the files written on 14-15; its binaries come back for later calls);
#   3. the Q4_K batch-1 step profiled (device time per kernel, the sampler's maximum among them);
#   4. issue 33: core_step_cost on the 1B shape at 256 streams, offline against served, main and the
#      branch, one plain run and one under cProfile each.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
R=$OUT/r; mkdir -p $R; LOG=$OUT/steps.log; BUDGET=${BUDGET:-555}; T0=$SECONDS
trap 'tar czf $OUT/c24a.tgz -C $OUT r; exit 143' TERM
touch $LOG
source parts/step.sh
call_start
install_prev
B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G
( taskset -c 4-13 bash .peer/llamacpp-peer.sh build $PWD/.peer/llama.cpp $B > $R/build.txt 2>&1; echo "$? build $SECONDS" >> $LOG
  ls -la $B/bin > $R/llamacpp-bin.txt 2>&1; ldd $B/bin/llama-bench >> $R/llamacpp-bin.txt 2>&1
  tar -C $B -cf - bin | xz -T8 -6 > /tmp/llamacpp-bin.tar.xz && split -b 15m -d /tmp/llamacpp-bin.tar.xz $OUT/llamacpp-bin.tar.xz.
  echo "$? pack $SECONDS $(du -b /tmp/llamacpp-bin.tar.xz | cut -f1)" >> $LOG ) &
SHAPE=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
( taskset -c 14-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
  for t in Q4_K Q8_0; do taskset -c 14-15 python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf "${SHAPE[@]}" \
    --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG; done ) &
step conf-q6-split 100 taskset -c 0-1 python3 -m anydev.conformance --device nvidia -n 2 --report $R/conf-q6-split.json -- \
  -k "kernels and quantized_linear and q6_k_split" -rA
for _ in $(seq 90); do grep -q " make-1b " $LOG && break; sleep 2; done
CS=(benchmarks/core_step_cost.py --device nvidia --model /tmp/llama-1b --streams 256 --max-num-seqs 256 --output-len 256
    --deadline 60)
step core-main 60 taskset -c 0-3 python3 "${CS[@]}"
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step core-branch 60 taskset -c 0-3 python3 $OLDPWD/.prev/"${CS[0]}" "${CS[@]:1}")
PEER=(benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp)
for t in Q4_K Q8_0; do
  for _ in $(seq 120); do grep -q " make-$t " $LOG && break; sleep 2; done
  step anydev-$t 80 taskset -c 0-1 python3 "${PEER[@]}" --batch-sizes 1,32 $G/llama-8b-$t.gguf --out $R/anydev-$t.json
done
step prof-Q4_K-b1 50 taskset -c 0-1 python3 benchmarks/step_profile.py --device nvidia --graphs --context 256 --steps 8 \
  --rows 30 --model $G/llama-8b-Q4_K.gguf --batch-sizes 1
wait
for t in Q4_K Q8_0; do
  [[ -x $B/bin/llama-bench ]] && step llamacpp-$t 40 python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$t.gguf \
    --llamacpp $B --batch-sizes 1,32 --skip-anydev --out $R/llamacpp-$t.json
done
step core-main-prof 60 taskset -c 0-3 python3 "${CS[@]}" --skip-offline --profile $R/core-main.prof
(cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE step core-branch-prof 60 taskset -c 0-3 python3 $OLDPWD/.prev/"${CS[0]}" \
  "${CS[@]:1}" --skip-offline --profile $R/core-branch.prof)
for p in main branch; do [[ -f $R/core-$p.prof ]] && python3 -c "import pstats; pstats.Stats('$R/core-$p.prof').sort_stats('tottime').print_stats(25)" \
  > $R/core-$p-prof-top.txt 2>&1; done
grep -h "passed\|failed\|served\|offline \|anydev llama\|llama.cpp:\|device busy\|tok/s" $R/conf-*.txt $R/core-*.txt \
  $R/anydev-*.txt $R/prof-*.txt $R/llamacpp-*.txt >> $LOG 2>/dev/null
tar czf $OUT/c24a.tgz -C $OUT r && rm -rf $R
echo "call 24a done in $((SECONDS - T0)) s" | tee -a $LOG
