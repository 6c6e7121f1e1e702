#!/bin/bash
# One device call (about 8-9 minutes): do the warp-specialised GEMM kernels work, and do they
# pay? (issue 5, session 10's CPU work, first measured here)
#  1. GPU tests: the Gluon kernel against torch (ragged shapes, every schedule and epilogue),
#     Triton's own cooperative kernel (WARP_SPEC=1, 4 warps) through the template's GPU
#     tests; each test's outcome in $OUT/coop/tests.log (a NaN or a wrong result fails here
#     before any search can meet it);
#  2. the probe `--set coop --timing gate` (the gate's harness: 4 rotated input sets, L2
#     flushed): cuBLAS, the searches' winners, Triton's cooperative kernels and the Gluon
#     kernels, interleaved over rounds, at the shapes where cuBLAS runs its `coop` kernels
#     (call BB); $OUT/coop/coop_probe.{json,md};
#  3. the probe `--set small`: few tokens (Llama o/qkv M=64, o M=16, Qwen3 o M=256), the
#     winners there against the deep narrow tiles cuBLAS runs and the Gluon kernel's (swap-AB
#     among them); $OUT/coop/small_probe.{json,md}.
# SHAPES / SMALL_SHAPES trim the probes; DEADLINE (default 230) and SMALL_DEADLINE (130) bound them.
#   bash benchmarks/device_coop.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
D=$OUT/coop
mkdir -p $D
cp -r tests /tmp/pkg/ 2>/dev/null
(cd /tmp/pkg && timeout 150 python3 -m pytest -q -p no:cacheprovider -rA tests/test_gluon_gemm.py \
    tests/test_triton_gemm.py -k "gpu or cooperative or gluon" > $D/tests.log 2>&1; echo "rc=$?" >> $D/tests.log)
tail -25 $D/tests.log
# a Gluon or cooperative kernel that failed its tests (or hung them: rc=124) stays out of the
# probes, so that a hang cannot take the probes' other figures with it
EXCLUDE=""
grep -q "rc=124" $D/tests.log && EXCLUDE="gluon coop"
grep -qE "FAILED .*gluon" $D/tests.log && EXCLUDE="$EXCLUDE gluon"
grep -qE "FAILED .*cooperative" $D/tests.log && EXCLUDE="$EXCLUDE coop"
echo "probes exclude: ${EXCLUDE:-nothing}"
timeout ${DEADLINE:-230} python3 benchmarks/gemm_sk_probe.py --set coop --timing gate --rounds 3 --exclude $EXCLUDE \
    --deadline $(( ${DEADLINE:-230} - 30 )) --out $D \
    --shapes ${SHAPES:-qkv-512 o-8192 qkv-2048 gate_up-512 qwen-qkv-2048 o-512} > $D/probe.log 2>&1
tail -3 $D/probe.log
cat $D/coop_probe.md 2>/dev/null
timeout ${SMALL_DEADLINE:-130} python3 benchmarks/gemm_sk_probe.py --set small --timing gate --rounds 3 --exclude $EXCLUDE \
    --deadline $(( ${SMALL_DEADLINE:-130} - 20 )) --out $D \
    --shapes ${SMALL_SHAPES:-o-64 qwen-o-256 qkv-64 o-16} > $D/small.log 2>&1
tail -3 $D/small.log
cat $D/small_probe.md 2>/dev/null
