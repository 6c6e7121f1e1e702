#!/bin/bash
# The device runner: one step of the benchmarks on the H200, in one `run` call (carry
# [".whl"]; the SGLang steps also ".sgl"). It installs the package (device_setup.sh) and runs
# the step's Python script with its outputs under $OUT; environment variables trim each step.
#
#   bash benchmarks/device.sh STEP [ARGS]
#
# STEP (the old one-script-per-call name in brackets; its variables are unchanged):
#   gemm            GEMM searches against cuBLAS (gemm_h200.py) [device_gemm.sh]
#                   SHAPES, MS, JOBS ("MODEL:LAYER:M ..."), BUDGET (20), DEADLINE (520), NAME (gemm), EXTRA
#   moe             fused-MoE searches against SGLang's configs (moe_h200.py) [device_moe.sh]
#                   MODELS, MS, BUDGET (10), DEADLINE (520), NAME (moe)
#   attention       prefill and paged-decode searches seeded from the recorded landscapes
#                   (attention_h200.py) [device_issue7.sh; device_decode.sh: PREFILL= DECODE=...]
#                   PREFILL ("llama3-8b flux-dit"), DECODE, BUDGET (16), DEADLINE (500)
#   gate            the gate's fidelity and throughput (gate_h200.py) [part of device_round.sh,
#                   device_final.sh]  PHASES ("fidelity throughput"), WINDOW (60), DEADLINE (150)
#   footing         GPU tests of the footing, then every recorded winner against its baselines,
#                   graph-replayed and eager (footing_h200.py) [device_footing.sh]
#                   TESTS, SKIP_TESTS, SKIP_CHECKS, TEST_TIMEOUT (180), FAMILIES, DEADLINE (400)
#   launch          GPU tests of the launch path, then host time per call against torch.matmul
#                   (launch_overhead.py) [device_launch.sh]  SKIP_TESTS, TEST_TIMEOUT (300), DEADLINE (240), EXTRA
#   sandbox [S]     S = probe | on | off | all (default all, or $STEP): which protections CUDA
#                   allows (sandbox_h200.py), the gate with the sandbox on / off [device_sandbox.sh]
#                   DEADLINE, WINDOW, WITHOUT
#   coop            GPU tests of the warp-specialised kernels, then the probes (gemm_sk_probe.py)
#                   [device_coop.sh]  TESTS (gluon), PROBES (coop), SHAPES, SMALL_SHAPES, EXCLUDE,
#                   DEADLINE (300), SMALL_DEADLINE (150), SKIP_TESTS, TEST_TIMEOUT (90)
#   sglang          end to end through SGLang: search, promote, export, A/B (sglang_e2e_h200.py;
#                   carry .sgl) [device_sglang.sh]  BUDGET (12), SEARCH_S (170), DEADLINE (540),
#                   REPEATS (5), SERVING, SERVING_PROMPTS (100), ONLY_SERVING
#   sglang-long     issue 29: page-1 decode searches at long contexts, export, then SGLang engines side by
#                   side (shipped, A/A, each FLAGS value of --triton-attention-num-kv-splits, the package):
#                   wall clock, GPU kernel time per step, numerics, predicted vs measured (sglang_long_h200.py)
#                   POINTS ("1:32768 ..."), BUDGET (14), SEARCH_S (180), REPEATS (3), FLAGS ("16 32 64"), TILES ("256"),
#                   SEARCH_ONLY=1 (searches + export only: carry .whl), PACKAGE/MICRO (skip the searches: carry .sgl),
#                   SERVING=examples/workloads/long_context_poisson.jsonl (then the serving comparison; SERVING_PROMPTS 40, SERVING_ROUNDS 2),
#                   ONLY_SERVING=1 (with PACKAGE: the serving comparison alone, at the first FLAGS value),
#                   SERVING_CONTROL=1 (a second shipped server: the A/A),
#                   SERVING_CHUNK=-1 (every server's --chunked-prefill-size: -1 runs whole prompts, so they reach the prefill hook),
#                   LAYERS (the model with that many decoder layers instead of 4), MEM (--mem-fraction-static, 0.3),
#                   PREFILL_FROM=benchmarks/results/attention_prefill_gluon.json (its Gluon winners for the
#                   model's heads join the package: prefill entries, judged on the prompts' prefill latency)
#   model-level     model-level searches (model_level_h200.py) [device_model_level.sh]
#                   MODELS (flux,qwen), BUDGET (20), DEADLINE (90), OUT_PREV
#   profile         `evokernel profile` of the example models and an SGLang engine (carry .sgl)
#                   [device_profile.sh]  PROFILE_MODELS, SGL_BATCHES ("1 64"), PROFILE_DB
#   sweep-attention record attention landscapes with `evokernel sweep` [device_attention.sh]
#                   DECODE ("1:32768"), DEC_S (210), PREFILL ("llama3-8b:2048:4"), PRE_S (270); $OUT/sweeps.tgz
#   sweep-moe WALL MODEL:M ...   record fused-MoE landscapes [record_moe_landscapes.sh]
#   sweep-matmul WALL M:N:K ...  record matmul landscapes of matmul_space() through the judge
#                   (examples/matmul_landscape_h200.py), one CSV per shape under $OUT
#   ray             GPU tests of the devices (cuda:N) and of the Ray path, then the same matmul search
#                   in process and through one Ray actor, alternating windows (ray_overhead.py;
#                   carry .whl with ray-stripped-cp312.tar.xz, see ray_wheel.sh)
#                   TESTS, SKIP_TESTS, TEST_TIMEOUT (150), WINDOW (50), PAIRS (2), EVALUATIONS, DEADLINE (420)
#   wallclock       issue 30's wall-clock view (search_wallclock_h200.py): PARTS "x": an exhaustive sweep
#                   of matmul_space() on SHAPE_X (space order, SWEEP_S 150) and searches on it by
#                   STRATEGIES (model optuna-tpe default) x SEEDS (0 1), SEARCH_S (40) each; "y": on
#                   SHAPE_Y a second search (cold, shipped priors, warm from X's model store; BUDGET_Y 16)
#                   and the fidelity cascade against full judging on the MoE problem (MOE_M, FID_S 100),
#                   winners re-measured side by side ("f": the fidelity part alone). Carry .whl with
#                   scipy (not Ray's tarball)
#   prefill-gluon   issue 28: the Gluon FA3-style prefill kernel against the SDPA backends (prefill_gluon_h200.py)
#                   GPU tests first (tests/test_gluon_attention.py; SKIP_TESTS, TEST_TIMEOUT 150); SHAPES, CONFIGS,
#                   DEADLINE (520), GATE=1 (each winner also through the gate with the held-out shape);
#                   PROFILE="spec ..." with PROFILE_CONFIG: Nsight Compute on one call of that configuration
#                   and one of cuDNN per shape (before the benchmark; PROFILE_S 150), packed into ncu.tgz
#   decode-reduce   issue 29: each decode package entry with its splits combined by the separate kernel and by
#                   the last program (REDUCE=1), graph-replayed beside SGLang's default [decode_reduce_h200.py];
#                   PACKAGE (sglang_long_s24/package), POINTS ("1:32768 ..."), VARIANTS (all), DEADLINE (200),
#                   REFINE=1 (a copy of the package with each entry beaten here replaced: $OUT/refined); TIMELINE=1
#                   (each variant's per-program stamps too: where a call's time goes); FLOOR=1 (and the entry's
#                   grid and tile reading the K/V bytes alone, through the indices and in slot order); FLOOR_SWEEP=1
#                   (that gather floor over the kernel's shapes, its leaders timed with the attention in their shapes);
#                   ATTN_SWEEP=1 (the attention screened over light grids, its leaders timed against the entry);
#                   NCU="1:32768 ..."
#                   first profiles one call of each way per point with Nsight Compute (NCU_S 120, ncu_decode.tgz);
#                   GPU tests first (TESTS, default tests/test_decode_gpu.py: launch variants bitwise the plain one;
#                   SKIP_TESTS, TEST_TIMEOUT 120); carry .whl
#   pair            two steps at once on an nvidia-h200-x2 machine, one per GPU: JOB0, JOB1 (commands),
#                   JOB_S (540) [device_pair.sh]; e.g.
#                   JOB0="bash benchmarks/device.sh moe" JOB1="MODELS=flux bash benchmarks/device.sh model-level" \
#                       bash benchmarks/device.sh pair
# Every step's GPU tests stop after MAXFAIL (5) failures, so that their details come back before
# a step's TEST_TIMEOUT can kill pytest (which prints failures only at its end).
# Merge what a step brings back into the record with benchmarks/collect_results.py --add.
set -u
step=${1:-}
[ -n "$step" ] && shift
case "$step" in
  gemm|moe|attention|gate|footing|launch|sandbox|coop|sglang|sglang-long|model-level|profile|sweep-attention|sweep-moe|sweep-matmul|pair|ray|wallclock|prefill-gluon|decode-reduce) ;;
  *) sed -n '2,/^set -u$/{/^#/p}' "$0"; echo "unknown step: '$step'" >&2; exit 2 ;;
esac
source benchmarks/device_setup.sh || exit 1
HERE=$(pwd)

gemm() {
  local D=$OUT/${NAME:-gemm}
  mkdir -p "$D"
  python3 benchmarks/gemm_h200.py --out "$D" \
      --shapes ${SHAPES:-llama3-8b:qkv llama3-8b:o llama3-8b:gate_up llama3-8b:down} \
      --ms ${MS:-16 64 256 512 2048 4096 8192} ${JOBS:+--jobs $JOBS} --budget ${BUDGET:-20} --deadline ${DEADLINE:-520} \
      ${EXTRA:-} > "$D.log" 2>&1
  gzip -f "$D/gemm.db" 2>/dev/null
  cat "$D/gemm.md"
}

moe() {
  local D=$OUT/${NAME:-moe}
  mkdir -p "$D"
  python3 benchmarks/moe_h200.py --out "$D" --models ${MODELS:-qwen3-30b-a3b mixtral-8x7b deepseek-v3-ep8} \
      --ms ${MS:-1 2 4 8 16 32 64 128 256 512 1024 2048 4096} --budget ${BUDGET:-10} --deadline ${DEADLINE:-520} \
      > "$D.log" 2>&1
  gzip -f "$D/moe.db" 2>/dev/null
  tail -3 "$D.log"
  cat "$D/moe.md"
}

attention() {
  local prefill=${PREFILL-llama3-8b flux-dit} decode=${DECODE-llama3-8b:64:4096 llama3-8b:1:32768 llama3-8b:8:8192}
  python3 benchmarks/attention_h200.py --out "$OUT/attn" ${prefill:+--prefill $prefill} ${decode:+--decode $decode} \
      --budget ${BUDGET:-16} --deadline ${DEADLINE:-500} > "$OUT/attention.log" 2>&1
  gzip -f "$OUT"/attn/*.db 2>/dev/null
  cat "$OUT"/attn/*.md 2>/dev/null
}

gate() {
  mkdir -p "$OUT/gate"
  python3 benchmarks/gate_h200.py --out "$OUT/gate" --phases ${PHASES:-fidelity throughput} --window ${WINDOW:-60} \
      --deadline ${DEADLINE:-150} > "$OUT/gate.log" 2>&1
  grep -h '"summary"' "$OUT/gate/gate_h200.jsonl" 2>/dev/null | cut -c1-600
}

footing() {
  mkdir -p "$OUT"
  if [ -z "${SKIP_TESTS:-}" ]; then
    cp -rL tests benchmarks examples /tmp/pkg/ 2>/dev/null
    (cd /tmp/pkg && timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -o addopts="" \
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
gemm = [r for r in json.loads(pathlib.Path("benchmarks/results/gemm.json").read_text())["rows"]
        if (r["model"], r["layer"], r["M"]) == ("qwen3-30b-a3b", "qkv", 512)]
pathlib.Path("/tmp/gemm_winner.py").write_text(g.candidate_source(gemm[0]["winner"]))
print("qwen3 qkv M=512 winner:", gemm[0]["winner_short"])
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
}

launch() {
  local D=$OUT/launch
  mkdir -p "$D"
  if [ -z "${SKIP_TESTS:-}" ]; then
    cp -r tests /tmp/pkg/ 2>/dev/null
    (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -rA \
        tests/test_launch_gpu.py > "$D/tests.log" 2>&1; echo "rc=$?" >> "$D/tests.log")
    (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -rfE \
        "tests/test_triton_gemm.py::test_the_last_compiled_kernel_is_the_one_launched" \
        tests/test_gluon_gemm.py::test_the_gluon_kernel_matches_torch_on_the_gpu >> "$D/tests.log" 2>&1
     echo "rc=$?" >> "$D/tests.log")
    grep -E "passed|failed|rc=" "$D/tests.log" | tail -6
  fi
  timeout $(( ${DEADLINE:-240} + 30 )) python3 benchmarks/launch_overhead.py --out "$D" --deadline ${DEADLINE:-240} \
      ${EXTRA:-} > "$D/bench.log" 2>&1
  tail -3 "$D/bench.log"
  cat "$D/launch_overhead.md"
}

ray() {
  local D=$OUT/ray
  mkdir -p "$D"
  if [ -z "${SKIP_TESTS:-}" ]; then
    cp -rL tests /tmp/pkg/ 2>/dev/null; cp -rL examples /tmp/pkg/ 2>/dev/null
    (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -rfE -m gpu \
        ${TESTS:-tests/test_device.py tests/test_kernel_evaluator.py} > "$D/tests.log" 2>&1; echo "rc=$?" >> "$D/tests.log")
    grep -E "passed|failed|rc=" "$D/tests.log" | tail -4
  fi
  python3 -c "import ray; print('ray', ray.__version__)" 2>&1 | tail -1
  # from the installed copy: Ray puts the driver's cwd first on its workers' sys.path, and the
  # checkout's evokernel/ lacks the mapped subpackages (evaluators, search_spaces, mutators)
  (cd /tmp/pkg && timeout $(( ${DEADLINE:-420} + 30 )) python3 "$HERE/benchmarks/ray_overhead.py" --out "$D" \
      --window ${WINDOW:-50} --pairs ${PAIRS:-2} --deadline ${DEADLINE:-420} ${EVALUATIONS:+--evaluations $EVALUATIONS} \
      > "$D/bench.log" 2>&1)
  tail -4 "$D/bench.log"
}

sandbox() {
  # 1. does the judge's CUDA block (CUDA IPC) open inside each variant of the sandbox? It
  #    recommends which protections to switch off for CUDA (sandbox_without.txt; "" when none);
  # 2. the gate's fidelity and throughput with the sandbox on (minus what 1 recommends), 3. off.
  # Files under $OUT: sandbox_h200.jsonl, sandbox_without.txt, on/ and off/gate_h200.jsonl, device_sandbox.log.
  local s=${1:-${STEP:-all}}
  local deadline=${DEADLINE:-$([ "$s" = all ] && echo 150 || echo 520)}
  local window=${WINDOW:-$([ "$s" = all ] && echo 50 || echo 120)}
  local log=$OUT/device_sandbox.log
  {
    echo "== $(date -u +%FT%TZ) step=$s kernel=$(uname -r) euid=$(id -u)"
    echo "unshare: $(command -v unshare || echo none); bwrap: $(command -v bwrap || echo none)"
    echo "max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces 2>/dev/null)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
  } >> "$log"
  if [ "$s" = probe ] || [ "$s" = all ]; then
    timeout -k 10 $([ "$s" = all ] && echo 150 || echo 500) python3 benchmarks/sandbox_h200.py --out "$OUT" >> "$log" 2>&1
    echo "probe exit $?" >> "$log"
  fi
  if [ "$s" = on ] || [ "$s" = all ]; then
    if [ -z "${WITHOUT+x}" ]; then WITHOUT=$(cat "$OUT/sandbox_without.txt" 2>/dev/null || echo ""); fi
    local mode=auto; [ "$WITHOUT" = off ] && { mode=off; WITHOUT=""; }
    echo "== sandbox on: EVOKERNEL_SANDBOX=$mode EVOKERNEL_SANDBOX_WITHOUT=$WITHOUT" >> "$log"
    EVOKERNEL_SANDBOX=$mode EVOKERNEL_SANDBOX_WITHOUT=$WITHOUT timeout -k 10 $((deadline + 40)) \
      python3 benchmarks/gate_h200.py --out "$OUT/on" --phases fidelity throughput --deadline "$deadline" \
      --window "$window" >> "$log" 2>&1
    echo "on exit $?" >> "$log"
  fi
  if [ "$s" = off ] || [ "$s" = all ]; then
    echo "== sandbox off" >> "$log"
    EVOKERNEL_SANDBOX=off timeout -k 10 $((deadline + 40)) \
      python3 benchmarks/gate_h200.py --out "$OUT/off" --phases fidelity throughput --deadline "$deadline" \
      --window "$window" >> "$log" 2>&1
    echo "off exit $?" >> "$log"
  fi
  grep -h '"summary"' "$OUT/sandbox_h200.jsonl" 2>/dev/null | tail -1
  for side in on off; do
    [ -f "$OUT/$side/gate_h200.jsonl" ] || continue
    echo "== $side"; grep -h '"env"\|"summary"\|crashed' "$OUT/$side/gate_h200.jsonl" | cut -c1-600
  done
  find "$OUT" -type d -name '*_cache' -prune -exec rm -rf {} + 2>/dev/null
  ls -la "$OUT" "$OUT"/on "$OUT"/off 2>/dev/null
}

coop() {
  local D=$OUT/coop
  mkdir -p "$D"
  # (Triton's own cooperative kernels, " coop" in the probe's names, hung on the H200 in every
  # GPU case: out of the probes unless EXCLUDE says otherwise)
  EXCLUDE="${EXCLUDE- coop}"
  if [ -z "${SKIP_TESTS:-}" ]; then
    cp -r tests /tmp/pkg/ 2>/dev/null
    # each kernel's tests in their own process (a hang, a sticky CUDA fault or a collection
    # error in one must not take the other's verdict with it); a kernel whose tests failed,
    # errored, hung (rc=124) or did not collect (rc=2+) stays out of the probes
    # (TESTS="gluon coop" also runs Triton's cooperative kernel, each GPU case in its own
    # process and under its own timeout; its GPU cases are xfail(run=False))
    local kind sel sels
    for kind in ${TESTS:-gluon}; do
      if [ $kind = gluon ]; then sels=("tests/test_gluon_gemm.py"); else
        sels=("tests/test_triton_gemm.py::test_the_cooperative_kernel_is_one_producer_and_two_consumer_warpgroups_on_hopper")
        for i in 0 1 2 3; do sels+=("tests/test_triton_gemm.py::test_the_cooperative_kernel_matches_torch_on_the_gpu[over$i-shape$i]"); done
      fi
      : > "$D/tests_$kind.log"
      for sel in "${sels[@]}"; do
        echo "== $sel" >> "$D/tests_$kind.log"
        (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-90} python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -rA "$sel" >> "$D/tests_$kind.log" 2>&1
         echo "rc=$?" >> "$D/tests_$kind.log")
        tail -3 "$D/tests_$kind.log"
      done
      if grep -qv '^rc=[05]$' <(grep '^rc=' "$D/tests_$kind.log"); then EXCLUDE="$EXCLUDE $kind"; fi
    done
  fi
  echo "probes exclude: ${EXCLUDE:-nothing}"
  local probe
  for probe in ${PROBES:-coop}; do
    if [ "$probe" = coop ]; then
      timeout ${DEADLINE:-300} python3 benchmarks/gemm_sk_probe.py --set coop --timing gate --rounds 3 \
          --exclude $EXCLUDE --deadline $(( ${DEADLINE:-300} - 40 )) --out "$D" \
          --shapes ${SHAPES:-qkv-512 o-8192 qwen-qkv-2048 gate_up-512} > "$D/coop.log" 2>&1
    else
      timeout ${SMALL_DEADLINE:-150} python3 benchmarks/gemm_sk_probe.py --set small --timing gate --rounds 3 \
          --exclude $EXCLUDE --deadline $(( ${SMALL_DEADLINE:-150} - 30 )) --out "$D" \
          --shapes ${SMALL_SHAPES:-o-64 qwen-o-256 qkv-64 o-16} > "$D/small.log" 2>&1
    fi
    tail -3 "$D/$probe.log"
    cat "$D/${probe}_probe.md" 2>/dev/null
  done
}

sglang() {
  source benchmarks/device_sglang_env.sh || exit 2
  python3 benchmarks/sglang_e2e_h200.py --out "$OUT" --model "$SGL/model" --ms 1 16 64 256 --budget ${BUDGET:-12} \
      --search-deadline ${SEARCH_S:-170} --deadline ${DEADLINE:-540} --repeats ${REPEATS:-5} \
      ${SERVING:+--serving "$SERVING" --serving-prompts ${SERVING_PROMPTS:-100}} ${ONLY_SERVING:+--skip-one-batch} \
      > "$OUT/e2e.log" 2>&1
  tail -30 "$OUT/e2e.log"
}

sglang_long() {
  # the searches alone (SEARCH_ONLY=1) need no SGLang: carry .whl; the engines need .sgl too
  # (both do not fit one carry with scipy's wheel: run the searches first, then PACKAGE=...)
  [ -z "${SEARCH_ONLY:-}" ] && { source benchmarks/device_sglang_env.sh || exit 2; }
  if [ -n "${SEARCH_ONLY:-}" ] && [ -z "${SKIP_TESTS:-}" ]; then
    # the decode kernels compiled by this machine's Triton for sm_90: shared memory per stage with
    # and without PREFETCH (printed), no spills (~30 s)
    cp -rL tests benchmarks examples /tmp/pkg/ 2>/dev/null
    (cd /tmp/pkg && timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -o addopts="" -rA \
       tests/test_triton_decode.py -k "sm90 or ahead") > "$OUT/tests.log" 2>&1
    echo "tests rc=$?"; grep -a "shared memory" "$OUT/tests.log" | tail -3; tail -3 "$OUT/tests.log"
  fi
  if [ -z "${SEARCH_ONLY:-}" ] && [ -z "${SKIP_TESTS:-}" ]; then
    # the plugin inside the real SGLang first: its hook against SGLang's own decode kernel (~40 s)
    cp -rL tests benchmarks examples /tmp/pkg/ 2>/dev/null
    (cd /tmp/pkg && timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -o addopts="" \
       tests/test_sglang_plugin.py -k real_sglang) > "$OUT/tests.log" 2>&1
    echo "tests rc=$?"; tail -5 "$OUT/tests.log"
  fi
  # everything under $OUT/long, packed into long.tgz at the end (a call returns 8 files); the
  # step ends by DEADLINE (540 s) so the packing runs inside the call's 600 s
  local D=$OUT/long model="${SGL:-$HERE/.sgl}/model"
  mkdir -p "$D"
  if [ -n "${LAYERS:-}" ]; then  # the same model with more decoder layers (dummy weights): a deeper step
    rm -rf "/tmp/model_l$LAYERS" && cp -r "$model" "/tmp/model_l$LAYERS" && model="/tmp/model_l$LAYERS"
    python3 - "$model/config.json" "$LAYERS" <<'PY'
import json, sys
p, n = sys.argv[1], int(sys.argv[2])
c = json.load(open(p)); c["num_hidden_layers"] = c["max_window_layers"] = n
json.dump(c, open(p, "w"), indent=1)
PY
  fi
  timeout -k 10 "${DEADLINE:-540}" python3 benchmarks/sglang_long_h200.py --out "$D" --model "$model" ${MEM:+--mem $MEM} \
      ${POINTS:+--points $POINTS} --budget ${BUDGET:-14} --search-deadline ${SEARCH_S:-180} --repeats ${REPEATS:-3} \
      --flags ${FLAGS-16 32 64} --tiles ${TILES-256} \
      ${PACKAGE:+--package "$PACKAGE"} ${MICRO:+--micro "$MICRO"} ${NO_CONTROL:+--no-control} \
      ${PREFILL_FROM:+--prefill-from "$PREFILL_FROM"} \
      --deadline $(( ${DEADLINE:-540} - 10 )) \
      ${SEARCH_ONLY:+--search-only} ${SERVING:+--serving "$SERVING" --serving-prompts ${SERVING_PROMPTS:-40}} ${SERVING_ROUNDS:+--serving-rounds $SERVING_ROUNDS} ${SERVING_CONTROL:+--serving-control} ${SERVING_CHUNK:+--serving-chunk "$SERVING_CHUNK"} \
      ${ONLY_SERVING:+--skip-ab} > "$OUT/long.log" 2>&1
  echo "exit $?"
  gzip -f "$D"/*.db 2>/dev/null
  for f in /tmp/evokernel-long/logs/*.log /tmp/evokernel-long/serving/*.log; do   # the engines' own logs, tails
    [ -f "$f" ] && { mkdir -p "$D/engine_logs"; tail -c 20000 "$f" > "$D/engine_logs/$(basename "$f")"; }
  done
  cp "$D"/sglang_long.md "$OUT/" 2>/dev/null
  tar -czf "$OUT/long.tgz" -C "$OUT" long && rm -rf "$D"
  tail -40 "$OUT/long.log"
}

model_level() {
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
  mkdir -p "$OUT/model_level"
  if [ -n "${OUT_PREV:-}" ] && [ -f "$OUT_PREV/model_level.json" ]; then cp "$OUT_PREV/model_level.json" "$OUT/model_level/"; fi
  python3 benchmarks/model_level_h200.py --models "${MODELS:-flux,qwen}" --budget "${BUDGET:-20}" \
      --deadline "${DEADLINE:-90}" --out "$OUT/model_level" > "$OUT/model_level.log" 2>&1
  echo "exit $?"
  rm -rf "$OUT/model_level/inductor_cache"
  gzip -f "$OUT/model_level/model_level.db" 2>/dev/null
  tail -5 "$OUT/model_level.log"
  cat "$OUT/model_level/model_level.md"
}

profile() {
  source benchmarks/device_sglang_env.sh || exit 2
  local m b db=${PROFILE_DB:-$OUT/profile.db}
  cd /tmp  # `python -m` puts the working folder first on sys.path: not the checkout's evokernel/
  for m in ${PROFILE_MODELS-flux_dit qwen3_moe_stack}; do
    EVOKERNEL_MODEL_SIZE=real timeout 150 python3 -m evokernel.cli profile "$HERE/examples/models/$m.py" --iters 5 \
        --db "$db" --json > "$OUT/profile_$m.json" 2> "$OUT/profile_$m.log"
    echo "$m: exit $?"
  done
  local sargs=(--server-arg=--load-format=dummy --server-arg=--tp-size=1 --server-arg=--attention-backend=triton
               --server-arg=--sampling-backend=pytorch --server-arg=--moe-runner-backend=triton
               --server-arg=--grammar-backend=none --server-arg=--disable-flashinfer-autotune
               --server-arg=--cuda-graph-backend-prefill=disabled --server-arg=--mem-fraction-static=0.5)
  for b in ${SGL_BATCHES-1 64}; do
    timeout 240 python3 -m evokernel.cli profile --sglang "$SGL/model" --batch-size $b --input-len 512 --output-len 8 \
        "${sargs[@]}" --db "$db" --json > "$OUT/profile_sglang_b$b.json" 2> "$OUT/profile_sglang_b$b.log"
    echo "sglang b$b: exit $?"
  done
  gzip -f "$db"
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
}

sweep_attention() {
  # recorded attention landscapes through `evokernel sweep` (shuffled order, so a sweep cut by
  # its wall time is a uniform sample; a sweep appends to its CSV and a re-run measures only
  # what is missing; the CSVs ship in evokernel/landscapes/: copy a grown one back there):
  # DECODE "B:CONTEXT ..." of the paged decode space (Llama-3-8B; default "1:32768", DEC_S 210
  # seconds each) and PREFILL "MODEL:SEQLEN:BATCH ..." of the causal prefill space (default
  # "llama3-8b:2048:4", PRE_S 270 each); everything is packed into $OUT/sweeps.tgz after each
  # sweep (a call brings back a few files only)
  local L=evokernel/landscapes W=$OUT/sweeps spec b c model s n hq hkv csv
  mkdir -p $L "$W"
  pack() { tar -czf "$OUT/sweeps.tgz" -C "$W" . ; }
  for spec in ${DECODE-1:32768}; do
    b=${spec%%:*}; c=${spec##*:}
    csv=attention_decode_bf16_h200_llama3-8b_B${b}_C${c}.csv
    cp $L/$csv "$W/" 2>/dev/null
    # from /tmp: `python -m` puts the working folder first on sys.path, and the checkout's
    # evokernel/ (without its package-dir mapping) would shadow the installed package
    (cd /tmp && EVOKERNEL_DECODE_BATCH=$b EVOKERNEL_DECODE_CONTEXT=$c timeout $(( ${DEC_S:-210} + 40 )) python3 -m evokernel.cli sweep \
        "$HERE/examples/attention_decode.py" --out "$W/$csv" --wall-time ${DEC_S:-210} --quiet > "$W/${csv%.csv}.log" 2>&1)
    echo "$csv: $(( $(wc -l < "$W/$csv") - 1 )) rows"; pack
  done
  for spec in ${PREFILL-llama3-8b:2048:4}; do
    IFS=: read -r model s n <<< "$spec"
    case $model in llama3-8b) hq=32; hkv=8 ;; qwen3-30b-a3b) hq=32; hkv=4 ;; *) echo "no heads for $model" >&2; continue ;; esac
    csv=attention_prefill_bf16_h200_causal_Hq${hq}_Hkv${hkv}_B${n}_S${s}.csv
    cp $L/$csv "$W/" 2>/dev/null
    (cd /tmp && EVOKERNEL_ATTN_MODEL=$model EVOKERNEL_ATTN_SEQLENS=$s EVOKERNEL_ATTN_BATCH=$n EVOKERNEL_ATTN_CAUSAL=1 \
        timeout $(( ${PRE_S:-270} + 40 )) python3 -m evokernel.cli sweep "$HERE/examples/attention_prefill.py" \
        --out "$W/$csv" --wall-time ${PRE_S:-270} --quiet > "$W/${csv%.csv}.log" 2>&1)
    echo "$csv: $(( $(wc -l < "$W/$csv") - 1 )) rows"; pack
  done
  for f in "$W"/*.log; do echo "== $f"; tail -n 2 "$f"; done
}

sweep_moe() {
  # every valid point of the shared-config fused-MoE space (examples/moe_landscape_h200.py) for
  # each MODEL:M given, one CSV each under $OUT; each sweep stops at WALL seconds, and a run on
  # the same CSVs finishes them
  local wall=$1 spec model m csv; shift
  for spec in "$@"; do
    model=${spec%%:*}; m=${spec##*:}
    csv="$OUT/moe_bf16_h200_${model}_M${m}.csv"
    [ -f "$HERE/benchmarks/partial/$(basename "$csv")" ] && cp "$HERE/benchmarks/partial/$(basename "$csv")" "$csv"
    (cd /tmp && EVOKERNEL_MOE_MODEL=$model EVOKERNEL_MOE_M=$m python3 -m evokernel.cli sweep \
        "$HERE/examples/moe_landscape_h200.py" --out "$csv" --wall-time "$wall" 2>&1 \
        | grep -v -e '^\s*$' -e CudaIPCTypes | tail -5 | tee -a "$OUT/sweep.log")
  done
}

sweep_matmul() {
  # every valid point of matmul_space() for each M:N:K given, one CSV each under $OUT; each
  # sweep stops at WALL seconds, and a run on the same CSVs finishes them
  local wall=$1 spec m n k csv; shift
  for spec in "$@"; do
    IFS=: read -r m n k <<< "$spec"
    csv="$OUT/matmul_bf16_h200_M${m}_N${n}_K${k}.csv"
    # a partial landscape already recorded (benchmarks/landscapes/) is continued, not redone
    [ -f "$HERE/benchmarks/landscapes/$(basename "$csv")" ] && cp "$HERE/benchmarks/landscapes/$(basename "$csv")" "$csv"
    (cd /tmp && EVOKERNEL_MATMUL_SHAPE=$m,$n,$k python3 -m evokernel.cli sweep \
        "$HERE/examples/matmul_landscape_h200.py" --out "$csv" --wall-time "$wall" --quiet 2>&1 \
        | grep -v -e '^\s*$' -e CudaIPCTypes | tail -5 | tee -a "$OUT/sweep.log")
  done
}

prefill_gluon() {
  # issue 28: the Gluon prefill kernel probed on small shapes (each configuration in its own
  # process), screened per shape, its best against every SDPA backend on one footing
  mkdir -p "$OUT/prefill"
  if [ -z "${SKIP_TESTS:-}" ]; then
    cp -rL tests /tmp/pkg/ 2>/dev/null
    (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -o addopts="" -rfE \
        tests/test_gluon_attention.py > "$OUT/prefill/tests.log" 2>&1; echo "rc=$?" >> "$OUT/prefill/tests.log")
    grep -E "passed|failed|rc=|Error|^E " "$OUT/prefill/tests.log" | head -30
  fi
  if [ -n "${PROFILE:-}" ]; then
    local N=/tmp/ncu t0=$SECONDS
    mkdir -p $N
    for spec in $PROFILE; do
      local tag=${spec//[:,]/_}
      timeout -k 5 $(( ${PROFILE_S:-150} - (SECONDS - t0) )) ncu --clock-control none --profile-from-start off \
          --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
          --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
          --export "$N/$tag" --force-overwrite \
          python3 benchmarks/prefill_gluon_h200.py --profile "$spec" "${PROFILE_CONFIG:-128,128,4,2,1,1,1}" \
          > "$N/$tag.log" 2>&1
      echo "ncu $spec rc=$? at $(( SECONDS - t0 )) s"
      for page in details raw; do
        ncu --import "$N/$tag.ncu-rep" --page $page --csv > "$N/$tag.$page.csv" 2>>"$N/$tag.log"
      done
      grep -E "ERR|error|profiled" "$N/$tag.log" | head -5
    done
    tar -czf "$OUT/ncu.tgz" -C $N --exclude='*.ncu-rep' . ; ls -la $N | head
  fi
  timeout ${DEADLINE_HARD:-570} python3 benchmarks/prefill_gluon_h200.py --out "$OUT/prefill" --deadline ${DEADLINE:-520} \
      ${SHAPES:+--shapes $SHAPES} ${CONFIGS:+--configs $CONFIGS} ${GATE:+--gate} 2>&1 | grep -v -e '^\s*$' -e CudaIPCTypes | tee "$OUT/prefill.log" | tail -60
}

wallclock() {
  local W="python3 $HERE/benchmarks/search_wallclock_h200.py" T=$HERE/examples/matmul_landscape_h200.py
  local X=${SHAPE_X:-128,14336,4096} Y=${SHAPE_Y:-512,4096,14336} seed strat t0=$SECONDS
  local quiet=(grep -v -e '^\s*$' -e CudaIPCTypes -e Warning)
  # outputs gathered in one folder and packed into $OUT/wallclock.tgz after every stage (a call
  # brings back 8 files; one killed at its limit brings back what was packed)
  local OUT_DIR=$OUT OUT=/tmp/wallclock
  mkdir -p "$OUT"
  pack() { tar -czf "$OUT_DIR/wallclock.tgz" -C "$OUT" --exclude='*.db-lock' --exclude='*.db' . ; }
  cd /tmp
  if [[ " ${PARTS:-x y} " == *" x "* ]]; then
    EVOKERNEL_MATMUL_SHAPE=$X timeout -k 5 $(( ${SWEEP_S:-150} + 30 )) $W sweep $T --out "$OUT/sweep_X.csv" \
      --times "$OUT/sweep_times.jsonl" --wall "${SWEEP_S:-150}" 2>&1 | "${quiet[@]}" | tail -3
    echo "sweep done at $(( SECONDS - t0 )) s"
    pack
    local runs=${RUNS:-}
    if [ -z "$runs" ]; then
      for seed in ${SEEDS:-0 1}; do for strat in ${STRATEGIES:-model optuna-tpe default}; do runs="$runs $strat:$seed"; done; done
    fi
    for run in $runs; do
        strat=${run%%:*} seed=${run##*:}
        EVOKERNEL_MATMUL_SHAPE=$X timeout -k 5 $(( ${SEARCH_S:-40} + 40 )) $W search $T --strategy "$strat" \
          --seed "$seed" --wall "${SEARCH_S:-40}" --db "$OUT/X_${strat}_${seed}.db" \
          --log "$OUT/X_${strat}_${seed}.jsonl" 2>&1 | "${quiet[@]}" | tail -2
        echo "X $strat $seed done at $(( SECONDS - t0 )) s"
        pack
    done
  fi
  if [[ " ${PARTS:-x y} " == *" y "* ]]; then
    # the second search on a new shape: no store and no shipped priors (cold), the shipped priors,
    # the first search's store without shipped priors (warm)
    local prev=${WARM_DB:-$OUT/X_model_0.db}
    [ -f "$prev" ] && cp "$prev" "$OUT/Y_warm.db"
    for v in cold shipped warm; do
      local extra=(); [ "$v" != shipped ] && extra=(--no-shipped)
      EVOKERNEL_MATMUL_SHAPE=$Y timeout -k 5 120 $W search $T --strategy model --seed 0 \
        --budget "${BUDGET_Y:-16}" --db "$OUT/Y_$v.db" --log "$OUT/Y_$v.jsonl" "${extra[@]}" 2>&1 | "${quiet[@]}" | tail -2
      echo "Y $v done at $(( SECONDS - t0 )) s"
      pack
    done
    python3 - "$OUT" Y second_genomes.json <<'PY'
import json, sys, pathlib
root, prefix, out = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
pick = {}
for log in sorted(root.glob(f"{prefix}_*.jsonl")):
    evals = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    evals = [e for e in evals if "n" in e and e.get("best")]
    if evals:
        first = [e for e in evals if e["n"] <= 8]
        if first:
            pick[f"{log.stem}:gen0"] = first[-1]["best"]
        pick[f"{log.stem}:final"] = evals[-1]["best"]
(root / out).write_text(json.dumps(pick))
print(len(pick), "genomes to re-measure")
PY
    EVOKERNEL_MATMUL_SHAPE=$Y timeout -k 5 150 $W remeasure $T --genomes "$OUT/second_genomes.json" \
      --out "$OUT/second_remeasure.json" 2>&1 | "${quiet[@]}" | tail -2
    echo "Y remeasured at $(( SECONDS - t0 )) s"
    pack
  fi
  if [[ " ${PARTS:-x y} " == *" y "* || " ${PARTS:-x y} " == *" f "* ]]; then
    # the fidelity cascade against full judging on the MoE problem (F_*; FID_MODES, FID_EXTRA:
    # a JSON of an earlier call's winners, judged again beside these)
    local M=$HERE/examples/moe_h200.py
    for v in ${FID_MODES:-full cascade}; do
      local extra=(); [ "$v" != full ] && extra=(--fidelity "${MARGIN:-0.1}")
      EVOKERNEL_MOE_M=${MOE_M:-8,64,256,1024} timeout -k 5 $(( ${FID_S:-100} + 60 )) $W search $M --seed 0 \
        --wall "${FID_S:-100}" --db "$OUT/F_$v.db" --log "$OUT/F_$v.jsonl" "${extra[@]}" 2>&1 | "${quiet[@]}" | tail -2
      echo "F $v done at $(( SECONDS - t0 )) s"
      pack
    done
    python3 - "$OUT" "${FID_EXTRA:-}" <<'PY'
import json, sys, pathlib
root = pathlib.Path(sys.argv[1]); pick = {}
extra = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
if extra and extra.is_file():  # winners of an earlier call, judged again beside these
    pick.update({f"earlier:{k}": v for k, v in json.loads(extra.read_text()).items()})
for v in ("full", "cascade"):
    log = root / f"F_{v}.jsonl"
    if log.exists():
        evals = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        evals = [e for e in evals if "n" in e and e.get("best")]
        if evals:
            pick[f"F_{v}:final"] = evals[-1]["best"]
(root / "fidelity_genomes.json").write_text(json.dumps(pick))
PY
    EVOKERNEL_MOE_M=${MOE_M:-8,64,256,1024} timeout -k 5 150 $W remeasure $M --genomes "$OUT/fidelity_genomes.json" \
      --out "$OUT/fidelity_remeasure.json" 2>&1 | "${quiet[@]}" | tail -2
    echo "F remeasured at $(( SECONDS - t0 )) s"
  fi
  find "$OUT" -name '*.db' -exec gzip -f {} \;
  pack
}

pair() {
  # each job sees one GPU (CUDA_VISIBLE_DEVICES), writes under $OUT/g0 or $OUT/g1, runs on its
  # own half of the CPUs (a small model's decode step is host-bound) and is stopped at JOB_S
  # seconds, so that both folders are packed, one .tgz each (a call brings back 8 files)
  local root=$OUT g cmd cpus CPUS0 CPUS1 PIN=""
  read -r CPUS0 CPUS1 < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); h = len(c) // 2
print(*(",".join(map(str, x)) for x in (c[:h], c[h:2 * h])) if h >= 2 else "")')
  command -v taskset > /dev/null && [ -n "${CPUS1:-}" ] && PIN=1
  for g in 0 1; do
    eval "cmd=\${JOB$g:-}"
    [ -z "$cmd" ] && continue
    mkdir -p "$root/g$g"
    cpus=""; [ -n "$PIN" ] && eval "cpus=\${CPUS$g}"
    ( export CUDA_VISIBLE_DEVICES=$g OUT="$root/g$g"; cd "$HERE" && \
      timeout -k 10 "${JOB_S:-540}" ${PIN:+taskset -c $cpus} bash -c "$cmd" > "$root/g$g/job.log" 2>&1; \
      echo "job $g exit $? (cpus ${cpus:-all})" >> "$root/g$g/job.log" ) &
  done
  wait
  for g in 0 1; do
    [ -d "$root/g$g" ] || continue
    eval "cmd=\${JOB$g:-}"; echo "==== g$g: $cmd ===="; tail -40 "$root/g$g/job.log"
    # a call brings back files of 16 MiB at most: compiler caches stay, stores are gzipped,
    # anything still over 4 MB is left out (and listed)
    find "$root/g$g" -type d -name '*_cache' -prune -exec rm -rf {} + 2>/dev/null
    find "$root/g$g" -type f -name '*.db' -exec gzip -f {} \; 2>/dev/null
    find "$root/g$g" -type f -size +4M -printf '%P %s\n' > "$root/g$g/left_out.txt"
    find "$root/g$g" -type f -size +4M -delete
    tar -czf "$root/g$g.tgz" -C "$root" "g$g" && rm -rf "$root/g$g"
  done
  ls -la "$root"
}

decode_reduce() {
  # issue 29: the decode's reductions (separate kernel, with PDL, last program's grouped combine)
  # per package entry, graph-replayed beside SGLang's default (decode_reduce_h200.py); carry .whl
  mkdir -p "$OUT"
  if [ -z "${SKIP_TESTS:-}" ]; then  # the launch variants compute what the plain configuration does
    cp -rL tests /tmp/pkg/ 2>/dev/null
    (cd /tmp/pkg && timeout ${TEST_TIMEOUT:-120} python3 -m pytest -q -p no:cacheprovider --maxfail=${MAXFAIL:-5} -o addopts="" -rfE \
        ${TESTS:-tests/test_decode_gpu.py} > "$OUT/tests_decode.log" 2>&1; echo "rc=$?" >> "$OUT/tests_decode.log")
    grep -E "passed|failed|rc=|Error|^E " "$OUT/tests_decode.log" | head -20
  fi
  if [ -n "${NCU:-}" ]; then  # Nsight Compute on one call of each way at these points (~10 s each)
    local N=/tmp/ncu_decode t0=$SECONDS
    mkdir -p $N
    for spec in $NCU; do
      local tag=${spec//:/_}
      timeout -k 5 $(( ${NCU_S:-120} - (SECONDS - t0) )) ncu --clock-control none --profile-from-start off \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
          --section SchedulerStats --section Occupancy --section LaunchStats \
          --export "$N/$tag" --force-overwrite \
          python3 benchmarks/decode_reduce_h200.py --profile "$spec" ${PACKAGE:+--package "$PACKAGE"} > "$N/$tag.log" 2>&1
      echo "ncu $spec rc=$? at $(( SECONDS - t0 )) s"
      for page in details raw; do
        ncu --import "$N/$tag.ncu-rep" --page $page --csv > "$N/$tag.$page.csv" 2>>"$N/$tag.log"
      done
    done
    tar -czf "$OUT/ncu_decode.tgz" -C $N --exclude='*.ncu-rep' .
  fi
  python3 benchmarks/decode_reduce_h200.py --out "$OUT/reduce" ${PACKAGE:+--package "$PACKAGE"} \
      ${POINTS:+--points $POINTS} ${VARIANTS:+--only $VARIANTS} ${REFINE:+--refine "$OUT/refined"} ${TIMELINE:+--timeline} ${FLOOR:+--floor} ${FLOOR_SWEEP:+--floor-sweep} ${ATTN_SWEEP:+--attn-sweep} \
      --deadline ${DEADLINE:-200} > "$OUT/reduce.log" 2>&1
  echo "exit $?"; tail -25 "$OUT/reduce.log"
}

case "$step" in
  gemm|moe|attention|gate|footing|launch|coop|sglang|profile|pair|ray) "$step" "$@" ;;
  decode-reduce) decode_reduce ;;
  sandbox) sandbox "$@" ;;
  model-level) model_level ;;
  sglang-long) sglang_long ;;
  sweep-attention) sweep_attention ;;
  sweep-moe) sweep_moe "$@" ;;
  sweep-matmul) sweep_matmul "$@" ;;
  wallclock) wallclock ;;
  prefill-gluon) prefill_gluon ;;
esac
