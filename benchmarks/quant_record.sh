#!/usr/bin/env bash
# The record on one GPU of quantized weights and decode GEMMs. Run from the repo root on the GPU
# machine; outputs under $OUT (default ./gpu-out), packed into $OUT/quant-record.tgz at the end:
#   bash benchmarks/quant_record.sh                          # every step (about 9 minutes on one GPU)
#   STEPS="linear decode8b" bash benchmarks/quant_record.sh  # only these steps
# Steps:
#   conformance  the kernels group's linear checks on nvidia (every format and dtype vs the reference)
#   linear       linear_bench: each decode GEMM of the 1B and 8B shapes at batch 1 and 32, cuBLAS bf16
#                beside anydev's linear and every quantized format (us, TB/s, GEMM time per token)
#   sweep        linear_bench --sweep: the Triton plans beside the heuristic's, batch 1
#   decode8b     decode_bench, Llama-3-8B shape, batch 1 and 32, context 256: bf16, int8, fp8 (graphs)
#   decode1b     the same on the 1B shape
#   gguf         random 8B-shaped GGUF files in Q4_K and Q8_0: each loaded (init_bench: GB/s of file
#                bytes, kept in blocks, the host's reading time by kind of tensor) and run by test_infer
#                (weights per rank, decode tok/s at batch 1); read_bench: the file's bytes by mmap, mmap
#                after MADV_POPULATE_READ and preadv at 1-16 threads (what bounds the loader's reading)
#   perplexity   tiny_llama.py trains the tiny Llama (on the CPU), perplexity.py scores its held-out
#                text on nvidia: bf16, int8, fp8 and its GGUF file of each block format, ratios over bf16
#   tiles-int8, tiles-fp8, tiles-q4_k, tiles-q8_0   linear_bench's batch-32 tl.dot tile sweep on the 8B shape; the plans that
#                beat the heuristic in $OUT/plans-*.txt (paste into triton_kernels/linear_plans.py's
#                RECORDED, then run decode8b again)
# Every step runs whatever the others did; steps.txt has each one's exit status.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
pack() { (cd "$OUT" && shopt -s nullglob && files=(*.txt *.json *.md) && tar -czf quant-record.tgz --remove-files -- "${files[@]}"); }
trap pack EXIT
run() {   # run NAME TIMEOUT COMMAND...: output to $OUT/NAME.txt
    local name=$1 limit=$2; shift 2
    echo "\$ $*" > "$OUT/$name.txt"
    timeout -k 10 "$limit" "$@" >> "$OUT/$name.txt" 2>&1
    echo "$? $name: $*" >> "$OUT/steps.txt"
}
source scripts/device_setup.sh > "$OUT/setup.txt" 2>&1 || echo "1 device_setup" >> "$OUT/steps.txt"
STEPS=${STEPS:-conformance linear decode8b decode1b gguf}
want() { [[ " $STEPS " == *" $1 "* ]]; }
{ date -u; nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; git log --oneline -1 2>/dev/null;
  echo "steps: $STEPS"; } > "$OUT/env.txt" 2>&1
SHAPE_8B=(--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256)
DECODE=(--device nvidia --batch-sizes 1,32 --contexts 256 --prefill-len 0 --new-tokens 64 --modes graphs --hf none
        --no-kernel-count --quantizations none,int8,fp8 --repeats 3)

want conformance && run conformance 240 python3 -m anydev.conformance --device nvidia --report "$OUT/conformance.json" -- -k linear
want linear && run linear 200 python3 benchmarks/linear_bench.py --device nvidia --out "$OUT/linear.json"
want sweep && run sweep 400 python3 benchmarks/linear_bench.py --device nvidia --batches 1 --sweep \
    --sweep-formats dense,int8,fp8_e4m3,q8_0,q4_k --out "$OUT/sweep.json"
want decode8b && run decode8b 500 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape 8b --out "$OUT/decode8b.json"
want decode1b && run decode1b 300 python3 benchmarks/decode_bench.py "${DECODE[@]}" --shape 1b --out "$OUT/decode1b.json"
want perplexity && run perplexity 400 bash -c "OMP_NUM_THREADS=4 python3 benchmarks/tiny_llama.py /tmp/tiny-llama && \
    python3 benchmarks/perplexity.py --device nvidia --model /tmp/tiny-llama --reference \
    --gguf \$(ls /tmp/tiny-llama/*.gguf | paste -sd,) --out $OUT/perplexity.json"
for fmt in int8 fp8 q4_k q8_0; do
    want "tiles-$fmt" && run "tiles-$fmt" 560 python3 benchmarks/linear_bench.py --device nvidia --models 8B --skip-table \
        --sweep --sweep-batches 32 --sweep-formats "${fmt/fp8/fp8_e4m3}" --table-out "$OUT/plans-$fmt.txt" \
        --out "$OUT/tiles-$fmt.json"
done
if want gguf; then
    for type in Q4_K Q8_0; do
        file=/tmp/llama-8b-${type,,}.gguf
        [[ -f $file ]] || run "gguf-write-$type" 120 python3 benchmarks/make_random_model.py "$file" "${SHAPE_8B[@]}" --gguf "$type"
        run "gguf-read-$type" 120 python3 benchmarks/read_bench.py "$file" --out "$OUT/gguf-read-$type.json"
        run "gguf-load-$type" 120 python3 benchmarks/init_bench.py --device nvidia --model "$file" --kv-gib-per-rank 4 \
            --modes parallel --out "$OUT/gguf-load-$type.json"
        run "gguf-infer-$type" 150 python3 examples/test_infer.py --device nvidia --model "$file" --max-new-tokens 256 \
            --max-cache-len 1024 --prompt Hello
    done
fi
