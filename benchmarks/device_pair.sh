#!/bin/bash
# Two device scripts at once on an nvidia-h200-x2 machine, one per GPU (device time is the
# machine's held time, so two GPUs do twice the work per minute). Each job sees one GPU
# (CUDA_VISIBLE_DEVICES), writes under $OUT/g0 or $OUT/g1 and is stopped at JOB_S seconds
# (default 540) so that both folders are packed, one .tgz each (a call brings back 8 files).
#   JOB0="bash benchmarks/device_issue5.sh" JOB1="MODELS=flux bash benchmarks/device_model_level.sh" \
#       bash benchmarks/device_pair.sh           (in `run`, kind nvidia-h200-x2, carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
ROOT_OUT=$OUT
# each job on its own half of the CPUs (compile workers of one job stay off the other's cores:
# a small model's decode step is host-bound)
read -r CPUS0 CPUS1 < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); h = len(c) // 2
print(*(",".join(map(str, x)) for x in (c[:h], c[h:2 * h])) if h >= 2 else "")')
PIN=""; command -v taskset > /dev/null && [ -n "${CPUS1:-}" ] && PIN=1
for g in 0 1; do
  eval "cmd=\${JOB$g:-}"
  [ -z "$cmd" ] && continue
  mkdir -p "$ROOT_OUT/g$g"
  cpus=""; [ -n "$PIN" ] && eval "cpus=\${CPUS$g}"
  ( export CUDA_VISIBLE_DEVICES=$g OUT="$ROOT_OUT/g$g"; cd "$(pwd)" && \
    timeout -k 10 "${JOB_S:-540}" ${PIN:+taskset -c $cpus} bash -c "$cmd" > "$ROOT_OUT/g$g/job.log" 2>&1; \
    echo "job $g exit $? (cpus ${cpus:-all})" >> "$ROOT_OUT/g$g/job.log" ) &
done
wait
for g in 0 1; do
  [ -d "$ROOT_OUT/g$g" ] || continue
  eval "cmd=\${JOB$g:-}"; echo "==== g$g: $cmd ===="; tail -40 "$ROOT_OUT/g$g/job.log"
  # a call brings back files of 16 MiB at most: compiler caches stay, stores are gzipped,
  # anything still over 4 MB is left out (and listed)
  find "$ROOT_OUT/g$g" -type d -name '*_cache' -prune -exec rm -rf {} + 2>/dev/null
  find "$ROOT_OUT/g$g" -type f -name '*.db' -exec gzip -f {} \; 2>/dev/null
  find "$ROOT_OUT/g$g" -type f -size +4M -printf '%P %s\n' > "$ROOT_OUT/g$g/left_out.txt"
  find "$ROOT_OUT/g$g" -type f -size +4M -delete
  tar -czf "$ROOT_OUT/g$g.tgz" -C "$ROOT_OUT" "g$g" && rm -rf "$ROOT_OUT/g$g"
done
ls -la "$ROOT_OUT"
