"""The SGLang evaluator's CPU parts: the A/B plan, medians and ratios over one_batch-shaped
results, the numerics comparison, and the engine processes' error path (no SGLang here:
each engine says so on its reply channel and the comparison reports it). Real engines run
on the GPU (benchmarks/sglang_e2e_h200.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evokernel.evaluators.sglang import BASELINE, CONTROL, ABReport, SGLangEvaluator, compare_numerics, summarise


def _run(prefill: float, decode: float, bs: int) -> dict:
    # the fields sglang.benchmark.one_batch's latency_test_run_once returns
    return {
        "run_name": "evokernel",
        "batch_size": bs,
        "input_len": 512,
        "output_len": 32,
        "prefill_latency": prefill,
        "prefill_throughput": 512 * bs / prefill,
        "median_decode_latency": decode,
        "median_decode_throughput": bs / decode,
        "total_latency": prefill + 31 * decode,
        "overall_throughput": 544 * bs / (prefill + 31 * decode),
    }


def test_the_plan_warms_every_point_and_the_report_gives_medians_ratios_and_the_geomean():
    ev = SGLangEvaluator(["--model-path", "m"], batch_sizes=(1, 16), prefill_lens=(512, 2048), repeats=3)
    plan = ev.plan()
    assert plan["points"] == [[1, 512, 32], [16, 512, 32], [1, 2048, 2]]  # (1, 512) decode also times its prefill
    assert plan["warm"] == [(1, 512), (1, 2048), (16, 512)] and plan["decode_points"] == ["b1_i512_o32", "b16_i512_o32"]
    report = ABReport(plan=plan)
    for name, scale in ((BASELINE, 1.0), ("cand", 0.8)):
        report.samples[name] = {
            "b1_i512_o32": [_run(0.05, scale * x, 1) for x in (0.0010, 0.0011, 0.0009)],
            "b16_i512_o32": [_run(0.2, scale * x, 16) for x in (0.0020, 0.0021, 0.0019)],
            "b1_i2048_o2": [_run(scale * x, 0.001, 1) for x in (0.10, 0.11, 0.09)],
        }
    doc = report.to_json()
    assert doc["decode_throughput_ratio"]["cand"]["b1_i512_o32"] == pytest.approx(1.25)
    assert doc["prefill_speedup"]["cand"]["b1_i2048_o2"] == pytest.approx(1.25)
    assert doc["geomean"][BASELINE]["cand"] == pytest.approx(1.25)  # over the decode points only
    row = next(r for r in doc["rows"] if r["variant"] == "cand" and r["point"] == "b16_i512_o32")
    assert row["median_decode_latency"]["median"] == pytest.approx(0.8 * 0.0020)
    assert summarise([2.0, 1.0, 3.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3, "spread_pct": 100.0}


def test_numerics_pass_within_tolerance_and_fail_beyond_it_or_on_non_finite_logits():
    base = {"tokens": [[1, 2], [3, 4]], "logits_sample": [0.5, -1.0, 2.0], "logits_absmax": 2.0, "finite": True}
    close = dict(base, logits_sample=[0.52, -1.01, 2.05], tokens=[[1, 2], [3, 5]])
    got = compare_numerics(base, close, rtol=0.05)
    assert got["ok"] and got["token_agreement"] == 0.75 and got["first_divergent_step"] == 1
    far = dict(base, logits_sample=[0.5, -1.0, 2.5])
    assert not compare_numerics(base, far, rtol=0.05)["ok"]
    assert compare_numerics(base, dict(base, finite=False))["reason"] == "non-finite logits"


def test_the_last_decode_steps_logits_are_judged_where_the_tokens_agree_up_to_it():
    # the probe at a long context: the prefill's logits are the engine's own extend kernel,
    # the decode steps' run the package's decode kernel; only the latter can catch a bad table entry
    base = {
        "tokens": [[1], [2], [3]],
        "logits_sample": [0.5, -1.0],
        "logits_absmax": 1.0,
        "finite": True,
        "decode_logits_sample": [1.0, 2.0, -4.0],
        "decode_logits_absmax": 4.0,
        "decode_finite": True,
        "context": 32770,
    }
    same = compare_numerics(base, dict(base))
    assert same["ok"] and same["max_decode_logit_diff"] == 0.0 and same["context"] == 32770
    bad = compare_numerics(base, dict(base, decode_logits_sample=[1.0, 2.0, -3.0]), rtol=0.05)
    assert not bad["ok"] and bad["reason"].startswith("decode logits differ by 1")
    assert compare_numerics(base, dict(base, decode_finite=False))["reason"] == "non-finite decode logits"
    # an earlier token differs: the last steps saw different contexts, so their logits are not judged
    early = compare_numerics(base, dict(base, tokens=[[1], [9], [3]], decode_logits_sample=[0.0, 0.0, 0.0]))
    assert early["ok"] and early["decode_logits"] == "not compared: tokens diverge at step 1"
    assert early["token_agreement"] == pytest.approx(2 / 3)
    # the last step alone differs: its logits were computed on the same context, and are judged
    last = compare_numerics(base, dict(base, tokens=[[1], [2], [4]]))
    assert last["ok"] and "max_decode_logit_diff" in last


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None, reason="SGLang is installed: the GPU test covers it"
)
def test_without_sglang_every_engine_reports_why_and_nothing_is_measured(tmp_path: Path):
    ev = SGLangEvaluator(
        ["--model-path", str(tmp_path)],
        batch_sizes=(1,),
        prefill_lens=(),
        repeats=1,
        log_dir=tmp_path / "logs",
        load_timeout_s=120,
    )
    report = ev.compare({"cand": tmp_path})
    assert set(report.errors) == {BASELINE, CONTROL, "cand"}  # the A/A control is a second shipped engine
    assert "No module named 'sglang'" in report.errors[BASELINE] and not report.samples
    assert report.to_json()["geomean"] == {BASELINE: {}}
    # each engine had its own CPUs (disjoint), where the machine has enough of them
    sets = [set(c) for c in report.meta["cpus"].values()]
    assert len(sets) == 3 and not any(a & b for i, a in enumerate(sets) for b in sets[i + 1 :])
    # as a search's evaluator: SGLang as shipped failing is the evaluator's failure (the run stops and
    # can resume), not a wrong genome
    from evokernel.core.errors import EvaluatorError
    from evokernel.core.genome import Genome

    ev.package = lambda genome: tmp_path
    with pytest.raises(EvaluatorError, match="the baseline"):
        list(ev.evaluate([Genome.of({"BLOCK_SIZE_M": 16})]))


def test_a_trace_weights_the_batch_sizes_and_sets_the_lengths():
    from evokernel.model.workload import Trace

    trace = Trace.load(Path(__file__).parent / "recorded" / "traces" / "chat_small.jsonl")
    ev = SGLangEvaluator.for_trace(["--model-path", "m"], trace, batch_sizes=(1, 16, 64))
    assert sum(ev.weights.values()) == pytest.approx(1.0) and set(ev.weights) == {1, 16, 64}
    ins = sorted(r.input_len for r in trace.requests)
    assert ev.input_len == ins[len(ins) // 2] and ev.output_len >= 2
    assert ev.fingerprint()["weights"] == {str(k): v for k, v in sorted(ev.weights.items())}


def test_paired_ratios_see_through_drift_between_rounds():
    # every engine slows down together from round to round (the host, the clocks): the
    # unpaired medians' spreads hide a steady 5% gain that the per-round pairs show
    plan = SGLangEvaluator(["--model-path", "m"], batch_sizes=(1,), prefill_lens=(), repeats=7).plan()
    drift = (1.0, 1.3, 0.9, 1.5, 1.1, 1.2, 0.95)
    report = ABReport(plan=plan)
    report.samples[BASELINE] = {"b1_i512_o32": [_run(0.05, 0.001 * d, 1) for d in drift]}
    report.samples["faster"] = {"b1_i512_o32": [_run(0.05, 0.001 * d / 1.05, 1) for d in drift]}
    report.samples["same"] = {
        "b1_i512_o32": [_run(0.05, 0.001 * d * (1 + 0.01 * (-1) ** i), 1) for i, d in enumerate(drift)]
    }
    paired = report.to_json()["paired"]["decode_throughput"]
    assert paired["faster"]["b1_i512_o32"]["median"] == pytest.approx(1.05)
    assert paired["faster"]["b1_i512_o32"]["verdict"] == "faster" and paired["faster"]["geomean"]["verdict"] == "faster"
    assert paired["same"]["b1_i512_o32"]["verdict"] == "within noise"
    assert paired["same"]["b1_i512_o32"]["low"] < 1.0 < paired["same"]["b1_i512_o32"]["high"]


def test_the_e2e_benchmark_table_shows_unpaired_and_paired_ratios():
    from evokernel.evaluators.sglang import ab_markdown

    plan = SGLangEvaluator(["--model-path", "m"], batch_sizes=(1,), prefill_lens=(2048,), repeats=3).plan()
    report = ABReport(plan=plan)
    report.samples[BASELINE] = {"b1_i512_o32": [_run(0.05, 0.001, 1)] * 3, "b1_i2048_o2": [_run(0.1, 0.001, 1)] * 3}
    report.samples["cand"] = {"b1_i512_o32": [_run(0.05, 0.0009, 1)] * 3, "b1_i2048_o2": [_run(0.1, 0.001, 1)] * 3}
    lines = ab_markdown(report.to_json())
    assert "| cand | b1_i512_o32 | 50.000 | 0.900 (0.0%) | 1111 | 1.111 | 1.111 [1.111, 1.111] faster |" in lines
    assert any(line.startswith("\npaired geomean") and "cand: 1.111" in line for line in lines)


def test_an_aa_control_keeps_bimodal_noise_from_reading_as_a_loss():
    """Call X's decode step times at bs 16 (ms, 7 rounds): each engine falls in one of two
    states round by round (~1.5 or ~1.9 ms). The configs variant ran the same configs as
    shipped at bs 16, yet read "slower" on a bootstrap over the rounds; with an A/A control
    (the kernel variant's rounds stand in for it: within 1% of shipped at micro) beside it,
    it does not, and a real 10% gain still reads "faster"."""
    plan = SGLangEvaluator(["--model-path", "m"], batch_sizes=(16,), prefill_lens=(), repeats=7).plan()

    def engine(states, gain: float = 1.0) -> list:
        return [_run(0.05, 0.001 * s / gain, 16) for s in states]

    shipped = [1.517, 1.522, 1.536, 1.467, 1.66, 1.583, 1.622]
    same = [1.521, 1.948, 1.587, 1.457, 1.98, 1.867, 1.832]
    control = [1.493, 1.519, 1.772, 1.436, 1.719, 1.514, 1.683]
    point = "b16_i512_o32"
    without = ABReport(plan=plan)
    without.samples[BASELINE] = {point: engine(shipped)}
    without.samples["same"] = {point: engine(same)}
    assert without.paired()["same"][point]["verdict"] == "slower"  # what call X's report said

    report = ABReport(plan=plan)
    report.samples[BASELINE] = {point: engine(shipped)}
    report.samples[CONTROL] = {point: engine(control)}
    report.samples["same"] = {point: engine(same)}
    report.samples["gain"] = {point: engine(shipped, gain=1.1)}
    paired = report.paired()
    assert paired["same"][point]["verdict"] == "within noise" and "control" in paired["same"][point]
    assert paired["gain"][point]["verdict"] == "faster"
    doc = report.to_json()
    assert CONTROL not in doc["geomean"][BASELINE] and doc["control_geomean"] is not None


def test_the_engine_driver_reads_the_hosts_steal_time_and_its_preemptions():
    # what each timed run records beside its figures (calls V and X: bimodal rounds that
    # neither the GPU clock nor CPU pinning explained; steal time would show a busy hypervisor)
    import sys

    from evokernel.integrations.sglang.driver import _host_counters

    got = _host_counters()
    if sys.platform.startswith("linux"):
        assert set(got) == {"steal_ticks", "involuntary_switches"}
        assert all(isinstance(v, int) and v >= 0 for v in got.values())


def test_rounds_pair_by_their_number_when_an_engine_missed_one():
    # a variant's run failed in round 1: its rounds 0 and 2 pair with the baseline's 0 and 2,
    # not with 0 and 1 (review of the change: pairing by position shifted every later round)
    plan = SGLangEvaluator(["--model-path", "m"], batch_sizes=(1,), prefill_lens=(), repeats=3).plan()
    report = ABReport(plan=plan)
    point = "b1_i512_o32"
    report.samples[BASELINE] = {point: [dict(_run(0.05, 0.001 * d, 1), round=r) for r, d in enumerate((1.0, 2.0, 1.0))]}
    report.samples["cand"] = {point: [dict(_run(0.05, 0.001 * d, 1), round=r) for r, d in ((0, 1.0), (2, 1.0))]}
    paired = report.paired()["cand"][point]
    assert paired["rounds"] == 2 and paired["median"] == pytest.approx(1.0)


def test_the_paired_geomean_takes_each_round_at_every_point_or_not_at_all():
    """Two decode points; the candidate's run at the second point failed in round 1. The
    geomean pairs round 0 with round 0 and round 2 with round 2 across the points (not the
    second point's round 2 with the first point's round 1) and leaves round 1 out."""
    plan = SGLangEvaluator(["--model-path", "m"], batch_sizes=(1, 8), prefill_lens=(), repeats=3).plan()
    report = ABReport(plan=plan)
    a, b = plan["decode_points"]
    report.samples[BASELINE] = {p: [dict(_run(0.05, 1e-3, 1), round=r) for r in range(3)] for p in (a, b)}
    # the candidate: 1.0x at both points in round 0, 1.5x at both in round 2; at a 1.2x in round 1
    faster = {0: 1.0, 1: 1.2, 2: 1.5}
    report.samples["cand"] = {
        a: [dict(_run(0.05, 1e-3 / faster[r], 1), round=r) for r in range(3)],
        b: [dict(_run(0.05, 1e-3 / faster[r], 1), round=r) for r in (0, 2)],
    }
    gm = report.paired()["cand"]["geomean"]
    assert gm["rounds"] == 2 and gm["median"] == pytest.approx(1.25)  # rounds 0 and 2: median 1.25 at both


def test_long_context_points_a_best_flag_composite_and_kernel_times():
    """Issue 29's comparison: decode points at (batch, context) pairs, SGLang at each value of
    a flag as engines of their own, the best flag per point as one reference, and the GPU
    kernel time per step beside the wall clock."""
    from evokernel.evaluators.sglang import DECODE_ATTENTION_KERNELS

    ev = SGLangEvaluator(
        ["--model-path", "m"], decode_points=[(1, 32768), (32, 4096)], prefill_lens=(), repeats=3, kernel_steps=8
    )
    plan = ev.plan()
    assert plan["decode_points"] == ["b1_i32768_o32", "b32_i4096_o32"] and plan["max_batch"] == 32
    assert ev.batch_sizes == [1, 32] and ev.fingerprint()["kernel_steps"] == 8
    a, b = "b1_i32768_o32", "b32_i4096_o32"
    report = ABReport(plan=plan)
    # step times (ms) per engine and point: kv64 is SGLang's best at batch 1, kv8 (shipped) at 32
    steps = {BASELINE: (2.4, 2.3), "kv64": (1.3, 2.35), "kv16": (1.9, 2.32), "pkg": (1.0, 2.0)}
    for name, (ta, tb) in steps.items():
        report.samples[name] = {
            a: [dict(_run(0.5, ta * 1e-3 * d, 1), round=r) for r, d in enumerate((1.0, 1.1, 0.95))],
            b: [dict(_run(0.5, tb * 1e-3 * d, 32), round=r) for r, d in enumerate((1.0, 1.1, 0.95))],
        }
        attn = {a: 0.5 * ta, b: 0.3 * tb}
        report.kernels[name] = {
            p: {
                "gpu_ms_per_step": 0.9 * t,
                "busy_ms_per_step": 0.8 * t,
                "by_kernel": {DECODE_ATTENTION_KERNELS[0]: attn[p], "moe": 0.9 * t - attn[p]},
            }
            for p, t in ((a, ta), (b, tb))
        }
    # the package's split kernel launched early beside the kernel before it: its duration counts the
    # overlap, the attribution does not (credited to the predecessor, which ran then anyway)
    report.kernels["pkg"][a]["attributed_by_kernel"] = {"_split_kernel": 0.3, "_reduce_kernel": 0.05, "moe": 0.45}
    report.kernels["pkg"][a]["by_kernel"] = {"_split_kernel": 0.4, "_reduce_kernel": 0.1, "moe": 0.4}
    chosen = report.composite("sglang_best_flag", [BASELINE, "kv64", "kv16"])
    assert chosen == {a: "kv64", b: BASELINE}
    assert report.attention_ms("pkg", a) == pytest.approx(0.5) and report.attention_ms("nobody", a) is None
    assert report.attention_ms("pkg", a, attributed=True) == pytest.approx(0.35)
    assert report.attention_ms("kv64", a, attributed=True) == report.attention_ms("kv64", a)  # no overlap profiled
    assert report.attention_ms("pkg", a, stage=1) == pytest.approx(0.4)  # the split kernel alone
    assert report.attention_ms("pkg", a, attributed=True, stage=2) == pytest.approx(0.05)  # its reduction alone
    assert report.attention_ms("kv64", a, stage=1) == report.attention_ms("kv64", a)  # SGLang's stage 1 here
    doc = report.to_json()
    best = doc["geomean"]["sglang_best_flag"]
    assert best["pkg"] == pytest.approx(((1.3 / 1.0) * (2.3 / 2.0)) ** 0.5)
    assert "kv64" in best and BASELINE not in best and CONTROL not in best
    vs = doc["paired"]["decode_throughput_vs_sglang_best_flag"]["pkg"]
    assert vs[a]["median"] == pytest.approx(1.3) and vs[a]["verdict"] == "faster" and vs["geomean"]["rounds"] == 3
    ratio = doc["kernel_time_ratio"]["sglang_best_flag"]["pkg"]
    assert ratio[a] == pytest.approx(1.3) and ratio["geomean"] == pytest.approx(((1.3) * (2.3 / 2.0)) ** 0.5)
    assert doc["attention_ms_per_step"]["pkg"][b] == pytest.approx(0.6)
    assert doc["attention_attributed_ms_per_step"]["pkg"][a] == pytest.approx(0.35)
    busy = doc["busy_time_ratio"][BASELINE]["pkg"]
    assert busy[a] == pytest.approx(2.4) and busy["geomean"] == pytest.approx((2.4 * 2.3 / 2.0) ** 0.5)
    assert doc["meta"]["composite"]["sglang_best_flag"] == chosen


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None, reason="SGLang is installed: the GPU test covers it"
)
def test_variants_carry_their_own_server_arguments_and_engines_start_together(tmp_path: Path):
    from evokernel.evaluators.sglang import Variant

    ev = SGLangEvaluator(
        ["--model-path", str(tmp_path)],
        decode_points=[(1, 64)],
        prefill_lens=(),
        repeats=1,
        log_dir=tmp_path / "logs",
        load_timeout_s=120,
        control=False,
    )
    report = ev.compare({"kv32": Variant(args=("--triton-attention-num-kv-splits", "32")), "pkg": tmp_path})
    assert report.meta["variants"]["kv32"] == {"package": None, "args": ["--triton-attention-num-kv-splits", "32"]}
    assert report.meta["variants"]["pkg"]["package"] == str(tmp_path)
    assert set(report.errors) == {BASELINE, "kv32", "pkg"} and not report.samples


def test_the_engines_cpu_sets_rotate_between_rounds_and_the_driver_moves_every_thread():
    """Each engine's share of the CPUs moves one engine along every round, so a slow set of
    cores is no one engine's; the driver's `pin` moves all of its threads (here this process's:
    a helper thread started before the move goes along)."""
    import os
    import threading

    from evokernel.evaluators.sglang import cpu_sets, rotated
    from evokernel.integrations.sglang.driver import _pin

    sets = cpu_sets(3, range(9))
    by_round = [rotated(sets, r) for r in range(3)]
    for k in range(3):  # over three rounds, engine k runs once on each set
        assert sorted(map(tuple, (rnd[k] for rnd in by_round))) == sorted(map(tuple, sets))
    for rnd in by_round:  # and in every round the sets stay disjoint
        assert sorted(c for s in rnd for c in s) == list(range(9))
    before = os.sched_getaffinity(0)
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)
    helper.start()
    try:
        one = min(before)
        got = _pin([one])
        assert got["pinned"] == [one] and got["threads"] >= 2
        assert os.sched_getaffinity(0) == {one} and os.sched_getaffinity(helper.native_id) == {one}
    finally:
        stop.set()
        helper.join()
        _pin(sorted(before))
    assert os.sched_getaffinity(0) == before


def test_a_pin_to_cpus_the_process_may_not_use_is_an_answer_not_a_crash():
    import os

    from evokernel.integrations.sglang.driver import _pin

    before = os.sched_getaffinity(0)
    got = _pin([max(before) + 4096])  # no such CPU
    assert "cannot pin" in got["error"] and os.sched_getaffinity(0) == before


def test_overlapping_kernels_of_a_dependent_launch_are_credited_once_to_the_one_that_ran_first():
    """A decode step as the profiler lists it with programmatic dependent launches: the split
    kernel starts under the projection's tail and waits, the reduce kernel starts under the
    split kernel's. The durations count the overlaps twice; the attribution credits each
    instant once, to the older kernel, and sums to the step's busy time."""
    from evokernel.integrations.sglang.driver import kernel_attribution, kernel_times, step_timeline

    events = []
    for step in range(3):
        t = 1000.0 * step
        events += [
            {"name": "proj", "ts": t, "dur": 20.0},
            {"name": "_split_kernel", "ts": t + 17.0, "dur": 30.0},  # 3 us under proj, waiting
            {"name": "_reduce_kernel", "ts": t + 45.0, "dur": 4.0},  # 2 us under the split kernel
            {"name": "moe", "ts": t + 50.0, "dur": 40.0},  # after a 1 us gap
        ]
    by, credited = kernel_times(events), kernel_attribution(events)
    assert by["_split_kernel"] == 90.0 and by["_reduce_kernel"] == 12.0
    assert credited == {"proj": 60.0, "_split_kernel": 81.0, "_reduce_kernel": 6.0, "moe": 120.0}
    busy = step_timeline(events, 3)["busy_ms_per_step"]
    assert sum(credited.values()) / 3 / 1e3 == pytest.approx(busy)
    assert sum(by.values()) / 3 / 1e3 > busy  # the durations' sum counts 5 us a step twice


def test_an_engine_that_misses_a_deadline_is_stopped_and_its_late_reply_never_answers_another_command(
    tmp_path: Path,
) -> None:
    """A driver that answers its first command after the evaluator gave up on it: the late reply
    would be read as the next command's answer (a sample filed under the wrong point) and the
    command would go on running beside the other engines' timed runs. So the engine is killed at
    the deadline and every later ask is an error saying why."""
    import os
    import subprocess
    import sys
    import time

    from evokernel.evaluators.sglang import _Engine

    driver = (
        "import json, os, sys, time\n"
        "cmd, rep = (int(x) for x in sys.argv[1:3])\n"
        "for i, line in enumerate(os.fdopen(cmd, 'rb')):\n"
        "    if i == 0: time.sleep(1.0)\n"
        "    os.write(rep, (json.dumps({'answer_to': json.loads(line)['point']}) + '\\n').encode())\n"
    )
    engine = object.__new__(_Engine)
    cmd_r, engine.cmd_w = os.pipe()
    engine.reply_r, reply_w = os.pipe()
    engine.name, engine._buf, engine.broken = "late", b"", None
    engine.log = open(tmp_path / "late.log", "w")
    engine.proc = subprocess.Popen(
        [sys.executable, "-c", driver, str(cmd_r), str(reply_w)], pass_fds=(cmd_r, reply_w), start_new_session=True
    )
    os.close(cmd_r)
    os.close(reply_w)
    try:
        first = engine.ask({"cmd": "run", "point": "A"}, timeout_s=0.3)
        assert "no answer after" in first["error"] and engine.proc.poll() is not None  # stopped at the deadline
        time.sleep(1.0)  # when the late reply would have come
        second = engine.ask({"cmd": "run", "point": "B"}, timeout_s=2.0)
        assert second == first and "answer_to" not in second
    finally:
        engine.close()
