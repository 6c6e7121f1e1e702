#!/bin/bash
# Issue 5, one device call (about 9.5 minutes; at most 8 files come back):
#  1. fused MoE with the small-batch GEMV structure at Qwen3 decode batch sizes, and Mixtral;
#  2. the fp8 GEMM (per-tensor scales) against torch._scaled_mm at two shapes.
#   bash benchmarks/device_issue5.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
W=/tmp/i5 && rm -rf $W && mkdir -p $W
python3 benchmarks/moe_h200.py --out $W/moe --models qwen3-30b-a3b mixtral-8x7b --ms 1 4 16 64 256 1024 --budget 16 \
    --deadline 330 > $OUT/moe.log 2>&1
cp $W/moe/moe.json $W/moe/moe.md $OUT/ 2>/dev/null
python3 benchmarks/gemm_h200.py --out $W/fp8 --fp8 tensor --shapes llama3-8b:qkv --ms 16 2048 --budget 14 \
    --deadline 170 > $OUT/fp8.log 2>&1
cp $W/fp8/gemm.json $OUT/fp8_gemm.json 2>/dev/null; cp $W/fp8/gemm.md $OUT/fp8_gemm.md 2>/dev/null
cat $OUT/moe.md $OUT/fp8_gemm.md 2>/dev/null
