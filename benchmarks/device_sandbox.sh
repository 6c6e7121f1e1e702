#!/bin/bash
# Issue 23 on the H200: the sandbox's namespaces with the GPU inside.
#   1. benchmarks/sandbox_h200.py: does the judge's CUDA block (CUDA IPC) open inside each
#      variant of the sandbox (all protections, all but one, one alone, off)? It recommends
#      which protections to switch off for CUDA (sandbox_without.txt; "" when none).
#   2. gate_h200.py fidelity + throughput with the sandbox on (minus what 1 recommends) and
#      off, one after the other (same machine, same cores): top-10 within 1%, >= 600/min.
# Usage (one `run` call each; each fits in 10 minutes; carry [".whl"] as device_setup.sh says):
#   STEP=probe bash benchmarks/device_sandbox.sh      # ~2-4 min
#   STEP=on    bash benchmarks/device_sandbox.sh      # gate_h200 with the sandbox (WITHOUT=... to override)
#   STEP=off   bash benchmarks/device_sandbox.sh      # gate_h200 with EVOKERNEL_SANDBOX=off
#   STEP=all   bash benchmarks/device_sandbox.sh      # the three, with DEADLINE=150 s per gate run (under 10 min)
# Files under $OUT (at most 5): sandbox_h200.jsonl, sandbox_without.txt, on/gate_h200.jsonl,
# off/gate_h200.jsonl, device_sandbox.log.
set -u
source benchmarks/device_setup.sh || exit 1
STEP=${STEP:-all}
DEADLINE=${DEADLINE:-$([ "$STEP" = all ] && echo 150 || echo 520)}
WINDOW=${WINDOW:-$([ "$STEP" = all ] && echo 50 || echo 120)}
LOG=$OUT/device_sandbox.log
{
  echo "== $(date -u +%FT%TZ) step=$STEP kernel=$(uname -r) euid=$(id -u)"
  echo "unshare: $(command -v unshare || echo none); bwrap: $(command -v bwrap || echo none)"
  echo "max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
} >> "$LOG"

if [ "$STEP" = probe ] || [ "$STEP" = all ]; then
  timeout -k 10 $([ "$STEP" = all ] && echo 150 || echo 500) python3 benchmarks/sandbox_h200.py --out "$OUT" >> "$LOG" 2>&1
  echo "probe exit $?" >> "$LOG"
fi
if [ "$STEP" = on ] || [ "$STEP" = all ]; then
  if [ -z "${WITHOUT+x}" ]; then WITHOUT=$(cat "$OUT/sandbox_without.txt" 2>/dev/null || echo ""); fi
  mode=auto; [ "$WITHOUT" = off ] && { mode=off; WITHOUT=""; }
  echo "== sandbox on: EVOKERNEL_SANDBOX=$mode EVOKERNEL_SANDBOX_WITHOUT=$WITHOUT" >> "$LOG"
  EVOKERNEL_SANDBOX=$mode EVOKERNEL_SANDBOX_WITHOUT=$WITHOUT timeout -k 10 $((DEADLINE + 40)) \
    python3 benchmarks/gate_h200.py --out "$OUT/on" --phases fidelity throughput --deadline "$DEADLINE" \
    --window "$WINDOW" >> "$LOG" 2>&1
  echo "on exit $?" >> "$LOG"
fi
if [ "$STEP" = off ] || [ "$STEP" = all ]; then
  echo "== sandbox off" >> "$LOG"
  EVOKERNEL_SANDBOX=off timeout -k 10 $((DEADLINE + 40)) \
    python3 benchmarks/gate_h200.py --out "$OUT/off" --phases fidelity throughput --deadline "$DEADLINE" \
    --window "$WINDOW" >> "$LOG" 2>&1
  echo "off exit $?" >> "$LOG"
fi
# what to read first: the probe's summary, each run's sandbox line and summaries
grep -h '"summary"' "$OUT/sandbox_h200.jsonl" 2>/dev/null | tail -1
for side in on off; do
  [ -f "$OUT/$side/gate_h200.jsonl" ] || continue
  echo "== $side"; grep -h '"env"\|"summary"\|crashed' "$OUT/$side/gate_h200.jsonl" | cut -c1-600
done
find "$OUT" -type d -name '*_cache' -prune -exec rm -rf {} + 2>/dev/null
ls -la "$OUT" "$OUT"/on "$OUT"/off 2>/dev/null
