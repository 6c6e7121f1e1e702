#!/bin/bash
# Record fused-MoE landscapes on the H200 (issue 4): every valid point of the shared-config
# space (examples/moe_landscape_h200.py) for each MODEL:M given, one CSV each under $OUT.
# Each sweep stops at its wall-time cap; run again on the same CSVs to finish them.
#   source benchmarks/device_setup.sh && bash benchmarks/record_moe_landscapes.sh 270 qwen3-30b-a3b:64 qwen3-30b-a3b:1024
set -u
WALL=$1; shift
HERE=$(pwd)
for spec in "$@"; do
  model=${spec%%:*}; m=${spec##*:}
  csv="$OUT/moe_bf16_h200_${model}_M${m}.csv"
  [ -f "$HERE/benchmarks/partial/$(basename "$csv")" ] && cp "$HERE/benchmarks/partial/$(basename "$csv")" "$csv"
  (cd /tmp && EVOKERNEL_MOE_MODEL=$model EVOKERNEL_MOE_M=$m python3 -m evokernel.cli sweep \
      "$HERE/examples/moe_landscape_h200.py" --out "$csv" --wall-time "$WALL" 2>&1 \
      | grep -v -e '^\s*$' -e CudaIPCTypes | tail -5 | tee -a "$OUT/sweep.log")
done
