# Source after benchmarks/device_setup.sh: SGLang 0.5.17 from the carried .sgl bundle (see
# ../shared/sglang-offline/README.md), unpacked once per machine, and the environment its
# offline run needs. Sets SGL (the bundle folder: SGL/model is the recipe's model).
ROOT="$(pwd)"; SGL="$ROOT/.sgl"; SITE=/tmp/sgl_site
if [ ! -f "$SITE/.unpacked_ok" ]; then
  rm -rf "$SITE" "$SITE.tmp" && mkdir -p "$SITE.tmp" && tar -xJf "$SGL/site.tar.xz" -C "$SITE.tmp" && \
    mv "$SITE.tmp/site" "$SITE" && touch "$SITE/.unpacked_ok" || { echo "unpack failed"; return 2; }
fi
# the bundle's stubs, with the submodules SGLang's HTTP server also imports (benchmarks/sglang_stubs)
rm -rf /tmp/sgl_stubs && cp -r "$SGL/stubs" /tmp/sgl_stubs && chmod -R u+w /tmp/sgl_stubs && \
  cp "$ROOT"/benchmarks/sglang_stubs/flashinfer_overlay/*.py /tmp/sgl_stubs/flashinfer/
export PYTHONPATH="/tmp/pkg:/tmp/site:$SITE:/tmp/sgl_stubs:$ROOT/benchmarks/sglang_stubs"
export SGLANG_IS_FLASHINFER_AVAILABLE=false SGLANG_ENABLE_JIT_DEEPGEMM=0 TVM_FFI_CACHE_DIR=/tmp/sgl_tvm_ffi_cache
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
mkdir -p $TVM_FFI_CACHE_DIR
[ -f "$SGL/jit_cache.tar.gz" ] && tar -xzf "$SGL/jit_cache.tar.gz" -C "$TVM_FFI_CACHE_DIR" 2>/dev/null
SGLANG_DISABLED_MODEL_ARCHS="$(cd "$SITE/sglang/srt/models" && ls *.py | sed 's/\.py$//' | grep -v -x -e qwen3_moe -e __init__ | paste -sd, -)"
export SGLANG_DISABLED_MODEL_ARCHS
if [ -z "${CUDA_HOME:-}" ]; then for c in /usr/local/cuda /usr/local/cuda-13.0; do [ -x "$c/bin/nvcc" ] && export CUDA_HOME=$c && break; done; fi
export PATH="$(dirname "$(command -v python3)"):${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
