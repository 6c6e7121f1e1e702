#!/bin/bash
# One device call (about 9.5 minutes): GEMM searches, seeded with gemm_seeds(M), the nearest
# plain-matmul sweep's best points and earlier winners, at the four Llama-3-8B projections x
# seven batch sizes, each winner re-measured against cuBLAS and the template's default in the
# same processes (issue 5). Results are written under $OUT/gemm after every job, so a job cut
# by its time limit keeps what it finished. SHAPES, MS, BUDGET and DEADLINE trim it; NAME
# (default gemm) names the output folder; JOBS="MODEL:LAYER:M ..." replaces SHAPES x MS, so that one call can run several of these;
# EXTRA passes more flags to gemm_h200.py (e.g. EXTRA=--no-gluon).
#   bash benchmarks/device_gemm.sh        (in `run`, with carry [".whl"])
#   MS="16 64 256" DEADLINE=420 bash benchmarks/device_gemm.sh
set -u
source benchmarks/device_setup.sh || exit 1
D=$OUT/${NAME:-gemm}
mkdir -p $D
python3 benchmarks/gemm_h200.py --out $D \
    --shapes ${SHAPES:-llama3-8b:qkv llama3-8b:o llama3-8b:gate_up llama3-8b:down} \
    --ms ${MS:-16 64 256 512 2048 4096 8192} ${JOBS:+--jobs $JOBS} --budget ${BUDGET:-20} --deadline ${DEADLINE:-520} \
    ${EXTRA:-} > $D.log 2>&1
gzip -f $D/gemm.db 2>/dev/null
cat $D/gemm.md
