"""A stored run as tables (pandas): every evaluation, the convergence, the operators, the
statuses, the learned skips, the re-measured elites, and an in-memory Optuna study of the
landscape. The figures (`figures`, `png`) draw these tables; nothing here draws.

Everything reads a store through the `Store` protocol (`runs`, `history`, `events`,
`elites`), so any back end works.

>>> from evokernel import Budget, Search
>>> from evokernel.evaluators import ReplayEvaluator
>>> from evokernel.engine.landscape import builtin
>>> from evokernel.store import SQLiteStore
>>> store = SQLiteStore(":memory:")
>>> ev = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> _ = Search(ev.space, ev, strategy="random", store=store).run(Budget(evaluations=8), seed=0)
>>> frame = results_frame(store)
>>> len(frame[frame.kind == "eval"]), list(frame.columns[:4])
(8, ['run_id', 'run_name', 'seq', 'kind'])
"""

from __future__ import annotations

import difflib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from evokernel.core.archive import Elite
from evokernel.core.errors import ConfigError
from evokernel.core.genome import Genome
from evokernel.engine.report import noise_interval
from evokernel.store._base import Evaluation, RunInfo, Store

__all__ = [
    "RESULT_COLUMNS",
    "RunData",
    "results_frame",
    "select_runs",
    "load_runs",
    "convergence",
    "operator_table",
    "operator_timeline",
    "status_timeline",
    "skips_frame",
    "bandit_frame",
    "elites_frame",
    "header",
    "landscape_study",
]

#: the columns of `results_frame`, in order, with their dtypes; `param.<name>` columns follow
RESULT_COLUMNS: dict[str, str] = {
    "run_id": "object",
    "run_name": "object",
    "seq": "int64",
    "kind": "object",  # "eval" or "remeasure"
    "genome_id": "object",
    "status": "object",
    "latency_ms": "float64",  # NaN unless ok
    "noise": "float64",
    "cost": "float64",  # dollars (an LLM operator's)
    "elapsed_s": "float64",  # the evaluator's time on it (device time where it reports one)
    "cached": "bool",  # read back from the store (resumed or reused), not measured
    "created": "float64",  # unix time it was stored
    "t_s": "float64",  # seconds since the run began
    "operator": "object",
    "generation": "int64",
    "parents": "object",  # comma-separated genome ids
    "has_source": "bool",
    "error": "object",
}

STATUSES = ("ok", "invalid", "compile_error", "runtime_error", "incorrect", "timeout", "crash")


def select_runs(store: Store, runs: Sequence[str] | str | None = None) -> list[RunInfo]:
    """The runs meant: each of `runs` by id or id prefix; by default every run of the
    latest run's problem (its archive: same space and evaluator fingerprint)."""
    everything = store.runs()
    if not everything:
        raise ConfigError("the store holds no runs")
    if runs is None:
        latest = everything[-1]
        return [r for r in everything if r.archive_key == latest.archive_key]
    wanted = [runs] if isinstance(runs, str) else list(runs)
    out: list[RunInfo] = []
    for w in wanted:
        found = [r for r in everything if r.id.startswith(w)]
        if len(found) != 1:
            raise ConfigError(f"run {w!r}: {'no run' if not found else f'{len(found)} runs'} with that id")
        if found[0] not in out:
            out.append(found[0])
    return out


def _rows(info: RunInfo, history: list[Evaluation]) -> list[dict[str, Any]]:
    rows = []
    order = sorted(history, key=lambda e: (e.kind != "eval", e.seq))
    for e in order:
        r, lin = e.result, e.genome.lineage
        row: dict[str, Any] = {
            "run_id": info.id,
            "run_name": info.name,
            "seq": e.seq,
            "kind": e.kind,
            "genome_id": e.genome.id,
            "status": r.status.value,
            "latency_ms": r.latency_ms if r.is_ok else math.nan,
            "noise": r.noise,
            "cost": r.cost,
            "elapsed_s": r.elapsed_s,
            "cached": e.cached,
            "created": e.created,
            "t_s": max(0.0, e.created - info.created),
            "operator": lin.operator,
            "generation": lin.generation,
            "parents": ",".join(lin.parents),
            "has_source": e.genome.source is not None,
            "error": r.error,
        }
        row.update({f"param.{k}": v for k, v in e.genome.params.items()})
        rows.append(row)
    return rows


def results_frame(store: Store, run: Sequence[str] | str | None = None) -> pd.DataFrame:
    """Every stored evaluation of the runs (`select_runs`) as a DataFrame: the columns of
    `RESULT_COLUMNS`, then a `param.<name>` column per parameter; the eval rows of a run in
    the order measured, then its re-measurements."""
    rows: list[dict[str, Any]] = []
    for info in select_runs(store, run):
        rows.extend(_rows(info, store.history(info.id)))
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(RESULT_COLUMNS))
    return frame.astype(RESULT_COLUMNS)


@dataclass
class RunData:
    """One run, read once: its record, its rows, its events, its stored elites and genomes."""

    info: RunInfo
    frame: pd.DataFrame
    events: list[tuple[str, dict[str, Any], float]]
    elites: list[Elite]
    genomes: dict[str, Genome]
    #: baseline, speed-up, fraction of peak (`evokernel.report.standing`)
    standing: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How figures name the run: its strategy and seed, then its id."""
        cfg = self.info.config
        return f"{cfg.get('strategy', '?')} seed {cfg.get('seed', '?')} ({self.info.id[:8]})"


def load_runs(store: Store, runs: Sequence[str] | str | None = None) -> list[RunData]:
    from evokernel.report.standing import standing

    out = []
    for info in select_runs(store, runs):
        history = store.history(info.id)
        frame = pd.DataFrame(_rows(info, history)) if history else pd.DataFrame(columns=list(RESULT_COLUMNS))
        out.append(
            RunData(
                info=info,
                frame=frame.astype(RESULT_COLUMNS),
                events=store.events(info.id),
                elites=store.elites(run_id=info.id),
                genomes={e.genome.id: e.genome for e in history},
                standing=standing(store, info.id),
            )
        )
    return out


def _evals(run: RunData) -> pd.DataFrame:
    f = run.frame[run.frame.kind == "eval"].reset_index(drop=True)
    return f.assign(evaluation=range(1, len(f) + 1))


def convergence(runs: list[RunData]) -> pd.DataFrame:
    """Per run and evaluation: the best latency measured so far, its noise band, the time."""
    parts = []
    for run in runs:
        f = _evals(run)
        best, noise = math.inf, 0.0
        bests, lows, highs = [], [], []
        for ms, nz in zip(f.latency_ms, f.noise):
            if ms == ms and ms < best:  # not NaN
                best, noise = float(ms), float(nz)
            ok = math.isfinite(best)
            bests.append(best if ok else math.nan)
            lows.append(best * (1 - noise) if ok else math.nan)
            highs.append(best * (1 + noise) if ok else math.nan)
        parts.append(
            pd.DataFrame(
                {
                    "run": run.label,
                    "evaluation": f.evaluation,
                    "t_s": f.t_s,
                    "latency_ms": f.latency_ms,
                    "best_ms": bests,
                    "band_low_ms": lows,
                    "band_high_ms": highs,
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def operator_table(runs: list[RunData]) -> pd.DataFrame:
    """Per run and operator: proposals evaluated, ok results, improvements of the best so
    far, dollars, evaluator seconds (from each evaluation's lineage)."""
    rows = []
    for run in runs:
        f = _evals(run)
        best = math.inf
        improved = []
        for ms in f.latency_ms:
            better = ms == ms and ms < best
            best = ms if better else best
            improved.append(bool(better))
        f = f.assign(improved=improved, ok=f.status == "ok")
        for op, g in f.groupby("operator", sort=True):
            rows.append(
                {
                    "run": run.label,
                    "operator": op,
                    "proposals": len(g),
                    "accepted": int(g.ok.sum()),
                    "improvements": int(g.improved.sum()),
                    "dollars": float(g.cost.sum()),
                    "device_s": float(g.elapsed_s.sum()),
                }
            )
    return pd.DataFrame(
        rows, columns=["run", "operator", "proposals", "accepted", "improvements", "dollars", "device_s"]
    )


def operator_timeline(runs: list[RunData]) -> pd.DataFrame:
    """Per run, evaluation and operator: how many proposals that operator has had so far."""
    return _cumulative(runs, "operator")


def dollars_timeline(runs: list[RunData]) -> pd.DataFrame:
    """Per run, evaluation and operator: the dollars that operator has spent so far (the
    costs of the evaluated genomes it proposed); operators that cost nothing are left out."""
    return _cumulative(runs, "operator", value="cost")


def status_timeline(runs: list[RunData]) -> pd.DataFrame:
    """Per run, evaluation and status: how many results had that status so far."""
    return _cumulative(runs, "status")


def _cumulative(runs: list[RunData], column: str, value: str | None = None) -> pd.DataFrame:
    parts = []
    for run in runs:
        f = _evals(run)
        if f.empty:
            continue
        if value is None:
            counts = pd.crosstab(f.evaluation, f[column]).cumsum()
        else:  # summed over every evaluation; the keys that summed to nothing are left out
            counts = pd.crosstab(f.evaluation, f[column], values=f[value].fillna(0.0), aggfunc="sum").fillna(0.0)
            counts = counts.loc[:, counts.sum() > 0].cumsum()
            if counts.empty:
                continue
        long = counts.reset_index().melt(id_vars="evaluation", var_name=column, value_name="count")
        parts.append(long.assign(run=run.label))
    cols = ["run", "evaluation", column, "count"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def skips_frame(runs: list[RunData]) -> pd.DataFrame:
    """What the runs skipped without measuring, by reason: the run's stored count (its
    summary's `skipped`: learned constraints, duplicates, invalid proposals, the wall time),
    else what its events say (`skip`: a learned constraint; `wall_time_stop`)."""
    rows = []
    for run in runs:
        stored = run.info.summary.get("skipped")
        if isinstance(stored, dict):
            rows += [{"run": run.label, "reason": str(k), "count": int(v)} for k, v in sorted(stored.items())]
            continue
        for kind, payload, _ in run.events:
            if kind == "skip":
                reason = "learned: " + str(payload.get("reason", "")).split(" like ")[0]
                rows.append({"run": run.label, "reason": reason, "count": 1})
            elif kind == "wall_time_stop":
                rows.append({"run": run.label, "reason": "stopped by the wall time", "count": 1})
    f = pd.DataFrame(rows, columns=["run", "reason", "count"])
    return f.groupby(["run", "reason"], as_index=False, sort=False)["count"].sum()


def bandit_frame(runs: list[RunData]) -> pd.DataFrame:
    """The operator bandit's state at the end of each run that stored it (its summary's
    `operators`): pulls, credited successes, and the posterior mean of success."""
    rows = []
    for run in runs:
        for op, st in (run.info.summary.get("operators") or {}).items():
            if isinstance(st, dict):
                rows.append(
                    {
                        "run": run.label,
                        "operator": op,
                        "pulls": int(st.get("pulls", 0)),
                        "successes": int(st.get("successes", 0)),
                        "mean": float(st.get("mean", math.nan)),
                    }
                )
    return pd.DataFrame(rows, columns=["run", "operator", "pulls", "successes", "mean"])


def elites_frame(run: RunData) -> pd.DataFrame:
    """The run's finalists: first measurement, re-measured median, noise, 95% interval, the
    samples, parameters, lineage, whether the store keeps it as a niche's elite, and for a
    genome with source its diff against its parent's."""
    f = run.frame
    evals = f[f.kind == "eval"].drop_duplicates("genome_id").set_index("genome_id")
    again = f[f.kind == "remeasure"]
    niches = {e.genome.id: e.niche for e in run.elites}
    ids = list(dict.fromkeys(again.genome_id)) or [e.genome.id for e in run.elites]
    rows = []
    for gid in ids:
        first = float(evals.latency_ms.get(gid, math.nan)) if gid in evals.index else math.nan
        reps = again[again.genome_id == gid]
        samples = [first] if first == first else []
        failed = bool((reps.status != "ok").any())
        samples += [float(x) for x in reps.latency_ms if x == x]
        med = math.inf if failed or not samples else statistics.median(samples)
        first_noise = float(evals.noise.get(gid, 0.0)) if gid in evals.index else 0.0
        noise = statistics.pstdev(samples) / med if len(samples) > 1 and math.isfinite(med) else first_noise
        low, high = noise_interval(med, noise, len(samples))
        g = run.genomes.get(gid) or next(e.genome for e in run.elites if e.genome.id == gid)
        rows.append(
            {
                "genome_id": gid,
                "niche": niches.get(gid, ""),
                "elite": gid in niches,
                "first_ms": first,
                "median_ms": med,
                "noise": noise,
                "ci_low_ms": low,
                "ci_high_ms": high,
                "samples": len(samples),
                "sample_ms": ", ".join(f"{x:.5g}" for x in samples),
                "params": " ".join(f"{k}={v}" for k, v in g.params.items()),
                "operator": g.lineage.operator,
                "generation": g.lineage.generation,
                "parents": ",".join(g.lineage.parents),
                "diff": _diff(g, run.genomes),
            }
        )
    cols = ["genome_id", "niche", "elite", "first_ms", "median_ms", "noise", "ci_low_ms", "ci_high_ms", "samples"]
    out = pd.DataFrame(rows, columns=[*cols, "sample_ms", "params", "operator", "generation", "parents", "diff"])
    return out.sort_values(["median_ms", "genome_id"], ignore_index=True)


def _diff(genome: Genome, known: dict[str, Genome]) -> str:
    """A unified diff of `genome`'s source against its first parent's ('' without source)."""
    if genome.source is None:
        return ""
    parent = next((known[p] for p in genome.lineage.parents if p in known), None)
    if parent is None:
        return "(no parent in this run: the whole source is new)\n" + genome.source
    before = parent.source if parent.source is not None else ""
    name = parent.id if parent.source is not None else f"{parent.id} (the template's source)"
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), genome.source.splitlines(keepends=True), fromfile=name, tofile=genome.id
    )
    return "".join(lines) or "(same source as the parent)"


def header(run: RunData) -> list[tuple[str, str]]:
    """The run's header lines: what it searched, judged by what, how it ran and why it stopped."""
    info, cfg, env, summ = run.info, run.info.config, run.info.environment, run.info.summary
    f = run.frame
    ev = cfg.get("evaluator", {})
    problem = ev.get("problem") or info.name
    space = cfg.get("space", {})
    params = ", ".join(p.get("name", "?") for p in space.get("params", [])) if isinstance(space, dict) else ""
    budget = {k: v for k, v in cfg.get("budget", {}).items() if v is not None}
    toolchain = ", ".join(f"{k} {env[k]}" for k in ("driver", "cuda", "torch", "triton") if env.get(k))
    best = summ.get("best_ms")
    wall = summ.get("wall_s")
    if wall is None and not f.empty:
        wall = float(f.t_s.max())
    return [
        ("run", f"{info.id} ({info.status}{', resumed' if info.resumed else ''})"),
        ("name", info.name),
        ("problem", str(problem)),
        ("space", f"{space.get('name', '')}: {params}" if params else str(space.get("name", ""))),
        ("evaluator", ", ".join(f"{k}={v}" for k, v in ev.items() if not isinstance(v, (dict, list))) or "-"),
        ("fingerprint", info.fingerprint),
        ("GPU", str(env.get("gpu") or ev.get("gpu") or "none (CPU)")),
        ("toolchain", toolchain or "-"),
        ("seed", str(cfg.get("seed", "-"))),
        ("budget", ", ".join(f"{k} {v}" for k, v in budget.items()) or "-"),
        ("strategy", f"{cfg.get('strategy', '-')} ({', '.join(cfg.get('mutators', []))})"),
        ("stopped by", str(summ.get("stop_reason") or summ.get("error") or info.status)),
        ("evaluations", f"{int((f.kind == 'eval').sum())} ({int(f.cached.sum())} read back from the store)"),
        ("best", f"{best:.6g} ms" if isinstance(best, (int, float)) else "-"),
        ("wall time", f"{wall:.1f} s" if isinstance(wall, (int, float)) else "-"),
        ("device time", f"{float(f.elapsed_s.sum()):.1f} s (the evaluator's time on candidates)"),
        ("LLM dollars", f"${float(summ.get('cost', f.cost.sum())):.2f}"),
        ("cost model", _priors_line(run)),
        # the best genome against its baseline and the card's peak, said even when unknown
        *(run.standing or {"baseline": "-", "speed-up": "-", "fraction of peak": "-"}).items(),
    ]


def _priors_line(run: RunData) -> str:
    """What a primed mutator (the cost model) learned from, as the run's `priors` event
    records it (which shipped landscape was held out, or that the model saw the replayed one)."""
    from evokernel.engine.priors import trained_on

    priors = next((p for kind, p, _ in run.events if kind == "priors"), None)
    if priors is None:
        return "-"
    return trained_on(priors).removeprefix("model ")


def landscape_study(runs: list[RunData]) -> Any:
    """An in-memory Optuna study of the runs' ok evaluations (latency to minimize), one trial
    per genome, so Optuna's visualization functions draw the landscape. Parameters whose
    values are all numbers get an int or float distribution (on a log scale when they are
    powers of two), the others a categorical one."""
    import optuna

    frames = [r.frame[(r.frame.kind == "eval") & (r.frame.status == "ok")] for r in runs]
    f = pd.concat(frames, ignore_index=True).drop_duplicates("genome_id")
    pcols = [c for c in f.columns if c.startswith("param.") and f[c].notna().all()]
    dists: dict[str, Any] = {}
    for c in pcols:
        values = list(f[c])
        name = c[len("param.") :]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            lo, hi = min(values), max(values)
            if all(float(v).is_integer() for v in values):
                ints = {int(v) for v in values}
                doubling = len(ints) > 2 and all(v > 0 and v & (v - 1) == 0 for v in ints)  # tile sizes: log axes
                dists[name] = optuna.distributions.IntDistribution(int(lo), int(hi), log=doubling)
            else:
                dists[name] = optuna.distributions.FloatDistribution(float(lo), float(hi))
        else:
            dists[name] = optuna.distributions.CategoricalDistribution(sorted(set(values), key=str))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", study_name="landscape")
    for _, row in f.iterrows():
        params = {}
        for n, d in dists.items():
            v = row[f"param.{n}"]
            params[n] = int(v) if isinstance(d, optuna.distributions.IntDistribution) else v
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=float(row.latency_ms)))
    return study
