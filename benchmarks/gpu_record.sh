#!/usr/bin/env bash
# The recorded GPU run: every GPU measurement the project keeps in results/, one command, outputs under
# $OUT (default ./gpu-out). Run from the repo root on the GPU machine:
#   bash benchmarks/gpu_record.sh                         # every step; uses every visible GPU for TP
#   STEPS="decode decode4k" bash benchmarks/gpu_record.sh  # only these steps (e.g. to fit a time limit)
# Steps: conformance kernels overhead infer init decode decode4k prefill profile serve pp; and, asked for by
# name (STEPS=procs, at least 2 GPUs), procs: the process-per-rank runs (procs.txt, procs-*.json).
# Files, packed into $OUT/gpu-record.tgz at the end: env.txt, list_backends.txt, conformance.{json,md,txt},
# kernels.{json,txt} (kernel_bench: each Triton kernel beside its torch reference and the fastest torch path),
# overhead.{json,txt}, infer.txt (test_infer runs and the graph smoke check), init.txt + init-tp*.json,
# decode.{json,txt} (1B llama, batch 1 and 32, context 256, beside transformers eager and compiled),
# decode4k.{json,txt} (the same at context 4096), prefill.{json,txt} (an 8k-token prompt),
# profile.txt (the kernels of one decode step, by device time), serve_bench.{json,txt} (anydev serve under
# load with its ablations; needs fastapi, uvicorn and prometheus-client), pp.txt + pp-conformance.json
# (pipeline parallelism: test_infer at --pp 2 (rank threads and rank processes), each against the cpu
# reference's tokens, a seeded --pp 2 run on threads and on processes (pp-seed-*.txt, diffed), and the conformance
# send_recv and comm_abort groups on NCCL; needs 2 GPUs, 4 for --tp 2 --pp 2), steps.txt (each step's exit status).
# Every step runs whatever the others did (no `set -e`), and the archive is written even when the
# script is interrupted: a failed step costs its own output only.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pack() {   # the device tool returns at most 8 files: pack them into one
    (cd "$OUT" && shopt -s nullglob && files=(*.txt *.json *.md) && tar -czf gpu-record.tgz --remove-files -- "${files[@]}")
}
trap pack EXIT
# A step past its limit gets SIGABRT, and with it (PYTHONFAULTHANDLER) every Python thread's stack on
# stderr, from its rank processes too (timeout signals the step's whole process group): a hang says
# where it is. The step runs in the background so that a TERM to this script (an outer limit) is
# handled at once, the running step's group aborted the same way, and the archive written.
export PYTHONFAULTHANDLER=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}   # and NCCL says what it saw going wrong
STEP=
on_term() { [[ -n "$STEP" ]] && kill -ABRT -- "-$STEP" 2>/dev/null; sleep 2; exit 143; }
trap on_term TERM INT
run() {
    echo "\$ $*"
    timeout -k 10 -s ABRT "${STEP_TIMEOUT:-240}" "$@" & STEP=$!
    wait "$STEP"; local rc=$?; STEP=
    echo "(exit $rc)"; echo "$rc $*" >> "$OUT/steps.txt"
}

source scripts/device_setup.sh > "$OUT/setup.txt" 2>&1 || echo "1 device_setup" >> "$OUT/steps.txt"
NGPU=$(nvidia-smi -L | wc -l)
KV_GIB=${KV_GIB:-40}
STEPS=${STEPS:-conformance kernels overhead infer init decode decode4k prefill profile serve pp}
want() { [[ " $STEPS " == *" $1 "* ]]; }

{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv;
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)';
  git log --oneline -1 2>/dev/null; echo "steps: $STEPS"; } > "$OUT/env.txt" 2>&1
run python3 -m anydev list-backends > "$OUT/list_backends.txt" 2>&1
# (the kernels group compiles ~150 Triton specialisations: a longer limit)
want conformance && STEP_TIMEOUT=${CONFORMANCE_TIMEOUT:-600} \
    run python3 -m anydev.conformance --device nvidia --tp "$NGPU" --report "$OUT/conformance.json" > "$OUT/conformance.txt" 2>&1
want kernels && run python3 benchmarks/kernel_bench.py --device nvidia --out "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
want overhead && run python3 benchmarks/overhead_bench.py --device nvidia --out "$OUT/overhead.json" > "$OUT/overhead.txt" 2>&1
want infer && {
  run python3 examples/test_infer.py --device nvidia --tp "$NGPU" --enable-paged-attn
  run python3 examples/test_infer.py --device nvidia --tp "$NGPU" --enable-paged-attn --enforce-eager
  # beyond the demo's context: capped (said so), and the cpu and transformers checks ask for the cap
  run python3 examples/test_infer.py --device nvidia --tp "$NGPU" --max-new-tokens 100000
  run python3 examples/test_infer.py --device nvidia --tp 1 --enable-paged-attn --enforce-eager --kernels reference
  run python3 benchmarks/graph_smoke.py --device nvidia
  run python3 benchmarks/make_random_model.py /tmp/llama-1b
  run python3 examples/test_infer.py --device nvidia --model /tmp/llama-1b --tp 1 --max-new-tokens 64 --prompt 'Hello'
  # Llama-shaped with 8 KV heads (the seed's TP=8 shape), sharded over every GPU
  run python3 benchmarks/make_random_model.py /tmp/llama-8kv --hidden 4096 --layers 8 --heads 32 --kv-heads 8
  run python3 examples/test_infer.py --device nvidia --model /tmp/llama-8kv --tp "$NGPU" --enable-paged-attn \
      --batch-size 4 --max-new-tokens 64 --prompt 'Hello'
} > "$OUT/infer.txt" 2>&1
# init from a real 8B-shaped checkpoint on local disk, TP=1 and TP=every GPU (writes init-tp*.json)
if want init; then
    OUT="$OUT" NGPU="$NGPU" KV_GIB="$KV_GIB" bash benchmarks/init_record.sh > "$OUT/init.txt" 2>&1
    echo "$? benchmarks/init_record.sh" >> "$OUT/steps.txt"
fi
# decode on the 1B llama shape: anydev (graphs, eager) beside transformers (eager; static cache + compiled)
want decode && STEP_TIMEOUT=560 run python3 benchmarks/decode_bench.py --device nvidia --contexts 256 --prefill-len 0 \
    --out "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
want decode4k && STEP_TIMEOUT=560 run python3 benchmarks/decode_bench.py --device nvidia --contexts 4096 --prefill-len 0 \
    --out "$OUT/decode4k.json" > "$OUT/decode4k.txt" 2>&1
want prefill && STEP_TIMEOUT=560 run python3 benchmarks/decode_bench.py --device nvidia --batch-sizes 1 --contexts 256 \
    --new-tokens 2 --no-kernel-count --prefill-len 8192 --modes graphs --out "$OUT/prefill.json" > "$OUT/prefill.txt" 2>&1
want profile && run python3 benchmarks/step_profile.py --device nvidia --batch-sizes 1,32 --context 256 > "$OUT/profile.txt" 2>&1
# anydev serve under Poisson load (1B llama shape), prefix caching and chunked prefill off/on
if want serve; then
    if python3 -c 'import fastapi, uvicorn, prometheus_client' 2>/dev/null; then
        [ -d /tmp/llama-1b ] || python3 benchmarks/make_random_model.py /tmp/llama-1b > /dev/null
        STEP_TIMEOUT=560 run python3 benchmarks/serve_bench.py --device nvidia --model /tmp/llama-1b \
            --out "$OUT/serve_bench.json" > "$OUT/serve_bench.txt" 2>&1
    else
        echo "1 serve_bench: fastapi, uvicorn and prometheus-client are not installed" >> "$OUT/steps.txt"
    fi
fi
# pipeline parallelism over NCCL send/recv (eager), tokens checked against the cpu reference
if want pp; then
    if (( NGPU >= 2 )); then
        {
          run python3 -m anydev.conformance --device nvidia --tp "$NGPU" --report "$OUT/pp-conformance.json" \
              -- -k "send_recv or comm_abort"
          # a seeded request samples on the last stage: the same text from rank threads and rank processes
          for ex in threads mp; do
            run python3 examples/test_infer.py --device nvidia --pp 2 --executor $ex --temperature 0.9 --seed 5 \
                --batch-size 2 --max-new-tokens 32 > "$OUT/pp-seed-$ex.txt" 2>&1
            cat "$OUT/pp-seed-$ex.txt"
          done
          run diff <(grep -A1 -- '--- output' "$OUT/pp-seed-threads.txt") <(grep -A1 -- '--- output' "$OUT/pp-seed-mp.txt")
          run python3 examples/test_infer.py --device nvidia --pp 2 --batch-size 4 --max-new-tokens 64
          (( NGPU >= 4 )) && run python3 examples/test_infer.py --device nvidia --tp 2 --pp 2 --batch-size 4 --max-new-tokens 64
          run python3 examples/test_infer.py --device nvidia --pp 2 --executor mp --batch-size 4 --max-new-tokens 64
          [ -d /tmp/llama-1b ] || python3 benchmarks/make_random_model.py /tmp/llama-1b > /dev/null
          run python3 examples/test_infer.py --device nvidia --model /tmp/llama-1b --pp 2 --batch-size 4 \
              --max-new-tokens 64 --prompt 'Hello'
        } > "$OUT/pp.txt" 2>&1
    else
        echo "1 pp: pipeline parallelism needs 2 GPUs, this machine has $NGPU" >> "$OUT/steps.txt"
    fi
fi
# a process per rank at TP=2 with NCCL (tokens checked against the cpu reference, as the thread
# executor's), torchrun on one node and as two "nodes" on this host (one GPU each), the conformance
# processes group, and init/decode with processes beside threads in one run each
if want procs; then
    {
      run python3 examples/test_infer.py --device nvidia --tp 2 --executor threads
      run python3 examples/test_infer.py --device nvidia --tp 2 --executor mp
      run python3 examples/test_infer.py --device nvidia --tp 2 --executor mp --enforce-eager
      (( NGPU >= 4 )) && run python3 examples/test_infer.py --device nvidia --tp 2 --pp 2 --executor mp --batch-size 4 \
          --max-new-tokens 64
      run python3 -m torch.distributed.run --nproc-per-node 2 examples/test_infer.py --device nvidia --tp 2
      run env PORT="${PROCS_PORT:-29533}" bash benchmarks/two_nodes.sh --device nvidia
      run python3 -m anydev.conformance --device nvidia --tp 2 --report "$OUT/procs-conformance.json" -- -k processes
      [ -d /tmp/llama-1b ] || python3 benchmarks/make_random_model.py /tmp/llama-1b > /dev/null
      STEP_TIMEOUT=560 run python3 benchmarks/init_bench.py --device nvidia --tp 2 --model /tmp/llama-1b \
          --modes parallel,parallel-mp --repeat 2 --out "$OUT/procs-init.json"
      STEP_TIMEOUT=560 run python3 benchmarks/decode_bench.py --device nvidia --tp 2 --contexts 256 --prefill-len 0 \
          --new-tokens 64 --modes graphs,eager --executors threads,mp --hf none --no-kernel-count --out "$OUT/procs-decode.json"
    } > "$OUT/procs.txt" 2>&1
fi
tail -n 5 "$OUT"/*.txt
