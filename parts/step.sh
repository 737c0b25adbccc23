# Sourced by the H200 call scripts: `step NAME LIMIT CMD...` runs CMD under `timeout`, its limit cut to
# what is left of BUDGET seconds since T0, its output appended to $R/NAME.txt and its exit status and
# seconds logged to $LOG. STEP_WRAP (an array, default empty) goes before CMD, e.g. (taskset -c 0-3).
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))); (( limit > left )) && limit=$left
  if (( limit < 5 )); then echo "skipped $name (no time left)" | tee -a $LOG; return; fi
  echo "\$ $*" >> $R/$name.txt; local t=$SECONDS
  timeout -k 5 -s ABRT $limit ${STEP_WRAP[@]+"${STEP_WRAP[@]}"} "$@" >> $R/$name.txt 2>&1
  echo "$? $name ($((SECONDS - t)) s, limit $limit)" | tee -a $LOG
}
# `install_prev`: the tree in .prev/ (an earlier commit, with a TREE file naming it) installed apart in
# /tmp/prev-site, for "before" runs beside this tree's in one call (PYTHONPATH=/tmp/prev-site:$SITE, cwd
# /tmp); SITE is the carried wheels' path. Its record goes to $R/env.txt.
install_prev() {
  SITE=$PYTHONPATH
  python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/prev-site ./.prev >> $R/env.txt 2>&1 \
    || echo "1 prev install" | tee -a $LOG
  { date -u; nvidia-smi -L; nproc; cat .prev/TREE 2>/dev/null
    (cd /tmp && PYTHONPATH=/tmp/prev-site:$SITE python3 -c "import anydev; print('before tree:', anydev.__file__)"); } >> $R/env.txt 2>&1
}
# `call_start`: a call's machine (date, GPUs, cores, CPU, torch and triton) in $R/env.txt, then the
# device set-up (scripts/device_setup.sh: the carried wheels, this tree), sourced so that its
# PYTHONPATH stays.
call_start() {
  { date -u; nvidia-smi -L; nproc; lscpu | head -20
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $R/env.txt 2>&1
  source scripts/device_setup.sh >> $R/env.txt 2>&1 || echo "1 setup" | tee -a $LOG
}
# `peer_pack`: after `llamacpp-peer.sh build` into /tmp/llamacpp-build, its bin/ (the two benches and
# the libraries they load by their build path) as $OUT/llamacpp-bin.tar.xz.NN, 15 MB parts (about 43 MB
# in all for sm_90): `cat` them into .peer/llamacpp-bin.tar.xz here and carry that file in a later call
# instead of building for 8 minutes. `peer_unpack` puts it back where the binaries look for their
# libraries.
peer_pack() {
  tar -C /tmp/llamacpp-build -cf - bin | xz -T8 -6 > /tmp/llamacpp-bin.tar.xz \
    && split -b 15m -d /tmp/llamacpp-bin.tar.xz $OUT/llamacpp-bin.tar.xz.
}
peer_unpack() {
  mkdir -p /tmp/llamacpp-build && tar -C /tmp/llamacpp-build -xJf .peer/llamacpp-bin.tar.xz
}
# `peer_start`: a GGUF call's folders (B: llama.cpp's build, G: the GGUF files) and peer_unpack in the
# background, logged as "unpack" in $LOG.
peer_start() {
  B=/tmp/llamacpp-build; G=/tmp/g; mkdir -p $G $B
  ( peer_unpack; echo "$? unpack $SECONDS" >> $LOG ) &
}
# `peer_libs`: the LD_LIBRARY_PATH the unpacked binaries run with: their own folder, then the GPU
# machine's CUDA toolkit, else the CUDA libraries of torch's wheels (when built elsewhere: parts/peer_build.sh).
peer_libs() {
  local wheels; wheels=$(python3 -c "import os, nvidia; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
  echo /tmp/llamacpp-build/bin:/usr/local/cuda/lib64${wheels:+:$wheels}
}
# `call_init NAME BUDGET`: a call script's set-up: Python unbuffered, its outputs in R=$OUT/r, its
# step log LOG, BUDGET seconds from now (unless BUDGET is set already), and on TERM (the call's limit)
# whatever $R holds packed into $OUT/NAME.tgz. `call_end` packs it when the script ends.
call_init() {
  export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
  CALL=$1; R=$OUT/r; LOG=$OUT/steps.log; BUDGET=${BUDGET:-$2}; T0=$SECONDS
  mkdir -p $R; touch $LOG
  trap 'tar czf $OUT/$CALL.tgz -C $OUT r; exit 143' TERM
}
call_end() {
  tar czf $OUT/$CALL.tgz -C $OUT r && rm -rf $R
  echo "call $CALL done in $((SECONDS - T0)) s" | tee -a $LOG
}
# `make_8b_files FORMATS...`: each random Llama-3-8B-shaped GGUF file at $G/llama-8b-FORMAT.gguf, one
# after the other on cores MAKE_CORES (default 14-15), each logged as "make-FORMAT" in $LOG. A file an
# earlier call on this machine made (logged in its $LOG, which is gone now) is made again unless KEEP_FILES
# is 1: then one that exists is kept.
make_8b_files() {
  local shape=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256) t
  for t in "$@"; do
    if [ "${KEEP_FILES:-0}" = 1 ] && [ -s $G/llama-8b-$t.gguf ]; then echo "0 make-$t kept $SECONDS" >> $LOG; continue; fi
    taskset -c ${MAKE_CORES:-14-15} python3 benchmarks/make_random_model.py $G/llama-8b-$t.gguf \
      "${shape[@]}" --gguf $t > $R/make-$t.txt 2>&1; echo "$? make-$t $SECONDS" >> $LOG
  done
}
# `make_models [8B FORMATS...]`: in the background, the 1B random checkpoint at /tmp/llama-1b (cores
# 2-15), then make_8b_files; waits (at most 120 s) for the 1B only.
make_models() {
  ( taskset -c 2-15 python3 benchmarks/make_random_model.py /tmp/llama-1b > $R/make-1b.txt 2>&1; echo "$? make-1b $SECONDS" >> $LOG
    make_8b_files "$@" ) &
  for _ in $(seq 60); do grep -q " make-1b " $LOG && break; sleep 2; done
}
# `wait_model FORMAT`: until make_models has logged that 8B file (at most 180 s).
wait_model() { for _ in $(seq 90); do grep -q " make-$1 " $LOG && return; sleep 2; done; }
# `install_after PATCH...`: this tree with each patch of parts/pending/ applied (`patch -p1`), installed
# apart in /tmp/after-site, for "after" runs beside this tree's (the "before") in one call:
# `after NAME LIMIT CMD...` runs `step` from /tmp/after (its benchmarks/ and parts/ under $AFTER) with
# that site first on PYTHONPATH. A patch that does not apply is logged in $LOG ("1 patch FILE"): the
# after figures are then not that patch's. AFTER_EDIT, if set, is a command run in the after tree once
# the patches are applied (e.g. parts/merge_plans.py).
install_after() {
  SITE=${SITE:-$PYTHONPATH}; AFTER=/tmp/after
  rm -rf $AFTER && mkdir -p $AFTER && tar --exclude=./.git --exclude=./.whl --exclude=./.peer --exclude=./build --exclude="*.egg-info" -cf - . | tar -xf - -C $AFTER
  local p; for p in "$@"; do
    (cd $AFTER && patch -p1 --forward < $OLDPWD/$p) >> $R/env.txt 2>&1 || echo "1 patch $p" | tee -a $LOG
  done
  if [ -n "${AFTER_EDIT:-}" ]; then (cd $AFTER && eval "$AFTER_EDIT") >> $R/env.txt 2>&1 || echo "1 after edit" | tee -a $LOG; fi
  rm -rf /tmp/after-site     # pip --target does not replace a package an earlier after tree left there
  python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/after-site $AFTER >> $R/env.txt 2>&1 \
    || echo "1 after install" | tee -a $LOG
  echo "after tree: this one with $*" >> $R/env.txt
}
# `in_after CMD...`: CMD (a step.sh function too, e.g. kernels_group) from /tmp/after with that site first.
in_after() { (cd $AFTER && PYTHONPATH=/tmp/after-site:$SITE "$@"); }
after() { in_after step "$@"; }
# `kernels_group NAME LIMIT [PYTEST -k FILTER]`: the conformance kernels group on nvidia (default the whole
# group) as step NAME, its report $R/NAME.json, and a process of that run left by a cut run stopped (only
# that run's: matched by its report's path).
kernels_group() {
  local name=$1 limit=$2 filter=${3:-kernels}
  step $name $limit taskset -c 0-11 python3 -m anydev.conformance --device nvidia -n 12 --report $R/$name.json \
    -- -k "$filter"
  pkill -f -- "--report $R/$name.json"; sleep 1
}
# `gguf_pair FORMAT BATCHES`: anydev (the PEER array) and llama.cpp (built in $B) on $G/llama-8b-FORMAT.gguf
# at BATCHES (e.g. 1,32), each a step of its own, once make_models has made the file.
gguf_pair() {
  wait_model $1
  step anydev-$1 60 "${PEER[@]}" --batch-sizes $2 $G/llama-8b-$1.gguf --out $R/anydev-$1.json
  llamacpp_step $1 $2
}
# `llamacpp_step FORMAT BATCHES [LIMIT]`: llama.cpp (built in $B) on $G/llama-8b-FORMAT.gguf at BATCHES
# as step llamacpp-FORMAT (limit 40 s unless given).
llamacpp_step() {
  LD_LIBRARY_PATH=$(peer_libs) step llamacpp-$1 ${3:-40} python3 benchmarks/gguf_peer_bench.py $G/llama-8b-$1.gguf \
    --llamacpp $B --batch-sizes $2 --skip-anydev --out $R/llamacpp-$1.json
}
# `file_step NAME LIMIT FILE BATCHES`: anydev on a GGUF file at BATCHES (e.g. 1,32) as step NAME
# (gguf_peer_bench: 128-token prompts, 128 new tokens, decode graphs, the median of 2 runs, on cores 0-1),
# its figures in $R/NAME.json. `in_after file_step ...` runs it on the after tree.
file_step() {
  step $1 $2 taskset -c 0-1 python3 benchmarks/gguf_peer_bench.py --device nvidia --repeats 2 --skip-llamacpp \
    --batch-sizes $4 $3 --out $R/$1.json
}
# `decode_step NAME LIMIT ARGS...`: decode_bench at batch 1, context 256, 64 new tokens, decode graphs, no
# HF peer, 3 repeats, on cores 0-1, with ARGS (e.g. --shape 1b) as step NAME, its figures in $R/NAME.json.
decode_step() {
  local name=$1 limit=$2; shift 2
  step $name $limit taskset -c 0-1 python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 \
    --prefill-len 0 --new-tokens 64 --modes graphs --hf none --repeats 3 --no-kernel-count "$@" --out $R/$name.json
}
# `summary`: the call's key lines appended to $LOG: gemv_check, the variants' totals, conformance counts,
# decode figures, each GGUF run's line.
summary() {
  cat $R/gemv-check-*.txt >> $LOG 2>/dev/null
  grep -h "ms a token" $R/variants-*.txt >> $LOG 2>/dev/null
  grep -h "passed\|failed" $R/conf-*.txt >> $LOG 2>/dev/null
  grep -h "anydev graphs.*decode\|x (decode_tokens_per_s)" $R/decode-*.txt >> $LOG 2>/dev/null
  local f; for f in $R/anydev-*.txt $R/record-*.txt $R/main-*.txt $R/llamacpp-*.txt; do
    [ -f $f ] && echo "$(basename $f): $(grep -h 'anydev llama\|llama.cpp:' $f)" >> $LOG; done
}
