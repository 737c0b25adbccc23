#!/usr/bin/env bash
# Session 10, call 3, on the integrated tree (.stage/integ): issue 33's logprobs cost after the host-path
# fix (parts/h33p.sh), issue 32's start-up record (parts/h32.sh, llama.cpp's time to first token beside
# it), then issue 36's full conformance suite on one H200 with the performance row (parts/h36.sh).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
ROOT=$PWD; cd .stage/integ && ln -sfn $ROOT/.whl .whl
source scripts/device_setup.sh > $OUT/setup.txt 2>&1
mkdir -p /tmp/lb && cat $ROOT/.peer/lb/lb.txz.part-* | tar -xJ -C /tmp/lb
H33P_BUDGET=45 bash parts/h33p.sh > $OUT/h33p-run.txt 2>&1
LLAMA_BIN=/tmp/lb/bin H32_BUDGET=250 bash parts/h32.sh > $OUT/h32-run.txt 2>&1
H36_BUDGET=$((575 - SECONDS)) bash parts/h36.sh > $OUT/h36-run.txt 2>&1
cd $OUT && cat h33p.log; tail -25 h32.log; cat h36/steps.txt; grep -h "certified\|failed\|passed" h36.log | tail -6 | cut -c1-300
tar -czf h32.tgz h32 && rm -rf h32; tar -czf h36.tgz h36 && rm -rf h36; [[ -d r ]] && { tar -czf r.tgz r; rm -rf r; }; ls
