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
ROOT="$(pwd)"; SGL="$ROOT/.sgl"; SITE=/tmp/sgl_site
if [ ! -f "$SITE/.unpacked_ok" ]; then
  rm -rf "$SITE" "$SITE.tmp" && mkdir -p "$SITE.tmp" && tar -xJf "$SGL/site.tar.xz" -C "$SITE.tmp" && \
    mv "$SITE.tmp/site" "$SITE" && touch "$SITE/.unpacked_ok" || { echo "unpack failed"; exit 2; }
fi
export PYTHONPATH="/tmp/pkg:/tmp/site:$SITE:$SGL/stubs"
export SGLANG_IS_FLASHINFER_AVAILABLE=false SGLANG_ENABLE_JIT_DEEPGEMM=0 TVM_FFI_CACHE_DIR=/tmp/sgl_tvm_ffi_cache
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
mkdir -p $TVM_FFI_CACHE_DIR
[ -f "$SGL/jit_cache.tar.gz" ] && tar -xzf "$SGL/jit_cache.tar.gz" -C "$TVM_FFI_CACHE_DIR" 2>/dev/null
SGLANG_DISABLED_MODEL_ARCHS="$(cd "$SITE/sglang/srt/models" && ls *.py | sed 's/\.py$//' | grep -v -x -e qwen3_moe -e __init__ | paste -sd, -)"
export SGLANG_DISABLED_MODEL_ARCHS
if [ -z "${CUDA_HOME:-}" ]; then for c in /usr/local/cuda /usr/local/cuda-13.0; do [ -x "$c/bin/nvcc" ] && export CUDA_HOME=$c && break; done; fi
export PATH="$(dirname "$(command -v python3)"):${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
python3 benchmarks/sglang_e2e_h200.py --out $OUT --model "$SGL/model" --ms 1 16 64 256 --budget ${BUDGET:-12} \
    --search-deadline ${SEARCH_S:-170} --deadline ${DEADLINE:-540} --repeats ${REPEATS:-5} \
    ${SERVING:+--serving "$SERVING" --serving-prompts ${SERVING_PROMPTS:-100}} ${ONLY_SERVING:+--skip-one-batch} \
    > $OUT/e2e.log 2>&1
tail -30 $OUT/e2e.log
