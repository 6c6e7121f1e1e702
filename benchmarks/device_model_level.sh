#!/bin/bash
# Issue 9's model-level figures on one H200, in two device calls of about 4.5 minutes each
# (results land under $OUT as each model finishes; a second call adds its model to the same
# model_level.json when OUT_PREV points at the first call's folder):
#   MODELS=flux bash benchmarks/device_model_level.sh      (in `run`, with carry [".whl"])
#   MODELS=qwen bash benchmarks/device_model_level.sh
# DEADLINE (search seconds per model, default 90) and BUDGET (evaluations, default 20) trim it.
set -u
source benchmarks/device_setup.sh || exit 1
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
mkdir -p $OUT/model_level
if [ -n "${OUT_PREV:-}" ] && [ -f "$OUT_PREV/model_level.json" ]; then cp "$OUT_PREV/model_level.json" $OUT/model_level/; fi
python3 benchmarks/model_level_h200.py --models "${MODELS:-flux,qwen}" --budget "${BUDGET:-20}" \
    --deadline "${DEADLINE:-90}" --out $OUT/model_level > $OUT/model_level.log 2>&1
echo "exit $?"
rm -rf $OUT/model_level/inductor_cache
gzip -f $OUT/model_level/model_level.db 2>/dev/null
tail -5 $OUT/model_level.log
cat $OUT/model_level/model_level.md
