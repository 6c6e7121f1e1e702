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
  cp -r tests benchmarks examples /tmp/pkg/ 2>/dev/null
  (cd /tmp/pkg && timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -q -p no:cacheprovider -o addopts="" \
     ${TESTS:-tests/test_footing.py "tests/test_gate.py::test_corpus_verdict" -k "footing or host_sync or side_by_side or host_side or synchronises"}) \
     > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; tail -15 "$OUT/tests.log"
fi
python3 benchmarks/footing_h200.py --out "$OUT" --deadline "${DEADLINE:-400}" ${FAMILIES:+--families $FAMILIES} \
  2>&1 | tee "$OUT/footing.log" | tail -140
