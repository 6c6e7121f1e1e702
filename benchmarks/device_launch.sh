#!/bin/bash
# One device call (about 4-6 minutes): the compiled-handle launch path of the GEMM template
# (evokernel/runtime/launch.py, GemmLauncher), issue "One footing for every figure".
#  1. GPU tests (unless SKIP_TESTS=1): tests/test_launch_gpu.py (the launcher bitwise gemm's
#     on every path and the Gluon kernel, one JIT launch per plan, graphs, streams, hooks; the
#     MoE, attention and decode templates through their LaunchCache), then the template's
#     last-compiled probe and the Gluon kernel's GPU tests (both through gemm()); logs in
#     $OUT/launch/tests.log;
#  2. benchmarks/launch_overhead.py: host time per eager call of torch.matmul, gemm() and the
#     launcher at every row of benchmarks/results/gemm.json; $OUT/launch/launch_overhead.{json,md}.
# DEADLINE (default 240) bounds the benchmark; EXTRA passes it more flags (e.g. EXTRA="--rows
# llama3-8b:qkv:16"); TEST_TIMEOUT (default 300) bounds the tests.
#   bash benchmarks/device_launch.sh        (in `run`, with carry [".whl"])
set -u
source benchmarks/device_setup.sh || exit 1
D=$OUT/launch
mkdir -p $D
if [ -z "${SKIP_TESTS:-}" ]; then
  cp -r tests /tmp/pkg/ 2>/dev/null
  (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider -rA \
      tests/test_launch_gpu.py > $D/tests.log 2>&1; echo "rc=$?" >> $D/tests.log)
  (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider -rfE \
      "tests/test_triton_gemm.py::test_the_last_compiled_kernel_is_the_one_launched" \
      tests/test_gluon_gemm.py::test_the_gluon_kernel_matches_torch_on_the_gpu >> $D/tests.log 2>&1
   echo "rc=$?" >> $D/tests.log)
  grep -E "passed|failed|rc=" $D/tests.log | tail -6
fi
timeout $(( ${DEADLINE:-240} + 30 )) python3 benchmarks/launch_overhead.py --out $D --deadline ${DEADLINE:-240} \
    ${EXTRA:-} > $D/bench.log 2>&1
tail -3 $D/bench.log
cat $D/launch_overhead.md
