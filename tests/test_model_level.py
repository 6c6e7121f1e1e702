"""Model-level genomes (issue 9): the space is data, candidates share the base's weights and
leave it untouched, every site's realisation passes its check against the unfused module
(Triton sites in Triton's interpreter, in a fresh process: see tests/test_triton_matmul.py
for why), a wrong realisation is refused with its reason, the model evaluator on the CPU,
the ablation's records in a store, and the benchmark script's CPU mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import torch

from evokernel import SQLiteStore
from evokernel.model.ablation import ablate, alone, record, without
from evokernel.evaluators.model import ModelEvaluator, Timing, TimingOptions
from evokernel.core.genome import Genome
from evokernel.model.model_level import SiteCheck, apply, describe_sites, judge, model_space, variant
from evokernel.core.result import Status

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "models"))

import flux_dit  # noqa: E402
import qwen3_moe_stack  # noqa: E402

FAST = TimingOptions(rounds=2, reps=1, warmup=1)


def test_the_space_of_a_model_is_data_with_reasons() -> None:
    flux = model_space(flux_dit.model())
    assert [p.name for p in flux.params if "." not in p.name] == [
        "adaln_hoist",
        "qkv_merge",
        "qkv_epilogue",
        "norm_modulate",
        "mlp_act",
        "block_compile",
    ]
    assert len(flux.params) == 15 and flux.is_valid(flux.default())
    assert {p.name for p in flux.params if p.name.startswith("mlp_act.")} == {
        "mlp_act.BM",
        "mlp_act.BN",
        "mlp_act.BK",
        "mlp_act.GROUP_M",
        "mlp_act.num_warps",
        "mlp_act.num_stages",
    }
    d = flux.default()
    assert (
        flux.why_invalid({**d, "qkv_epilogue": "triton"}) == "qkv_epilogue=triton needs qkv_merge=merged (got separate)"
    )
    assert flux.why_invalid({**d, "qkv_epilogue": "triton", "qkv_merge": "merged"}) is None
    assert flux.why_invalid({**d, "block_compile": "on", "qkv_epilogue": "compiled"}) == (
        "block_compile=on excludes qkv_epilogue=compiled"
    )
    assert "mlp_act.BM matter only when mlp_act is gemm_epilogue" in flux.why_invalid({**d, "mlp_act.BM": 64})
    big = {
        **d,
        "mlp_act": "gemm_epilogue",
        "mlp_act.BM": 256,
        "mlp_act.BN": 256,
        "mlp_act.BK": 128,
        "mlp_act.num_stages": 5,
    }
    assert flux.why_invalid(big).startswith("mlp_act: shared memory")
    qwen = model_space(qwen3_moe_stack.model())
    assert [p.name for p in qwen.params if "." not in p.name] == [
        "qkv_merge",
        "qkv_epilogue",
        "rmsnorm",
        "moe_impl",
        "block_compile",
    ]
    assert len(qwen.params) == 14
    sites = {s["site"]: s for s in describe_sites(qwen3_moe_stack.model())}
    assert sites["moe_impl"]["kind"] == "fuse" and sites["qkv_epilogue"]["requires"] == {
        "triton": [["qkv_merge", "merged"]]
    }


def test_apply_shares_weights_and_leaves_the_base_untouched() -> None:
    base = flux_dit.model()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    space = model_space(base)
    done = apply(base, variant(space, adaln_hoist="hoisted", qkv_merge="merged"))
    assert done.ok, done.reason
    cand = done.module
    assert [c.site for c in done.checks] == ["adaln_hoist", "qkv_merge"] and all(c.ok for c in done.checks)
    # the base: same values, still as written, nothing built on it
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    assert base.choice("adaln_hoist") == "per_block" and base.blocks[0].choice("qkv_merge") == "separate"
    assert "_qkv" not in base.blocks[0].__dict__ and "_mod" not in base.__dict__
    # the candidate: new modules, the same parameters; only the merged weights are new
    assert cand is not base and cand.blocks[0] is not base.blocks[0]
    assert cand.blocks[0].img.to_q.weight is base.blocks[0].img.to_q.weight
    assert cand.blocks[0].choice("qkv_merge") == "merged" and cand.choice("adaln_hoist") == "hoisted"
    inputs = flux_dit.example_inputs()
    with torch.inference_mode():
        want, got = base(*inputs), cand(*inputs)
    assert judge(want, got, torch.float32)[0] is None
    assert all(torch.allclose(w, g, atol=1e-5) for w, g in zip(want, got))


_SITES = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import flux_dit, qwen3_moe_stack
from evokernel.model.model_level import SiteCheck, apply, model_space, variant
out = []
for mod, extra in ((flux_dit, [{"mlp_act": "gemm_epilogue", "mlp_act.BM": 32, "mlp_act.BN": 64, "mlp_act.BK": 32},
                               {"qkv_merge": "merged", "qkv_epilogue": "triton", "qkv_epilogue.BLOCK_T": 16},
                               {"adaln_hoist": "hoisted", "qkv_merge": "merged", "qkv_epilogue": "triton",
                                "norm_modulate": "triton", "mlp_act": "gemm_epilogue", "block_compile": "on"}]),
                   (qwen3_moe_stack, [{"moe_impl": "triton_fused", "moe_impl.BLOCK_SIZE_M": 16,
                                       "moe_impl.BLOCK_SIZE_N": 32, "moe_impl.BLOCK_SIZE_K": 32},
                                      {"qkv_merge": "merged", "qkv_epilogue": "triton", "qkv_epilogue.BLOCK_T": 1},
                                      {"qkv_merge": "merged", "qkv_epilogue": "triton", "rmsnorm": "triton",
                                       "moe_impl": "triton_fused"},
                                      # the fused MoE as a custom op inside a compiled layer
                                      {"moe_impl": "triton_fused", "moe_impl.BLOCK_SIZE_M": 16,
                                       "moe_impl.BLOCK_SIZE_N": 32, "moe_impl.BLOCK_SIZE_K": 32,
                                       "block_compile": "on"}])):
    base = mod.model()
    space = model_space(base)
    checker = SiteCheck(base, seeds=3)
    genomes = []
    for p in space.params:
        if "." in p.name:
            continue
        for v in p.values[1:]:
            point = {p.name: v, **({"qkv_merge": "merged"} if (p.name, v) == ("qkv_epilogue", "triton") else {})}
            genomes.append(point)
    for point in genomes + extra:
        done = apply(base, variant(space, point), checker=checker)
        out.append({"model": mod.name, "point": point, "ok": done.ok, "reason": done.reason,
                    "checks": [[c.site, c.choice, c.ok, c.error, c.tolerance, c.seeds] for c in done.checks]})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def site_checks() -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _SITES, str(ROOT / "examples" / "models")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_site_realisation_passes_its_check_against_the_unfused_module(site_checks: list[dict]) -> None:
    seen = {(c["model"], s, v) for c in site_checks for s, v, *_ in c["checks"]}
    # every non-baseline choice of every site of both models was realised and checked
    assert seen >= {
        ("flux-dit", "adaln_hoist", "hoisted"),
        ("flux-dit", "qkv_merge", "merged"),
        ("flux-dit", "qkv_epilogue", "triton"),
        ("flux-dit", "qkv_epilogue", "compiled"),
        ("flux-dit", "norm_modulate", "triton"),
        ("flux-dit", "mlp_act", "gemm_epilogue"),
        ("flux-dit", "block_compile", "on"),
        ("qwen3-moe-stack", "block_compile", "on"),
        ("qwen3-moe-stack", "qkv_merge", "merged"),
        ("qwen3-moe-stack", "qkv_epilogue", "triton"),
        ("qwen3-moe-stack", "qkv_epilogue", "compiled"),
        ("qwen3-moe-stack", "rmsnorm", "triton"),
        ("qwen3-moe-stack", "moe_impl", "triton_fused"),
    }
    for case in site_checks:
        assert case["ok"], case
        for site, choice, ok, err, tol, seeds in case["checks"]:
            assert ok and seeds == 3 and err <= tol == 1e-4, case


def _broken(model: torch.nn.Module) -> torch.nn.Module:
    """A Qwen stack whose rmsnorm='triton' realisation forgets the norm's weight (eager ops)."""

    class Broken(qwen3_moe_stack.DecoderLayer):
        def _norm(self, x, weight, y=None):  # type: ignore[no-untyped-def]
            if self.choice("rmsnorm") == "triton":
                x = x + y if y is not None else x
                return x, qwen3_moe_stack.rms(x, torch.ones_like(weight))
            return super()._norm(x, weight, y)

    for layer in model.layers:
        layer.__class__ = Broken
    return model


def test_a_wrong_realisation_is_refused_with_its_reason() -> None:
    base = _broken(qwen3_moe_stack.model())
    space = model_space(base)
    done = apply(base, variant(space, rmsnorm="triton"))
    assert not done.ok and done.module is None and done.status == "incorrect"
    assert done.reason.startswith("site check failed: site rmsnorm=triton on layers.0: seed 0: output 0: max |diff|")
    assert "of the output RMS (tolerance 0.0001)" in done.reason
    [verdict] = done.checks
    assert not verdict.ok and verdict.error > 1e-2
    # the verdict is cached: a second genome with the same site is refused without running it again
    checker = SiteCheck(base)
    assert not apply(base, variant(space, rmsnorm="triton"), checker=checker).ok
    assert len(checker._cache) == 1
    assert not apply(base, variant(space, rmsnorm="triton", qkv_merge="merged"), checker=checker).ok
    assert len(checker._cache) == 2


def test_the_model_evaluator_on_the_cpu() -> None:
    m = qwen3_moe_stack.model()
    ev = ModelEvaluator(m, qwen3_moe_stack.example_inputs(), name="qwen-tiny", device="cpu", timing=FAST)
    genomes = [
        variant(ev.space),
        variant(ev.space, qkv_merge="merged"),
        Genome.of({**ev.space.default(), "qkv_epilogue": "triton"}),
    ]
    base_ok, merged, invalid = list(ev.evaluate(genomes))
    for r in (base_ok, merged):
        assert r.is_ok and r.meta["timing"] == "cpu-wall" and r.meta["baseline_ms"] > 0
        assert len(r.samples) == FAST.rounds and r.meta["numerics"]["error"] <= r.meta["numerics"]["tolerance"]
    assert merged.meta["sites"]["qkv_merge"] == "merged" and merged.meta["changed"] == ["qkv_merge"]
    assert merged.meta["checks"][0]["site"] == "qkv_merge" and merged.meta["checks"][0]["ok"]
    assert invalid.status is Status.INVALID and "needs qkv_merge=merged" in invalid.error
    # candidates compiling the same block method must not fall back to eager after dynamo's
    # default 8 recompiles (call S)
    import torch

    assert torch._dynamo.config.recompile_limit >= 256
    broken = ModelEvaluator(
        _broken(qwen3_moe_stack.model()), qwen3_moe_stack.example_inputs(), name="broken", device="cpu", timing=FAST
    )
    [bad] = list(broken.evaluate([variant(broken.space, rmsnorm="triton")]))
    assert bad.status is Status.INCORRECT and "site rmsnorm=triton" in bad.error and bad.meta["checks"]
    fp = ev.fingerprint()
    assert fp["evaluator"] == "model" and fp["model"] == "qwen-tiny" and fp["dtype"] == "float32"
    [again] = ev.remeasure([genomes[1]])
    assert again.is_ok and again.meta["speedup"] > 0


class _RecordedTimes:
    """A model evaluator whose `measure` builds and runs every variant for real (on the CPU)
    and then reports recorded figures instead of the wall clock's: what the ablation decides
    rests on known numbers, not on a CPU timing outlier (a baseline slowed 11x by another
    process once made a change 'pay alone')."""

    def __init__(self, evaluator: ModelEvaluator, medians: dict[str, float], noise: float = 0.005) -> None:
        self.evaluator, self.medians, self.noise = evaluator, medians, noise
        self.measured: dict[str, Timing] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self.evaluator, name)

    def measure(self, variants: dict) -> tuple[dict[str, Timing], dict[str, str]]:
        times, failed = self.evaluator.measure(variants)
        self.measured = times
        kind = {label: label.split(":")[0] for label in times}
        return {
            label: msgspec.structs.replace(
                t, median_ms=self.medians[kind[label]], noise=self.noise, samples=(self.medians[kind[label]],)
            )
            for label, t in times.items()
        }, failed


def test_ablation_records_dead_ends_and_the_winning_set(tmp_path: Path) -> None:
    real = ModelEvaluator(flux_dit.model(), flux_dit.example_inputs(), name="flux-tiny", device="cpu", timing=FAST)
    # recorded figures: each change alone is 2% faster than the baseline, short of the 5% a
    # change must gain to pay on its own, so every change is a dead end: what is recorded for one
    ev = _RecordedTimes(real, {"baseline": 1.0, "alone": 0.98, "without": 0.985, "winner": 0.97})
    winner = variant(real.space, adaln_hoist="hoisted", qkv_merge="merged")
    report = ablate(ev, winner, min_gain=0.05)
    labels = {"baseline", "winner", "alone:adaln_hoist", "without:adaln_hoist", "alone:qkv_merge", "without:qkv_merge"}
    assert set(ev.measured) == labels and all(t.median_ms > 0 for t in ev.measured.values())  # each one ran
    assert [r.site for r in report.rows] == ["adaln_hoist", "qkv_merge"]
    assert all(r.alone_ms == 0.98 and r.without_ms == 0.985 and not r.pays_alone for r in report.rows)
    assert all(r.alone_speedup == pytest.approx(1 / 0.98) and not r.error for r in report.rows)
    assert report.dead_ends() == report.rows and report.winner_ms == 0.97 and report.baseline_ms == 1.0
    assert report.timing == "cpu-wall" and "| adaln_hoist=hoisted |" in report.markdown()
    with SQLiteStore(str(tmp_path / "kb.db")) as store:
        lessons = record(
            store,
            report,
            ev.space,
            gpu="cpu",
            toolchain={"torch": "x"},
            shapes=[{"tokens": 32}],
            tests=["tests/test_model_level.py"],
        )
        stored = store.lessons(op="flux-tiny")
        assert len(lessons) == 2 and {le.kind for le in stored} == {"caveat"}
        text = " ".join(le.text for le in stored)
        assert "dead end on flux-tiny: adaln_hoist=hoisted does not pay on its own" in text
        assert all(le.evidence["class"] == "dead end" and le.evidence["alone_ms"] > 0 for le in stored)
        [kernel] = store.kernels(op="flux-tiny")
        assert kernel["kind"] == "model-level" and kernel["latency_ms"] == report.winner_ms
        assert '+ "adaln_hoist": "hoisted",' in kernel["diff"] and '- "qkv_merge": "separate"' in kernel["diff"]
        assert kernel["figures"]["rows"][0]["site"] == "adaln_hoist" and kernel["tests"]


def test_alone_and_without_follow_requirements() -> None:
    space = model_space(qwen3_moe_stack.model())
    win = {
        **space.default(),
        "qkv_merge": "merged",
        "qkv_epilogue": "triton",
        "qkv_epilogue.BLOCK_T": 16,
        "rmsnorm": "triton",
    }
    solo = alone(space, win, "qkv_epilogue")
    assert solo["qkv_merge"] == "merged" and solo["qkv_epilogue.BLOCK_T"] == 16 and solo["rmsnorm"] == "eager"
    point, undone = without(space, win, "qkv_merge")
    assert undone == ["qkv_merge", "qkv_epilogue"] and point["qkv_epilogue.BLOCK_T"] == 4
    assert point["rmsnorm"] == "triton" and space.is_valid(point)
