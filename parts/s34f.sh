#!/usr/bin/env bash
# Session 34, call F (issue 31): the conformance checks of linear and quantized_linear on nvidia with
# the full sweep's single row of 1,001 outputs (not a multiple of the own GEMVs' 8 rows a block).
# Carry .whl.
set -uo pipefail
source parts/step.sh
call_init c34f 150
call_start
kernels_group conf-linear 120 "linear_equals"
grep -h "passed\|failed" $R/conf-*.txt | tail -1 >> $LOG
call_end
