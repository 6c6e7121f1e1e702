#!/bin/bash
# Issue 7's figures again, the searches now seeded from the recorded H200 landscapes
# (benchmarks/results/landscapes/: call R's prefill sweep found 0.3546 ms at Llama-3-8B
# 4 x 2048 causal, against call N's unseeded budget-16 winner at 0.4069 ms and cuDNN's 0.3610).
# About 9 minutes; at most 8 files come back:
#   bash benchmarks/device_issue7.sh        (in `run` with carry [".whl"], or as a job of device_pair.sh)
set -u
source benchmarks/device_setup.sh || exit 1
python3 benchmarks/attention_h200.py --out $OUT/attn --prefill llama3-8b flux-dit \
    --decode llama3-8b:64:4096 llama3-8b:1:32768 llama3-8b:8:8192 --budget 16 --deadline ${DEADLINE:-500} \
    > $OUT/attention.log 2>&1
gzip -f $OUT/attn/*.db 2>/dev/null
cat $OUT/attn/*.md 2>/dev/null
