#!/bin/bash
# Issue 9's profiles on the H200 through the command line (about 4 minutes):
#  1. `evokernel profile` of the two example models at their real sizes (bf16);
#  2. `evokernel profile --sglang` of the recipe's SGLang engine (Qwen3-30B-A3B-shaped, 4
#     layers, dummy weights) at batch 1 and 64: prefill attributed to ops and modules, decode
#     kernels from SGLang's CUDA graphs.
# Needs carry [".whl", ".sgl"]; writes profile JSONs and the store under $OUT.
#   bash benchmarks/device_profile.sh
#   SGL_BATCHES=64 bash benchmarks/device_profile.sh     (PROFILE_MODELS, SGL_BATCHES: what to profile; "" skips;
#   PROFILE_DB: the store, default $OUT/profile.db, gzipped at the end)
set -u
source benchmarks/device_setup.sh || exit 1
source benchmarks/device_sglang_env.sh || exit 2
HERE=$(pwd)
cd /tmp  # `python -m` puts the working folder first on sys.path: not the checkout's evokernel/
for m in ${PROFILE_MODELS-flux_dit qwen3_moe_stack}; do
  EVOKERNEL_MODEL_SIZE=real timeout 150 python3 -m evokernel.cli profile "$HERE/examples/models/$m.py" --iters 5 \
      --db ${PROFILE_DB:-$OUT/profile.db} --json > $OUT/profile_$m.json 2> $OUT/profile_$m.log
  echo "$m: exit $?"
done
SARGS=(--server-arg=--load-format=dummy --server-arg=--tp-size=1 --server-arg=--attention-backend=triton
       --server-arg=--sampling-backend=pytorch --server-arg=--moe-runner-backend=triton
       --server-arg=--grammar-backend=none --server-arg=--disable-flashinfer-autotune
       --server-arg=--cuda-graph-backend-prefill=disabled --server-arg=--mem-fraction-static=0.5)
for b in ${SGL_BATCHES-1 64}; do
  timeout 240 python3 -m evokernel.cli profile --sglang "$SGL/model" --batch-size $b --input-len 512 --output-len 8 \
      "${SARGS[@]}" --db ${PROFILE_DB:-$OUT/profile.db} --json > $OUT/profile_sglang_b$b.json 2> $OUT/profile_sglang_b$b.log
  echo "sglang b$b: exit $?"
done
gzip -f ${PROFILE_DB:-$OUT/profile.db}
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("profile_*.json")):
    try:
        d = json.loads(f.read_text())
        s = d["summary"]
        print(f"{f.stem}: {s['per_iteration_ms']:.3f} ms/iter, {s['launches']} launches, gaps {s['gap_ms']:.3f} ms")
        for r in d["rows"][:6]:
            print(f"   {r['module'][:30]:30} {r['op'][:34]:34} {100 * r['share']:5.1f}%  {r['total_ms']:.3f} ms")
    except Exception as exc:
        print(f"{f.stem}: {type(exc).__name__}: {exc}")
PY
