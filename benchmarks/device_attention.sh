#!/bin/bash
# Record the attention landscapes (issue 7) with `evokernel sweep`, through the gate, about
# 9 minutes: the paged decode space at batch 1 x 32768 (795 valid points), then as much of
# the prefill space at Llama-3-8B 4 x 2048 causal (3936 valid points) as fits. A sweep
# appends to its CSV and a re-run measures only what is missing: to resume the prefill
# sweep, keep the CSV this call brings back at benchmarks/results/landscapes/ and run again.
#   bash benchmarks/device_attention.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
L=benchmarks/results/landscapes; mkdir -p $L
DEC=attention_decode_bf16_h200_llama3-8b_B1_C32768.csv
PRE=attention_prefill_bf16_h200_llama3-8b_4x2048_causal.csv
cp $L/$DEC $OUT/ 2>/dev/null; cp $L/$PRE $OUT/ 2>/dev/null
HERE=$(pwd)
# from /tmp: `python -m` puts the working folder first on sys.path, and the checkout's
# evokernel/ (without its package-dir mapping) would shadow the installed package
(cd /tmp && EVOKERNEL_DECODE_BATCH=1 EVOKERNEL_DECODE_CONTEXT=32768 timeout 230 python3 -m evokernel.cli sweep \
    "$HERE/examples/attention_decode.py" --out $OUT/$DEC --wall-time 210 --quiet > $OUT/sweep_decode.log 2>&1)
(cd /tmp && timeout 290 python3 -m evokernel.cli sweep "$HERE/examples/attention_prefill.py" --out $OUT/$PRE \
    --wall-time 270 --quiet > $OUT/sweep_prefill.log 2>&1)
wc -l $OUT/*.csv; tail -n 3 $OUT/sweep_decode.log $OUT/sweep_prefill.log
