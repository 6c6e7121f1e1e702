"""Render BENCHMARKS.md from the machine-readable record under benchmarks/results/.

    python benchmarks/render_benchmarks.py            # write BENCHMARKS.md
    python benchmarks/render_benchmarks.py --check    # exit 1 if BENCHMARKS.md differs

The page is a pure function of the record files: every figure is read from them (a card or a
date a file does not hold is "not recorded"), nothing depends on when or where it renders.
The reproducing commands are the `bash benchmarks/device.sh STEP` invocations (or, for the CPU
replays, the Python command) that wrote each record; where a record names an older
one-script-per-step runner, its step of `benchmarks/device.sh` is given (its variables are
unchanged, see that script's header). The reference for each target is docs/benchmarks/.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "BENCHMARKS.md"
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Row:
    target: str
    page: str  # docs/benchmarks/<page>.md
    card: str
    figure: str
    date: str
    command: str
    record: str  # the file(s) under benchmarks/results/ the figure comes from


def _json(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _jsonl(name: str) -> list[dict]:
    return [json.loads(ln) for ln in (RESULTS / name).read_text().splitlines() if ln.strip()]


def _f(x: float | None, n: int = 3) -> str:
    return NOT_RECORDED if x is None else f"{x:.{n}f}"


def _day(iso: str | None) -> str:
    return iso[:10] if iso else NOT_RECORDED


def _card(name: str | None) -> str:
    return name or NOT_RECORDED


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _footing_date(d: dict) -> str:
    """The date of the latest footing call (the re-measurement the figures come from)."""
    dates = [v["date"] for v in d.get("footing", {}).values() if v.get("date")]
    return _day(max(dates) if dates else d.get("date"))


def _timed(d: dict) -> int:
    """How many rows a footing call re-measured (the rows the graph/eager geomeans cover)."""
    return sum(1 for r in d["rows"] if "timing" in r)


def _footing_calls(d: dict) -> str:
    return ", ".join(sorted(d.get("footing", {})))


def _gemm() -> list[Row]:
    d = _json("gemm.json")
    g, e = d["geomean"], d["geomean_eager"]
    g256, e256 = d["geomean_m256"], d["geomean_eager_m256"]
    fig = (
        f"geomean vs cuBLAS **{_f(g['cublas'])}** graph-replayed / **{_f(e['cublas'])}** eager over "
        f"{len(d['rows'])} shapes; M >= 256: {_f(g256['cublas'])} / {_f(e256['cublas'])} "
        f"(footing call {_footing_calls(d)})"
    )
    rows = [
        Row(
            "GEMM vs cuBLAS",
            "gemm",
            _card(d.get("device")),
            fig,
            _footing_date(d),
            "`FAMILIES=gemm bash benchmarks/device.sh footing`",
            "gemm.json",
        )
    ]
    h = d["host_launch"]
    (call, c), *_ = sorted(h["calls"].items())
    rows.append(
        Row(
            "GEMM host time per call",
            "gemm",
            _card(d.get("device")),
            f"launcher over torch.matmul, eager host time: {h['within_10us']} of {h['rows']} shapes within "
            f"+10 us, median +{_f(h['median_over_matmul_us'], 1)} us, max +{_f(h['max_over_matmul_us'], 1)} "
            f"(call {call}, {c.get('reps', NOT_RECORDED)} interleaved rounds)",
            _day(c.get("date")),
            '`TEST_TIMEOUT=200 DEADLINE=170 EXTRA="--n 120 --warmup 10" bash benchmarks/device.sh launch`',
            "gemm.json (`host_launch`)",
        )
    )
    return rows


def _moe() -> list[Row]:
    d = _json("moe.json")
    g, e = d["geomean"], d["geomean_eager"]
    fig = (
        f"geomean vs SGLang default config **{_f(g['sglang_default'])}** graph-replayed / "
        f"**{_f(e['sglang_default'])}** eager; vs SGLang's shipped H200 configs {_f(g['sglang_h200'])} / "
        f"{_f(e['sglang_h200'])} ({_timed(d)} of {len(d['rows'])} rows re-measured; footing call {_footing_calls(d)})"
    )
    return [
        Row(
            "Fused MoE vs SGLang configs",
            "moe",
            _card(d.get("device")),
            fig,
            _footing_date(d),
            "`FAMILIES=moe bash benchmarks/device.sh footing`",
            "moe.json",
        )
    ]


def _attention() -> list[Row]:
    p = _json("attention_prefill.json")
    q = _json("attention_decode.json")
    pg, pe = p["geomean"], p["geomean_eager"]
    dg, de = q["geomean"], q["geomean_eager"]
    return [
        Row(
            "Attention prefill (Triton template)",
            "attention-prefill",
            _card(p.get("device")),
            f"geomean vs best torch SDPA {_f(pg['sdpa_best'])} graph-replayed / {_f(pe['sdpa_best'])} eager; "
            f"vs the template's default {_f(pg['triton_default'])} / {_f(pe['triton_default'])} "
            f"({len(p['rows'])} rows; footing call {_footing_calls(p)})",
            _footing_date(p),
            "`FAMILIES=attention bash benchmarks/device.sh footing`",
            "attention_prefill.json",
        ),
        Row(
            "Paged decode attention",
            "paged-decode",
            _card(q.get("device")),
            f"geomean vs SGLang's split-KV default **{_f(dg['split_kv_default'])}** graph-replayed / "
            f"**{_f(de['split_kv_default'])}** eager; vs SDPA on the gathered cache {_f(dg['sdpa'])} / "
            f"{_f(de['sdpa'])} ({len(q['rows'])} rows; footing call {_footing_calls(q)})",
            _footing_date(q),
            "`FAMILIES=decode bash benchmarks/device.sh footing`",
            "attention_decode.json",
        ),
    ]


def _gluon() -> list[Row]:
    d = _json("attention_prefill_gluon.json")
    i, g, e = d["geomean_issue_shapes"], d["geomean_graph"], d["geomean_eager"]
    speeds = [
        (r["graph"]["speedup"]["sdpa_best"], r["spec"])
        for r in d["rows"]
        if "sdpa_best" in r["graph"].get("speedup", {})
    ]
    low = f"; lowest row {min(speeds)[1]} {_f(min(speeds)[0])} graph-replayed" if speeds else ""
    cmd = d["command_full"]
    cmd = cmd if "benchmarks/device.sh" in cmd else NOT_RECORDED
    return [
        Row(
            "Gluon prefill (FA3-style) vs cuDNN",
            "gluon-prefill",
            _card(d.get("device")),
            f"geomean vs best torch SDPA over issue 28's 7 shapes **{_f(i['graph'])}** graph-replayed / "
            f"**{_f(i['eager'])}** eager; over all {len(d['rows'])} rows {_f(g['sdpa_best'])} / "
            f"{_f(e['sdpa_best'])}{low} (call {d.get('call', NOT_RECORDED)})",
            _day(d.get("date")),
            f"`{cmd}`",
            "attention_prefill_gluon.json",
        )
    ]


def _device_step(command: str, old: str, step: str) -> str:
    """A recorded `VARS bash benchmarks/<old> (note)` as `VARS bash benchmarks/device.sh <step>`."""
    cmd = command.split(" (")[0].strip()
    return cmd.replace(f"bash benchmarks/{old}", f"bash benchmarks/device.sh {step}")


def _sglang() -> list[Row]:
    d = _json("sglang_e2e.json")
    g = d["geomean"]["sglang_shipped"]
    p = d["paired"]["decode_throughput"]["evokernel_kernel"].get("geomean", {})
    paired = (
        f"paired {_f(p['median'])} [{_f(p['low'])}, {_f(p['high'])}] over {p['rounds']} rounds, {p['verdict']}"
        if "median" in p
        else "paired: not recorded"
    )
    ok = all(v.get("ok") for v in d.get("numerics", {}).values())
    rows = [
        Row(
            "SGLang end to end (decode throughput)",
            "sglang-e2e",
            _card(d.get("device")),
            f"geomean decode throughput vs SGLang shipped, evolved kernel in the engine **{_f(g['evokernel_kernel'])}** "
            f"({paired}), evolved configs {_f(g['evokernel_configs'])}; engine wall clock, CUDA graphs on; "
            f"numerics {'unchanged' if ok else 'changed'} (call {d.get('call', NOT_RECORDED)})",
            _day(d.get("date")),
            f"`{_device_step(d['device_command'], 'device_sglang.sh', 'sglang')}`",
            "sglang_e2e.json",
        )
    ]
    s22 = d["long_context_session22"]
    c = s22["geomean_12_layers_C"]
    sh, bf = c["sglang_shipped"], c["sglang_best_flag"]
    four = d["long_context"]["geomean"]
    rows.append(
        Row(
            "SGLang long-context decode",
            "sglang-long-context",
            NOT_RECORDED,
            f"12-layer model, wall clock vs SGLang shipped **{_f(sh['long_context'])}** (paired "
            f"{_f(sh['paired']['median'])}), vs SGLang at its best flag **{_f(bf['long_context'])}** (paired "
            f"{_f(bf['paired']['median'])}, {bf['paired']['verdict']}); GPU kernel time {_f(sh['kernel_time'])} / "
            f"{_f(bf['kernel_time'])}; 4 layers: {_f(four['sglang_shipped']['long_context'])} / "
            f"{_f(four['sglang_best_flag']['long_context'])} (call C; `sglang_e2e.json` summary)",
            _day(s22.get("date")),
            f"`{s22['calls']['C']}`",
            "sglang_e2e.json (`long_context_session22`)",
        )
    )
    return rows


def _model_level() -> list[Row]:
    d = _json("model_level.json")
    g = d["geomean"]
    timings = sorted({m.get("timing", NOT_RECORDED) for m in d["models"].values()})
    card = d.get("toolchain", {}).get("gpu") or next(
        (m.get("device") for m in d["models"].values() if m.get("device")), None
    )
    return [
        Row(
            "Model level (FLUX DiT, Qwen3-MoE stack)",
            "model-level",
            _card(card),
            f"geomean vs eager replayed from a CUDA graph **{_f(g['eager_cudagraph'])}**, vs torch.compile "
            f"max-autotune **{_f(g['torch_compile'])}** ({len(d['models'])} models; timing {', '.join(timings)}; "
            f"call {d.get('call', NOT_RECORDED)})",
            _day(d.get("date")),
            "`" + _device_step(d["command"], "device_model_level.sh", "model-level") + "`",
            "model_level.json",
        )
    ]


def _at(rows: list[dict], strategy: str, family: str, k: str) -> float:
    sel = [r for r in rows if r["strategy"] == strategy and family in r["landscape"]]
    return _mean([r["mean_fraction"][k] for r in sel])


def _search() -> list[Row]:
    m = _jsonl("search_efficiency_model.jsonl")
    h = _jsonl("search_efficiency_model_hedged.jsonl")
    a = _jsonl("search_efficiency_attention_shapes.jsonl")
    fig = (
        "leave one shape out, mean fraction of the optimum (10 seeds, no noise), `model` strategy "
        f"(default in brackets): matmul **{_f(_at(h, 'model', 'matmul', '25'))}** at 25 / "
        f"**{_f(_at(h, 'model', 'matmul', '100'))}** at 100 ({_f(_at(m, 'default', 'matmul', '25'))} / "
        f"{_f(_at(m, 'default', 'matmul', '100'))}); MoE {_f(_at(h, 'model', 'moe', '25'))} at 25 "
        f"({_f(_at(m, 'default', 'moe', '25'))}); attention (6 shapes) {_f(_at(a, 'model', 'attention', '25'))} "
        f"at 25 ({_f(_at(a, 'default', 'attention', '25'))})"
    )
    f = _json("fidelity_efficiency.json")
    full = [r["at_25"] for r in f["records"] if r["mode"] == "full"]
    casc = [r["at_25"] for r in f["records"] if r["mode"] == "cascade"]
    args = f.get("args", {})
    w = _json("search_wallclock.json")
    bs = w["by_strategy"]
    sec = w["second"]
    gen0 = sec["Y_cold"]["generation0_best_ms"] / sec["Y_warm"]["generation0_best_ms"]
    x_cmd = re.sub(r"\s*\([^)]*\)", "", w.get("calls", {}).get("S17b", NOT_RECORDED)).strip()
    return [
        Row(
            "Search efficiency (held-out cost model)",
            "search-efficiency",
            "CPU replay of recorded NVIDIA H200 landscapes",
            fig,
            NOT_RECORDED,
            f"`python benchmarks/search_efficiency.py --landscapes {' '.join(dict.fromkeys(r['landscape'] for r in h))} "
            "--strategies default model --seeds 10 --budget 100 --checkpoints 10 25 50 100 --jobs 2`",
            "search_efficiency_model{,_hedged}.jsonl, search_efficiency_attention_shapes.jsonl",
        ),
        Row(
            "Search against the clock",
            "search-efficiency",
            _card(w.get("device")),
            f"seconds to within 2% of the sweep's best, median of {bs['model']['runs']} seeds: `model` "
            f"**{_f(bs['model']['median_t_within_2pct'], 1)}**, optuna-tpe {_f(bs['optuna-tpe']['median_t_within_2pct'], 1)}, "
            f"default {_f(bs['default']['median_t_within_2pct'], 1)}; exhaustive sweep "
            f"{_f(w['sweep']['t_within_2pct'], 1)} ({_f(w['sweep']['wall_s'], 1)} to finish); a second search "
            f"warm from the first's store starts {_f(gen0, 2)}x faster (generation 0 best vs cold)",
            NOT_RECORDED,
            f"`{x_cmd}`",
            "search_wallclock.json",
        ),
        Row(
            "Fidelity cascade",
            "search-efficiency",
            "CPU replay of recorded NVIDIA H200 landscapes",
            f"mean fraction of the optimum at 25 full-judgement equivalents over {len(casc)} landscapes: "
            f"cascade (cheap = {args.get('cheap_cost', NOT_RECORDED)} of full) **{_f(_mean(casc))}** vs full "
            f"judging {_f(_mean(full))} ({args.get('seeds', NOT_RECORDED)} seeds, noise {args.get('noise', NOT_RECORDED)})",
            NOT_RECORDED,
            f"`python benchmarks/fidelity_efficiency.py --seeds {args.get('seeds', 10)} --landscapes "
            f"{' '.join(ast.literal_eval(args.get('landscapes', '[]')))} --out {args.get('out')}`",
            "fidelity_efficiency.json",
        ),
    ]


def _knowledge() -> list[Row]:
    text = (RESULTS / "knowledge_ablation.md").read_text()
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in text.splitlines() if ln.startswith("| M")]
    warm = [c for c in cells if c[1] == "with store"]
    cold = [c for c in cells if c[1] == "empty store"]
    cold_evals = [c[2] for c in cold]
    seeds = warm[0][4].split("/")[-1] if warm and "/" in warm[0][4] else NOT_RECORDED
    return [
        Row(
            "Memory across runs",
            "memory-across-runs",
            "CPU replay of recorded NVIDIA H200 landscapes",
            f"second run, median evaluations to the first run's best: with the store "
            f"**{', '.join(c[2] for c in warm)}**, from an empty store {', '.join(cold_evals)} "
            f"({len(warm)} matmul landscapes, {seeds} seeds each)",
            NOT_RECORDED,
            "`python benchmarks/knowledge_ablation.py --seeds 10 --first 60 --budget 100`",
            "knowledge_ablation.md",
        )
    ]


def _gate() -> list[Row]:
    d = _json("sandbox.json")
    on, off = d["gate"]["on"], d["gate"]["off"]
    fo, to = on["fidelity"], on["throughput"]
    ff, tf = off["fidelity"], off["throughput"]
    card = on.get("env", {}).get("gpu") or d.get("device")
    return [
        Row(
            "Gate fidelity and throughput",
            "gate",
            _card(card),
            f"sandbox on (the default): fidelity {fo['within_1pct']}/{fo['configs']} configurations within 1%, "
            f"worst {_f(fo['worst_dev_pct'], 2)}%; throughput **{_f(to['per_min'], 1)}** candidates/min "
            f"({to['done']} in {_f(to['elapsed_s'], 1)} s, {to['workers']} compile workers) (call {on['call']})",
            NOT_RECORDED,
            "`WITHOUT= WINDOW=150 STEP=on DEADLINE=215 bash benchmarks/device.sh sandbox`",
            "sandbox.json (`gate.on`)",
        ),
        Row(
            "Sandbox cost",
            "sandbox",
            _card(card),
            f"throughput with every protection on / off: {_f(to['per_min'], 1)} / {_f(tf['per_min'], 1)} "
            f"per min = **{_f(to['per_min'] / tf['per_min'])}**; fidelity worst {_f(fo['worst_dev_pct'], 2)}% / "
            f"{_f(ff['worst_dev_pct'], 2)}%; probe: {len(d['probe']['variants'])} protection sets "
            f"(call {on['call']})",
            NOT_RECORDED,
            "`WITHOUT= WINDOW=150 STEP=on DEADLINE=215 bash benchmarks/device.sh sandbox; "
            "WITHOUT= WINDOW=150 STEP=off DEADLINE=200 bash benchmarks/device.sh sandbox`",
            "sandbox.json",
        ),
    ]


def _gate_h100() -> list[Row]:
    """The allowlist root's gate on an H100 (sandbox_h100.json): a row per card beside the H200's."""
    d = _json("sandbox_h100.json")
    on, off = d["gate"]["on"], d["gate"]["off"]
    fo, to, tf = on["fidelity"], on["throughput"], off["throughput"]
    return [
        Row(
            "Gate fidelity and throughput",
            "gate",
            _card(d["device"]),
            f"sandbox on (allowlist root): fidelity {fo['within_1pct']}/{fo['configs']} configurations within 1% of "
            f"the recorded H200 landscape, worst {_f(fo['worst_dev_pct'], 2)}%; throughput **{_f(to['per_min'], 1)}** "
            f"candidates/min ({to['done']} in {_f(to['elapsed_s'], 1)} s, {to['workers']} compile workers); off: "
            f"{_f(tf['per_min'], 1)}/min = on/off **{_f(to['per_min'] / tf['per_min'])}** (call {on['call']})",
            d["date"],
            f"`{on['command']}; {off['command']}`",
            "sandbox_h100.json",
        )
    ]


def _ray() -> list[Row]:
    d = _json("ray_overhead.json")
    pairs = ", ".join(_f(v) for _, v in sorted(d["pairs"].items()))
    return [
        Row(
            "Ray overhead (one actor)",
            "ray-overhead",
            NOT_RECORDED,
            f"candidates/min through one Ray actor / in process **{_f(d['ray_over_inproc'])}** "
            f"({_f(d['ray_per_min'], 1)} / {_f(d['inproc_per_min'], 1)}; paired {pairs}; target "
            f"`{d.get('target', NOT_RECORDED)}`)",
            NOT_RECORDED,
            f"`SKIP_TESTS=1 WINDOW={d['window_s']:.0f} PAIRS={len(d['pairs'])} EVALUATIONS={d['evaluations']} "
            "DEADLINE=500 bash benchmarks/device.sh ray`",
            "ray_overhead.json",
        )
    ]


def _soak() -> list[Row]:
    rows = []
    for name, flag in (("store_soak.json", ""), ("store_soak_default_strategy.json", " --strategy default")):
        d = _json(name)
        starts = [p["start"] for p in d.get("per_driver", []) if "start" in p]
        date = _dt.datetime.fromtimestamp(min(starts), _dt.timezone.utc).date().isoformat() if starts else NOT_RECORDED
        cpus = d.get("machine", {}).get("cpus")
        rows.append(
            Row(
                f"Store soak ({d['strategy']} strategy)",
                "store-soak",
                f"CPU, {cpus} cores" if cpus else NOT_RECORDED,
                f"{d['drivers']} drivers x {d['evaluations_per_driver']} evaluations on one {d['backend']}: "
                f"**{_f(d['results_per_s'], 1)}** results/s; lost {d['lost_evaluations']}, measured twice "
                f"{d['genomes_measured_twice']}, orphans {d['orphan_results']}",
                date,
                f"`python benchmarks/store_soak.py --drivers {d['drivers']} --evaluations "
                f"{d['evaluations_per_driver']}{flag}`",
                name,
            )
        )
    return rows


TARGETS: tuple[Callable[[], list[Row]], ...] = (
    _gemm,
    _moe,
    _attention,
    _gluon,
    _sglang,
    _model_level,
    _search,
    _knowledge,
    _gate,
    _gate_h100,
    _ray,
    _soak,
)

INTRO = """\
# Benchmarks

Where each target stands, rendered from the machine-readable record under
`benchmarks/results/` by `python benchmarks/render_benchmarks.py` (do not edit this page by hand;
`benchmarks/tests/test_benchmarks_page.py` fails when it and the record disagree). Each target's page under
[docs/benchmarks/](docs/benchmarks/) says how it is measured, on what footing, against which
baseline, and what limits the figure. The history of the measurements is in git.

- Every figure names its card: the GPU the record says it ran on, or "not recorded" where the
  file does not say. CPU replays name the recorded landscapes' card.
- A ratio compares two sides timed in the same call on the same card (winner and baseline
  interleaved); where a target was measured on different cards there is a row per card.
- Graph-replayed: each timed block of calls replayed from a CUDA graph; eager: the same block
  called from Python, the host's launch path included. A ratio above 1 means evokernel is faster.
- The command reproduces the figure: a step of `benchmarks/device.sh` (its header lists the
  steps and their variables; run in a device call carrying `.whl`, the SGLang steps also
  `.sgl`) or, for the CPU replays, the Python command. The record file is under
  `benchmarks/results/`; a date or card it lacks is "not recorded".
"""


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def rows() -> list[Row]:
    out: list[Row] = []
    for target in TARGETS:
        out.extend(target())
    return out


def render() -> str:
    lines = [
        INTRO,
        "| target | card | headline figure (footing) | date | command | record |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows():
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    f"[{r.target}](docs/benchmarks/{r.page}.md)",
                    r.card,
                    r.figure,
                    r.date,
                    r.command,
                    r.record,
                )
            )
            + " |"
        )
    text = "\n".join(lines) + "\n"
    assert not re.search(r"\bnan\b|\binf\b", text), "a figure did not compute"
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if BENCHMARKS.md is not what the record renders")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        same = PAGE.exists() and PAGE.read_text() == text
        print("BENCHMARKS.md is up to date" if same else "BENCHMARKS.md differs from the record: re-render it")
        return 0 if same else 1
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
