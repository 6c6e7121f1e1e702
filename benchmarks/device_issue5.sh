#!/bin/bash
# Issue 5, one device call (about 9.5 minutes; outputs kept small):
#  1. fused MoE with its structural genes (GEMV=1/2, FUSE_SILU) at Qwen3-30B-A3B's batch sizes,
#     then Mixtral-8x7B at M >= 64 (M 1 and 16 were measured in call T);
#  2. the fp8 GEMM (per-tensor scales) against torch._scaled_mm at two shapes.
#   bash benchmarks/device_issue5.sh        (in `run` with carry [".whl"], or a job of device_pair.sh)
set -u
source benchmarks/device_setup.sh || exit 1
W=/tmp/i5 && rm -rf $W && mkdir -p $W
python3 benchmarks/moe_h200.py --out $W/moe_qwen --models qwen3-30b-a3b --ms 1 16 64 256 1024 --budget 16 \
    --deadline ${QWEN_S:-220} > $OUT/moe_qwen.log 2>&1
python3 benchmarks/moe_h200.py --out $W/moe_mixtral --models mixtral-8x7b --ms 64 256 1024 --budget 12 \
    --deadline ${MIXTRAL_S:-150} > $OUT/moe_mixtral.log 2>&1
for m in qwen mixtral; do
  cp $W/moe_$m/moe.json $OUT/moe_$m.json 2>/dev/null; cp $W/moe_$m/moe.md $OUT/moe_$m.md 2>/dev/null
done
python3 benchmarks/gemm_h200.py --out $W/fp8 --fp8 tensor --shapes llama3-8b:qkv --ms 16 2048 --budget 12 \
    --deadline ${FP8_S:-130} > $OUT/fp8.log 2>&1
cp $W/fp8/gemm.json $OUT/fp8_gemm.json 2>/dev/null; cp $W/fp8/gemm.md $OUT/fp8_gemm.md 2>/dev/null
cat $OUT/moe_*.md $OUT/fp8_gemm.md 2>/dev/null
