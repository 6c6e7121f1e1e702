#!/bin/bash
# One device call: fused-MoE searches against SGLang's default and shipped H200 configs
# (issue 5), seeded with SGLang's configs and the winners at the nearest measured M, each
# winner re-measured with both baselines in the same processes. Results are written under
# $OUT/$NAME after every job. MODELS, MS, BUDGET, DEADLINE and NAME (default moe) trim it.
#   MODELS='mixtral-8x7b' MS='8 128 512 2048 4096' BUDGET=10 DEADLINE=500 bash benchmarks/device_moe.sh
#   (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
D=$OUT/${NAME:-moe}
mkdir -p $D
python3 benchmarks/moe_h200.py --out $D --models ${MODELS:-qwen3-30b-a3b mixtral-8x7b deepseek-v3-ep8} \
    --ms ${MS:-1 2 4 8 16 32 64 128 256 512 1024 2048 4096} --budget ${BUDGET:-10} --deadline ${DEADLINE:-520} \
    > $D.log 2>&1
gzip -f $D/moe.db 2>/dev/null
tail -3 $D.log
cat $D/moe.md
