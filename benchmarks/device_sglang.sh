#!/bin/bash
# End-to-end SGLang on the H200 (issue 8), one device call (about 9.5 minutes):
#  1. fused-MoE searches for the recipe model's MoE shape (Qwen3-30B-A3B: E=128, N=768) at
#     the decode batch sizes, seeded with SGLang's shipped configs;
#  2. `evokernel export sglang-plugin` twice: configs only, and configs + evokernel's kernel;
#  3. SGLang 0.5.17 engines side by side (shipped, configs, kernel), warmed, A/B interleaved:
#     decode at batch 1/16/64/256 and prefill at 512/2048 tokens; numerics vs shipped.
# Needs carry [".whl", ".sgl"] (see ../shared/sglang-offline/README.md for .sgl).
#   bash benchmarks/device_sglang.sh
# SERVING=examples/workloads/chat_poisson.jsonl adds the serving comparison (a launched server
# per variant replaying the trace through SGLang's serving benchmark: TTFT, TPOT, end-to-end
# percentiles); ONLY_SERVING=1 leaves the one-batch A/B out.
set -u
source benchmarks/device_setup.sh || exit 1
source benchmarks/device_sglang_env.sh || exit 2
python3 benchmarks/sglang_e2e_h200.py --out $OUT --model "$SGL/model" --ms 1 16 64 256 --budget ${BUDGET:-12} \
    --search-deadline ${SEARCH_S:-170} --deadline ${DEADLINE:-540} --repeats ${REPEATS:-5} \
    ${SERVING:+--serving "$SERVING" --serving-prompts ${SERVING_PROMPTS:-100}} ${ONLY_SERVING:+--skip-one-batch} \
    > $OUT/e2e.log 2>&1
tail -30 $OUT/e2e.log
