#!/bin/bash
# Session 4's last device call (about 9.5 minutes; results land under $OUT as they come):
#  1. the gate's throughput with ready-first judging (issue 3);
#  2. fused-MoE searches seeded with SGLang's configs: Qwen3-30B-A3B and Mixtral-8x7B (issue 5);
#  3. attention: prefill (Llama-3-8B, FLUX DiT) and paged decode (Llama-3-8B) searches (issue 7);
#  4. the GEMM rows call M did not reach (Llama-3-8B down projection, M >= 256).
#   bash benchmarks/device_final.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
mkdir -p $OUT/gate $OUT/moe $OUT/attn $OUT/gemm
python3 benchmarks/gate_h200.py --out $OUT/gate --phases throughput --window 50 --deadline 85 > $OUT/gate.log 2>&1
grep -h '"summary"' $OUT/gate/gate_h200.jsonl 2>/dev/null | cut -c1-400
python3 benchmarks/moe_h200.py --out $OUT/moe --models qwen3-30b-a3b mixtral-8x7b --ms 1 16 64 256 1024 4096 \
    --budget 16 --deadline 190 > $OUT/moe.log 2>&1
rm -f $OUT/moe/moe.db
cat $OUT/moe/moe.md
python3 benchmarks/attention_h200.py --out $OUT/attn --prefill llama3-8b flux-dit --decode llama3-8b:64:4096 \
    --budget 16 --deadline 170 > $OUT/attn.log 2>&1
rm -f $OUT/attn/attention.db
cat $OUT/attn/attention.md
python3 benchmarks/gemm_h200.py --out $OUT/gemm --shapes llama3-8b:down --ms 256 512 2048 4096 8192 --budget 10 \
    --deadline 85 > $OUT/gemm.log 2>&1
rm -f $OUT/gemm/gemm.db
cat $OUT/gemm/gemm.md
