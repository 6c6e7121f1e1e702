#!/bin/bash
# One device call (about 8-9 minutes): the figures on one footing.
#  1. GPU tests: the host-sync detections (in-process: benchmarks' harness, both graph modes;
#     through the CLI: the corpus's host_sync_* entries) and the side-by-side harness;
#     $OUT/tests.log;
#  2. every recorded winner against its baselines, graph-replayed and eagerly called, with
#     host time per call (benchmarks/footing_h200.py): $OUT/footing_<family>.json, footing.log.
# TESTS: pytest arguments (default: the footing tests and the host-sync corpus entries);
# SKIP_TESTS=1 skips them; FAMILIES (default all: gemm attention decode moe); DEADLINE (400 s).
#   bash benchmarks/device_footing.sh          (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
mkdir -p "$OUT"
if [ -z "${SKIP_TESTS:-}" ]; then
  cp -rL tests benchmarks examples /tmp/pkg/ 2>/dev/null
  (cd /tmp/pkg && timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -q -p no:cacheprovider -o addopts="" \
     ${TESTS:-tests/test_footing.py tests/test_launch_gpu.py "tests/test_gate.py::test_corpus_verdict" -k "footing or host_sync or side_by_side or host_side or synchronises or launch"}) \
     > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; tail -15 "$OUT/tests.log"
fi
if [ -z "${SKIP_CHECKS:-}" ]; then
  # the gate end to end on the GPU: a prefill winner and cuDNN SDPA under the varlen contract
  # (host-side lengths as plain inputs), a GEMM winner through its launcher; graph-timed.
  # (run from /tmp/pkg: the checkout's own evokernel/ holds the core alone)
  cp -rL examples benchmarks /tmp/pkg/ 2>/dev/null
  (cd /tmp/pkg && python3 - <<'PY'
import json, pathlib
from evokernel.search_spaces.attention import template_prefill as t
from evokernel.search_spaces.gemm import template as g
rows = json.loads(pathlib.Path("benchmarks/results/attention_prefill.json").read_text())["rows"]
pathlib.Path("/tmp/attn_winner.py").write_text(t.candidate_source(rows[0]["winner"], causal=True))
pathlib.Path("/tmp/attn_cudnn.py").write_text(t.sdpa_source("cudnn", causal=True))
gemm = json.loads(pathlib.Path("benchmarks/results/gemm.json").read_text())["rows"]
pathlib.Path("/tmp/gemm_winner.py").write_text(g.candidate_source(gemm[31]["winner"]))
print("qwen3 qkv M=512 winner:", gemm[31]["winner_short"])
PY
  for c in attn_winner attn_cudnn; do
    timeout 240 python3 -m evokernel.cli check examples/problems/attention_prefill_bf16.py /tmp/$c.py --device cuda \
      --json > /tmp/check_$c.json 2>> /tmp/checks.err &
  done
  timeout 240 python3 -m evokernel.cli check examples/problems/gemm_bf16.py /tmp/gemm_winner.py --device cuda --json \
    --param model=qwen3-30b-a3b --param layer=qkv --param m=512 > /tmp/check_gemm_winner.json 2>> /tmp/checks.err &
  wait
  python3 -c "
import json, glob
for f in sorted(glob.glob('/tmp/check_*.json')):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, 'unreadable', e); continue
    t = (d.get('timings') or [{}])[0]
    print(f.split('/')[-1], 'accepted' if d.get('accepted') else 'REJECTED', d.get('reason', '')[:300], t.get('median_ms'), t.get('footing'))
" | tee "$OUT/checks.log"; tail -5 /tmp/checks.err >> "$OUT/checks.log")
fi
python3 benchmarks/footing_h200.py --out "$OUT" --deadline "${DEADLINE:-400}" ${FAMILIES:+--families $FAMILIES} \
  2>&1 | tee "$OUT/footing.log" | tail -140
