#!/bin/bash
# One device call (about 8-9 minutes): do the warp-specialised GEMM kernels work, and do they
# pay? (issue 5, session 10's CPU work, first measured here)
#  1. GPU tests (unless SKIP_TESTS=1): the Gluon kernel against torch (ragged shapes, every
#     schedule, tail, swap-AB, ping-pong and epilogue), Triton's own cooperative kernel
#     (WARP_SPEC=1, 4 warps); each test's outcome in $OUT/coop/tests_{gluon,coop}.log (a NaN
#     or a wrong result fails here before any search can meet it);
#  2. the probes named in PROBES (default "coop"), under the gate's harness (`--timing
#     gate`: 4 rotated input sets, L2 flushed), cuBLAS and the candidates interleaved over
#     rounds:
#     - coop: the searches' winners, Triton's cooperative kernels and the Gluon kernels at
#       the shapes where cuBLAS runs its `coop` kernels (call BB); $OUT/coop/coop_probe.*;
#     - small: few tokens (Llama o/qkv M=64, o M=16, Qwen3 o M=256): the winners there,
#       the deep narrow tiles cuBLAS runs, the Gluon kernel's (swap-AB among them);
#       $OUT/coop/small_probe.*.
#     Kernels that failed (or hung: rc=124) their tests stay out of the probes.
# SHAPES / SMALL_SHAPES trim the probes; DEADLINE (default 300) and SMALL_DEADLINE (150)
# bound them.
#   bash benchmarks/device_coop.sh                         (in `run`, with carry [".whl"])
#   SKIP_TESTS=1 PROBES=small bash benchmarks/device_coop.sh
set -u
source benchmarks/device_setup.sh || exit 1
D=$OUT/coop
mkdir -p $D
# (Triton's own cooperative kernels, " coop" in the probe's names, hung on the H200 in every
# GPU case of call S11b: out of the probes unless EXCLUDE says otherwise)
EXCLUDE="${EXCLUDE- coop}"
if [ -z "${SKIP_TESTS:-}" ]; then
  cp -r tests /tmp/pkg/ 2>/dev/null
  # each kernel's tests in their own process (a hang, a sticky CUDA fault or a collection
  # error in one must not take the other's verdict with it); a kernel whose tests failed,
  # errored, hung (rc=124) or did not collect (rc=2+) stays out of the probes
  # (Triton's cooperative kernel, TESTS="gluon coop": each GPU case in its own process and
  # under its own timeout, since each hung in session 11; its GPU cases are now
  # xfail(run=False), so the default runs the Gluon kernel's tests alone)
  for kind in ${TESTS:-gluon}; do
    if [ $kind = gluon ]; then sels=("tests/test_gluon_gemm.py"); else
      sels=("tests/test_triton_gemm.py::test_the_cooperative_kernel_is_one_producer_and_two_consumer_warpgroups_on_hopper")
      for i in 0 1 2 3; do sels+=("tests/test_triton_gemm.py::test_the_cooperative_kernel_matches_torch_on_the_gpu[over$i-shape$i]"); done
    fi
    : > $D/tests_$kind.log
    for sel in "${sels[@]}"; do
      echo "== $sel" >> $D/tests_$kind.log
      (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-90} python3 -m pytest -q -p no:cacheprovider -rA "$sel" >> $D/tests_$kind.log 2>&1
       echo "rc=$?" >> $D/tests_$kind.log)
      tail -3 $D/tests_$kind.log
    done
    if grep -qv '^rc=[05]$' <(grep '^rc=' $D/tests_$kind.log); then EXCLUDE="$EXCLUDE $kind"; fi
  done
fi
echo "probes exclude: ${EXCLUDE:-nothing}"
for probe in ${PROBES:-coop}; do
  if [ "$probe" = coop ]; then
    timeout ${DEADLINE:-300} python3 benchmarks/gemm_sk_probe.py --set coop --timing gate --rounds 3 \
        --exclude $EXCLUDE --deadline $(( ${DEADLINE:-300} - 40 )) --out $D \
        --shapes ${SHAPES:-qkv-512 o-8192 qwen-qkv-2048 gate_up-512} > $D/coop.log 2>&1
  else
    timeout ${SMALL_DEADLINE:-150} python3 benchmarks/gemm_sk_probe.py --set small --timing gate --rounds 3 \
        --exclude $EXCLUDE --deadline $(( ${SMALL_DEADLINE:-150} - 30 )) --out $D \
        --shapes ${SMALL_SHAPES:-o-64 qwen-o-256 qkv-64 o-16} > $D/small.log 2>&1
  fi
  tail -3 $D/$probe.log
  cat $D/${probe}_probe.md 2>/dev/null
done
