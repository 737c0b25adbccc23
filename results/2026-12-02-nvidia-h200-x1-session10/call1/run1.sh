#!/usr/bin/env bash
# Session 10, call 1: llama.cpp built in the background (binaries packed back for call 2), three random
# 8B GGUF files made in the background, then on the old branch tips (staged under .stage/): the full
# conformance suite (h36), the model families' decode (h34), the logprobs cost (h33); then, time
# allowing, gguf_peer_bench (h31) on the files made.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_DEFAULT_FP_FUSION=1
ROOT=$PWD; O=/tmp/o; mkdir -p $O
pack() { tar -czf $OUT/run1.tgz -C $O . 2>/dev/null; }
trap pack EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $O/wheels.txt 2>&1
export PYTHONPATH=/tmp/site
{ date -u; nvidia-smi -L; nproc; free -g | head -2; df -h /tmp | tail -1; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; for b in h31 h33 h34 h36; do echo "$b $(cat .stage/$b/.commit)"; done; cat .peer/llama.cpp/SOURCE; } > $O/env.txt 2>&1
setsid nohup bash .peer/llamacpp-peer.sh build $ROOT/.peer/llama.cpp /tmp/lb > /tmp/lb.out 2>&1 < /dev/null &
use() { cd $ROOT/.stage/$1 && ln -sfn $ROOT/.whl .whl && python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1; }
use h31
mkdir -p /tmp/gguf
SHAPE="--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --intermediate 14336 --vocab 128256"
setsid nohup bash -c "for t in Q4_K Q8_0 Q6_K; do s=\$SECONDS; timeout 300 python3 benchmarks/make_random_model.py /tmp/gguf/llama-8b-\$t.gguf $SHAPE --gguf \$t || echo failed \$t; echo \$t \$((SECONDS - s)) s; done; touch /tmp/gguf/done" > /tmp/gguf/make.log 2>&1 < /dev/null &
sleep 2
use h36; OUT=$O/h36 timeout -k 5 250 bash results/2026-12-02-nvidia-h200-x1-session9/parts/conformance.sh > $O/h36.log 2>&1; echo "h36 rc $? at $SECONDS s" >> $O/steps.txt
use h34; OUT=$O/h34 timeout -k 5 240 bash results/2026-12-02-nvidia-h200-x1-session9/parts/qwen3.sh > $O/h34.log 2>&1; echo "h34 rc $? at $SECONDS s" >> $O/steps.txt
t=$SECONDS; while [[ ! -x /tmp/lb/bin/llama-batched-bench ]] && (( SECONDS < 520 )) && pgrep -f "cmake --build" >/dev/null; do sleep 3; done
echo "llama.cpp build: waited $((SECONDS - t)) s, at $SECONDS s" >> $O/steps.txt; tail -5 /tmp/lb.out > $O/lb-build.txt 2>&1; cp /tmp/lb.build.log $O/ 2>/dev/null
if [[ -x /tmp/lb/bin/llama-batched-bench ]]; then
  (cd /tmp/lb && tar -cJf /tmp/lb.txz bin/ && split -b 15M /tmp/lb.txz $OUT/lb.txz.part-) ; ls -la /tmp/lb/bin $OUT >> $O/lb-build.txt
fi
cat /tmp/gguf/make.log > $O/make-gguf.txt 2>&1; ls -la /tmp/gguf >> $O/make-gguf.txt
left=$((585 - SECONDS))
if (( left > 30 )) && [[ -e /tmp/gguf/llama-8b-Q4_K.gguf && -x /tmp/lb/bin/llama-bench ]]; then
  use h31; timeout -k 5 $left python3 benchmarks/gguf_peer_bench.py /tmp/gguf/llama-8b-Q4_K.gguf /tmp/gguf/llama-8b-Q8_0.gguf --device nvidia --llamacpp /tmp/lb --ttft --repeats 2 --out $O/peer.json > $O/peer.txt 2>&1; echo "peer rc $? at $SECONDS s" >> $O/steps.txt
fi
cat $O/steps.txt; tail -3 $O/h36.log $O/h34.log; tail -15 $O/peer.txt 2>/dev/null
