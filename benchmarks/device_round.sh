#!/bin/bash
# One device call for the next session (about 9 minutes): the gate's fidelity and throughput
# with process reuse (issue 3), then short GEMM and MoE runs against their baselines (issue 5)
# to see what compiles on the H200 and how the first figures look. Brings back at most 8 files.
#   bash benchmarks/device_round.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
W=/tmp/round && rm -rf $W && mkdir -p $W
python3 benchmarks/gate_h200.py --out $W/gate --phases fidelity throughput --window 60 --deadline 150 > $OUT/gate.log 2>&1
cp $W/gate/gate_h200.jsonl $OUT/ 2>/dev/null
python3 benchmarks/gemm_h200.py --out $W/gemm --shapes llama3-8b:qkv llama3-8b:down --ms 16 2048 --budget 30 \
    --deadline 170 > $OUT/gemm.log 2>&1
cp $W/gemm/gemm.json $W/gemm/gemm.md $OUT/ 2>/dev/null
python3 benchmarks/moe_h200.py --out $W/moe --models qwen3-30b-a3b --ms 64 1024 --budget 30 --deadline 170 \
    > $OUT/moe.log 2>&1
cp $W/moe/moe.json $W/moe/moe.md $OUT/ 2>/dev/null
grep -h '"summary"' $OUT/gate_h200.jsonl 2>/dev/null | cut -c1-600
cat $OUT/gemm.md $OUT/moe.md 2>/dev/null
