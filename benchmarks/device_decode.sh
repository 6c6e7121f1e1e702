#!/bin/bash
# A short device call (about 3 minutes): paged split-KV decode where the default's 8 splits
# underfill the GPU (batch 1 and 8, long contexts), against SGLang's defaults and SDPA.
#   bash benchmarks/device_decode.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
python3 benchmarks/attention_h200.py --out $OUT/attn --decode llama3-8b:1:32768 llama3-8b:8:8192 \
    --budget 14 --deadline ${DEADLINE:-160} > $OUT/attn.log 2>&1
rm -f $OUT/attn/attention.db
cat $OUT/attn/attention.md
