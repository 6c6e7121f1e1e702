#!/bin/bash
# One device call (about 9.5 minutes): GEMM searches, seeded with gemm_seeds(M), at the four
# Llama-3-8B projections x seven batch sizes, each winner re-measured against cuBLAS and the
# template's default in the same processes (issue 5).
#   bash benchmarks/device_gemm.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
W=/tmp/gemm && rm -rf $W && mkdir -p $W
python3 benchmarks/gemm_h200.py --out $W --shapes llama3-8b:qkv llama3-8b:o llama3-8b:gate_up llama3-8b:down \
    --ms 16 64 256 512 2048 4096 8192 --budget 20 --deadline ${DEADLINE:-520} > $OUT/gemm.log 2>&1
cp $W/gemm.json $W/gemm.md $OUT/ 2>/dev/null
gzip -c $W/gemm.db > $OUT/gemm.db.gz 2>/dev/null
cat $OUT/gemm.md
