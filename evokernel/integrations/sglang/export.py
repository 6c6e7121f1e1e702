"""Export winners where serving engines read them.

`sglang_moe` writes the best fused-MoE configs of a store's runs as SGLang's tuned-config
files, in the layout its loader reads (`SGLANG_MOE_CONFIG_DIR` points at `out`):

    out/configs/triton_<triton version, dots as _>/E=<E>,N=<N>,device_name=<GPU, spaces as _>.json
    ... and the same name ending in `_down.json` for the down-projection GEMM

bf16 and fp16 runs have no `dtype` part in the name. Keys are batch sizes (the run's
tuning M) as strings; values hold exactly BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K,
GROUP_SIZE_M, num_warps and num_stages. SGLang aligns the token-expert pairs once for both
GEMMs and forces the down config's BLOCK_SIZE_M to the up one's, so a winner whose two
BLOCK_SIZE_M differ is not exported (search `moe_space()`, which ties them). Files that
exist already are merged: batch sizes exported now replace theirs, the others stay.

>>> sglang_file_name(128, 768, "NVIDIA H200")
'E=128,N=768,device_name=NVIDIA_H200.json'
>>> sglang_file_name(256, 512, "NVIDIA H200", dtype="fp8_w8a8", block_shape=(128, 128), down=True)
'E=256,N=512,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128]_down.json'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.core.archive import Elite
from evokernel.core.errors import ConfigError
from evokernel.store import Located, Store

__all__ = [
    "sglang_file_name",
    "sglang_moe",
    "sglang_plugin_package",
    "MoeExport",
    "prefill_entries_from_record",
    "add_prefill_table",
]

GEMM_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_NO_DTYPE_PART = {"bfloat16", "float16"}


def sglang_file_name(
    E: int,
    N: int,
    device_name: str,
    *,
    dtype: str | None = None,
    block_shape: Sequence[int] | None = None,
    down: bool = False,
) -> str:
    """The name SGLang's loader looks for (its `get_config_file_name`)."""
    name = f"E={E},N={N},device_name={device_name.replace(' ', '_')}"
    if dtype:
        name += f",dtype={dtype}"
    if block_shape and all(block_shape):
        name += f",block_shape={list(block_shape)}"
    return name + ("_down" if down else "") + ".json"


@dataclass
class MoeExport:
    files: list[Path] = field(default_factory=list)
    exported: list[dict[str, Any]] = field(default_factory=list)  # one per (file key, M): run, latency
    skipped: list[str] = field(default_factory=list)  # runs left out, and why
    notes: list[str] = field(default_factory=list)  # runs exported from an elite other than their best, and why


def _configs(params: dict[str, Any], *, shared_m: bool = True) -> tuple[dict[str, int], dict[str, int]] | str:
    """(up, down) configs of a MoE genome, or why it cannot be exported."""
    if not all(k in params for k in GEMM_KEYS):
        return "not a fused-MoE genome"
    up = {k: int(params[k]) for k in GEMM_KEYS}
    down = {k: int(params.get(f"down_{k}", up[k])) for k in GEMM_KEYS}
    if params.get("GEMV"):
        if shared_m:
            return "it takes evokernel's small-batch path (GEMV), which SGLang's kernel lacks (the plugin ships it)"
        up["GEMV"] = 1
    if params.get("FUSE_SILU"):
        if shared_m:
            return (
                "it fuses SiLU-and-multiply into the up GEMM (FUSE_SILU), which SGLang's kernel does not "
                "(the plugin ships it)"
            )
        up["FUSE_SILU"] = 1
    if shared_m and down["BLOCK_SIZE_M"] != up["BLOCK_SIZE_M"]:
        return (
            f"its down GEMM's BLOCK_SIZE_M ({down['BLOCK_SIZE_M']}) differs from the up GEMM's "
            f"({up['BLOCK_SIZE_M']}); SGLang would override it"
        )
    return up, down


def _runnable_from_history(
    store: Store, run_id: str, *, shared_m: bool
) -> list[tuple[Elite, tuple[dict[str, int], dict[str, int]]]]:
    """The candidates of a run's history whose configs the target runs, fastest first, each as
    an elite-like record with its (up, down) configs. A genome counts by the median of all its
    readings (evaluations and re-measurements), and one that failed any reading does not
    count: the lowest single reading is the lucky draw the search's re-measurement exists to
    correct. (The export then picks among them per shape, by their times at that shape.)"""
    import statistics

    readings: dict[str, list[float]] = {}
    genomes: dict[str, Any] = {}
    failed: set[str] = set()
    for ev in store.history(run_id):
        gid = ev.genome.id
        genomes[gid] = ev.genome
        if ev.result.is_ok and ev.result.latency_ms is not None:
            readings.setdefault(gid, []).append(float(ev.result.latency_ms))
        else:
            failed.add(gid)
    ranked = sorted((statistics.median(xs), gid) for gid, xs in readings.items() if gid not in failed)
    out: list[tuple[Elite, tuple[dict[str, int], dict[str, int]]]] = []
    for ms, gid in ranked:
        got = _configs(genomes[gid].params, shared_m=shared_m)
        if not isinstance(got, str):
            out.append((Elite(niche="history", genome=genomes[gid], latency_ms=ms, run_id=run_id), got))
    return out


def _norm(key: str) -> str:
    """A shape's name with its `k=v` parts in a fixed order (the gate names a shape by its
    keys in the problem's order: `shape_key`; a run's recorded shapes may come back in another).

    >>> _norm("M=256,E=128,I=768") == _norm("E=128,I=768,M=256")
    True
    """
    return ",".join(sorted(str(key).split(",")))


def _shape_name(shape: Mapping[str, Any]) -> str:
    from evokernel.judge.problem import shape_key

    return _norm(shape_key(shape))


class _PerShape:
    """The per-shape medians of a store's evaluations (`Result.per_shape`, named by the gate's
    `shape_key`), per run and genome: the median over every ok reading of that shape."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._runs: dict[str, dict[str, dict[str, float]]] = {}

    def at(self, run_id: str, genome_id: str, shape: Mapping[str, Any]) -> float | None:
        if run_id not in self._runs:
            self._runs[run_id] = self._load(run_id)
        return self._runs[run_id].get(genome_id, {}).get(_shape_name(shape))

    def _load(self, run_id: str) -> dict[str, dict[str, float]]:
        import statistics

        history = getattr(self.store, "history", None)
        if history is None:
            return {}
        readings: dict[str, dict[str, list[float]]] = {}
        for ev in history(run_id):
            if not ev.result.is_ok or ev.result.estimated:
                continue
            for name, ms in (ev.result.per_shape or {}).items():
                readings.setdefault(ev.genome.id, {}).setdefault(_norm(name), []).append(float(ms))
        return {g: {n: statistics.median(xs) for n, xs in per.items()} for g, per in readings.items()}


@dataclass
class _Contender:
    """One run's claim on one table key: its time at that shape when the store has it
    (`at`), else only its aggregate over all its shapes (`aggregate`: a different workload
    per run), and the shapes it was tuned over."""

    run_id: str
    at: float | None
    aggregate: float
    shapes: frozenset[str]
    value: Any
    context: int = 0

    @property
    def latency(self) -> float:
        return self.at if self.at is not None else self.aggregate


def _beats(new: _Contender, old: _Contender) -> tuple[bool, str]:
    """Whether `new` takes a key from `old`, and the rule that decided. Times at the key's
    own shape when both have one; else aggregates only over identical shape sets; else the
    run tuned over fewer shapes (the most specific: a run of just that shape beats one that
    shares its config with others); equal counts of different shapes: the aggregates, said so."""
    if new.at is not None and old.at is not None:
        return new.at < old.at, ""
    if new.shapes == old.shapes:
        return new.aggregate < old.aggregate, "no per-shape time; same shape set, so their aggregates"
    if len(new.shapes) != len(old.shapes):
        return len(new.shapes) < len(old.shapes), (
            "no per-shape time for both and different shape sets: the run tuned over fewer shapes"
        )
    return new.aggregate < old.aggregate, (
        "no per-shape time for both, different shape sets of the same size: their aggregates (different workloads)"
    )


def _pick(cands: Mapping[Any, list[_Contender]], report: MoeExport, label: Any) -> dict[Any, _Contender]:
    """The winner per key (`_beats`, in order); a note for every key that a rule other than the
    per-shape time decided between different runs (`label(key)` names the key)."""
    out: dict[Any, _Contender] = {}
    for key, cs in cands.items():
        best = cs[0]
        for c in cs[1:]:
            wins, rule = _beats(c, best)
            if rule and c.run_id != best.run_id:
                w, lose = (c, best) if wins else (best, c)
                report.notes.append(f"{label(key)}: run {w.run_id} over run {lose.run_id} ({rule})")
            if wins:
                best = c
        out[key] = best
    return out


def _winners(
    store: Store, report: MoeExport, *, device_name: str | None, triton_version: str | None, shared_m: bool
) -> dict[tuple[str, int, int, str, int], tuple[float, dict[str, int], dict[str, int], str]]:
    """The best (up, down) per (Triton version dir, E, N, GPU, batch size) over the store's
    fused-MoE runs: value (latency, up, down, run id). Runs are compared at each shape by
    their elite's time at that shape (`Result.per_shape`), never by a run's aggregate over its
    own shapes against another's (a run sharing one config over M=1 and M=256 has a lower
    geomean than one tuned for M=256 alone); `_beats` says what decides where the store has no
    per-shape time, and a note says so. The latency is the time at that shape where known."""
    cands: dict[tuple[str, int, int, str, int], list[_Contender]] = {}
    times = _PerShape(store)
    for run in store.runs():
        ev = run.config.get("evaluator") if isinstance(run.config, dict) else None
        if not isinstance(ev, dict):
            continue
        shapes = ev.get("shapes")
        family = str((run.config.get("transfer") or {}).get("family", ""))
        if (
            not isinstance(shapes, list)
            or not shapes
            or not all(isinstance(s, dict) and {"M", "E", "I"} <= set(s) for s in shapes)
        ):
            continue  # not a MoE problem's run
        dtype = family.split("@")[0].rsplit("_", 1)[-1] if family else "bfloat16"
        if dtype not in _NO_DTYPE_PART:
            report.skipped.append(f"{run.id}: dtype {dtype!r} is not exported yet (bf16 and fp16 are)")
            continue
        gpu = device_name or ev.get("gpu")
        triton = triton_version or ev.get("triton")
        if not gpu or not triton:
            report.skipped.append(f"{run.id}: the run recorded no GPU or Triton version (pass device_name)")
            continue
        elites = store.elites(run_id=run.id)
        if not elites:
            report.skipped.append(f"{run.id}: no elite")
            continue
        # the best elite the target can run: SGLang's kernel has neither the GEMV nor the
        # FUSE_SILU structure, so its files get the run's best elite without them (the plugin
        # package ships the structures)
        why: list[str] = []
        for elite in elites:
            got = _configs(elite.genome.params, shared_m=shared_m)
            if not isinstance(got, str):
                break
            why.append(got)
        # per shape: the elite, its time there, its configs
        chosen: list[tuple[Mapping[str, Any], Elite, float | None, Any]] = []
        if isinstance(got, str):
            # every elite has a structure (FUSE_SILU can win each niche by ~1%): per shape, the
            # candidate of the run's history SGLang's kernel runs that was fastest at that shape
            # (e.g. a winner's twin without the structure, measured in the same run)
            runnable = _runnable_from_history(store, run.id, shared_m=shared_m)
            if not runnable:
                report.skipped.append(f"{run.id}: {'; '.join(dict.fromkeys(why))}")
                continue
            for shape in shapes:
                timed = [(at, e, c) for e, c in runnable if (at := times.at(run.id, e.genome.id, shape)) is not None]
                if timed:
                    at, e, c = min(timed, key=lambda t: t[0])
                    chosen.append((shape, e, at, c))
                else:  # no per-shape times: the fastest over the run's shapes
                    chosen.append((shape, runnable[0][0], None, runnable[0][1]))
            picked = dict.fromkeys(e.genome.id for _, e, _, _ in chosen)
            report.notes.append(
                f"{run.id}: every elite {why[0].removeprefix('it ')}; exported the fastest "
                f"candidate of the run SGLang's kernel runs at each shape ({len(picked)} of them; "
                f"the fastest over its shapes {runnable[0][0].latency_ms:.4f} ms)"
            )
        else:
            if why:
                report.notes.append(
                    f"{run.id}: the best elite {why[0].removeprefix('it ')}; exported the best one "
                    f"SGLang's kernel runs ({elite.latency_ms:.4f} ms, elite {len(why) + 1})"
                )
            chosen = [(shape, elite, times.at(run.id, elite.genome.id, shape), got) for shape in shapes]
        version_dir = f"triton_{str(triton).split('+')[0].replace('.', '_')}"
        names = frozenset(_shape_name(sh) for sh in shapes)
        for shape, e, at, configs in chosen:
            key = (version_dir, int(shape["E"]), int(shape["I"]), str(gpu), int(shape["M"]))
            cands.setdefault(key, []).append(_Contender(run.id, at, float(e.latency_ms), names, configs))
    won = _pick(cands, report, lambda k: f"E={k[1]},N={k[2]} M={k[4]}")
    return {k: (c.latency, c.value[0], c.value[1], c.run_id) for k, c in won.items()}


def sglang_moe(
    store: Store, out: str | os.PathLike[str], *, device_name: str | None = None, triton_version: str | None = None
) -> MoeExport:
    """Write the best config per (E, N, GPU, Triton, batch size) found by the store's fused-MoE
    runs. `device_name` / `triton_version` override what the runs recorded (a run on the CPU
    records no GPU)."""
    report = MoeExport()
    best = _winners(store, report, device_name=device_name, triton_version=triton_version, shared_m=True)
    by_file: dict[tuple[str, str], dict[int, tuple[float, dict[str, int], dict[str, int], str]]] = {}
    for (version_dir, E, N, gpu, m), value in best.items():
        by_file.setdefault((version_dir, sglang_file_name(E, N, gpu)), {})[m] = value
    for (version_dir, name), per_m in sorted(by_file.items()):
        folder = Path(out) / "configs" / version_dir
        folder.mkdir(parents=True, exist_ok=True)
        for which, path in ((1, folder / name), (2, folder / (name.removesuffix(".json") + "_down.json"))):
            table = _read(path)
            for m, value in per_m.items():
                table[m] = {k: value[which][k] for k in GEMM_KEYS}
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps({str(m): table[m] for m in sorted(table)}, indent=4) + "\n")
            os.replace(tmp, path)
            report.files.append(path)
        for m, (lat, _, _, run_id) in sorted(per_m.items()):
            report.exported.append({"file": name, "M": m, "latency_ms": lat, "run": run_id})
    return report


def _read(path: Path) -> dict[int, dict[str, int]]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return {int(k): {key: int(v[key]) for key in GEMM_KEYS} for k, v in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path} exists but is not an SGLang MoE config file ({exc}); move it away") from exc


DECODE_KEYS = ("NUM_SPLITS", "BLOCK_N", "num_warps", "num_stages", "REDUCE")
#: decode genes a configuration may lack (template_decode.OPTIONAL: 0 where absent)
DECODE_OPTIONAL = ("PREFETCH", "PDL")


def _decode_winners(
    store: Store, report: MoeExport
) -> dict[tuple[int, int, int, int], tuple[float, dict[str, int], str, int]]:
    """The best decode configuration per (H_q, H_kv, D, batch size) over the store's paged
    decode runs at page size 1 (the token-slot cache SGLang's Triton backend keeps; runs at
    another page size are left out, with the reason): value (latency, params, run id,
    context). Runs are compared at each shape (`_winners`). SGLang runs one configuration per
    batch size whatever the context (its graphs are captured per batch size), so where runs
    measured a batch size at different contexts the longest context decides: only the runs
    measured there compete (with a note for the others), since a run at a short context says
    nothing of its config's time at a long one, and the long context is where the split-KV
    configuration matters and decode attention costs the most."""
    cands: dict[tuple[int, int, int, int], list[_Contender]] = {}
    times = _PerShape(store)
    for run in store.runs():
        ev = run.config.get("evaluator") if isinstance(run.config, dict) else None
        shapes = ev.get("shapes") if isinstance(ev, dict) else None
        if not isinstance(shapes, list) or not shapes:
            continue
        if not all(isinstance(sh, dict) and {"B", "C", "Hq", "Hkv", "D", "P"} <= set(sh) for sh in shapes):
            continue  # not a decode problem's run
        if any(int(sh["P"]) != 1 for sh in shapes):
            report.skipped.append(f"{run.id}: tuned at page size {shapes[0]['P']}; SGLang's cache has page size 1")
            continue
        elites = [e for e in store.elites(run_id=run.id) if all(k in e.genome.params for k in DECODE_KEYS)]
        if not elites:
            report.skipped.append(f"{run.id}: no decode elite")
            continue
        elite = min(elites, key=lambda e: e.latency_ms)
        params = {k: int(elite.genome.params[k]) for k in (*DECODE_KEYS, *DECODE_OPTIONAL) if k in elite.genome.params}
        names = frozenset(_shape_name(sh) for sh in shapes)
        for sh in shapes:
            key = (int(sh["Hq"]), int(sh["Hkv"]), int(sh["D"]), int(sh["B"]))
            at = times.at(run.id, elite.genome.id, sh)
            cands.setdefault(key, []).append(
                _Contender(run.id, at, float(elite.latency_ms), names, params, context=int(sh["C"]))
            )
    # one configuration per batch size serves every context: the longest context measured decides
    longest: dict[tuple[int, int, int, int], list[_Contender]] = {}
    for key, cs in cands.items():
        c_max = max(c.context for c in cs)
        longest[key] = [c for c in cs if c.context == c_max]
        for run_id in dict.fromkeys(
            c.run_id for c in cs if c.context < c_max and c.run_id not in {x.run_id for x in longest[key]}
        ):
            report.notes.append(
                f"decode Hq={key[0]},Hkv={key[1]},D={key[2]} B={key[3]}: run {run_id} left out, tuned at a shorter "
                f"context than {c_max} (one configuration per batch size serves every context)"
            )
    won = _pick(longest, report, lambda k: f"decode Hq={k[0]},Hkv={k[1]},D={k[2]} B={k[3]}")
    return {k: (c.latency, c.value, c.run_id, c.context) for k, c in won.items()}


def _max_len(lens: str) -> int:
    """The longest sequence of a prefill shape's `lens` key ("2048x4", "512/1800/3000": the
    problem's `lens_key`).

    >>> _max_len("2048x4"), _max_len("512/1800/700")
    (2048, 1800)
    """
    return max(int(part.split("x")[0]) for part in str(lens).replace(",", "/").split("/"))


def _prefill_winners(
    store: Store, report: MoeExport
) -> dict[tuple[int, int, int, bool, int], tuple[float, dict[str, Any], str]]:
    """The best prefill configuration per (H_q, H_kv, D, causal, longest sequence) over the
    store's packed (varlen) prefill runs whose space names the masking ("..._causal" or
    "..._full": `attention_space`, and `prefill_gluon_space(causal=...)`); value (latency,
    entry with its form, run id). Dense-layout runs and runs that do not say whether they were
    causal are left out, with the reason. Runs are compared at each shape (`_winners`)."""
    from evokernel.integrations.sglang.plugin import PREFILL_KEYS

    cands: dict[tuple[int, int, int, bool, int], list[_Contender]] = {}
    times = _PerShape(store)
    for run in store.runs():
        cfg = run.config if isinstance(run.config, dict) else {}
        ev = cfg.get("evaluator")
        shapes = ev.get("shapes") if isinstance(ev, dict) else None
        if not isinstance(shapes, list) or not shapes:
            continue
        if not all(isinstance(sh, dict) and {"T", "B", "Hq", "Hkv", "D", "lens"} <= set(sh) for sh in shapes):
            continue  # not a prefill problem's run
        space = cfg.get("space") if isinstance(cfg.get("space"), dict) else {}
        name = str(space.get("name", ""))
        if "bhsd" in name or any(sh.get("layout") == "bhsd" for sh in shapes):
            report.skipped.append(f"{run.id}: the dense [B, H, S, D] layout; SGLang packs its sequences")
            continue
        if not (name.endswith("_causal") or name.endswith("_full")):
            report.skipped.append(f"{run.id}: its space ({name!r}) does not say whether it was causal")
            continue
        causal = name.endswith("_causal")
        forms = [f for f, keys in PREFILL_KEYS.items() if keys[4] in {p["name"] for p in space.get("params", [])}]
        if len(forms) != 1:
            report.skipped.append(f"{run.id}: not a prefill kernel space this export knows ({name!r})")
            continue
        form = forms[0]
        keys = PREFILL_KEYS[form]
        elites = [e for e in store.elites(run_id=run.id) if all(k in e.genome.params for k in keys[:4])]
        if not elites:
            report.skipped.append(f"{run.id}: no prefill elite")
            continue
        elite = min(elites, key=lambda e: e.latency_ms)
        entry = {"form": form, **{k: int(elite.genome.params[k]) for k in keys if k in elite.genome.params}}
        names = frozenset(_shape_name(sh) for sh in shapes)
        for sh in shapes:
            key = (int(sh["Hq"]), int(sh["Hkv"]), int(sh["D"]), causal, _max_len(sh["lens"]))
            at = times.at(run.id, elite.genome.id, sh)
            cands.setdefault(key, []).append(_Contender(run.id, at, float(elite.latency_ms), names, entry))
    won = _pick(cands, report, lambda k: f"prefill Hq={k[0]},Hkv={k[1]},D={k[2]},causal={int(k[3])} S={k[4]}")
    return {k: (c.latency, c.value, c.run_id) for k, c in won.items()}


def prefill_entries_from_record(
    record: Mapping[str, Any], heads: Mapping[str, tuple[int, int, int, bool]]
) -> dict[tuple[int, int, int, bool], dict[int, dict[str, Any]]]:
    """Prefill table entries from a Gluon prefill benchmark's record (`prefill_gluon.json` of
    `benchmarks/prefill_gluon_h200.py`: per shape its spec, model, lengths, masking, layout and
    the winning configuration): per (H_q, H_kv, D, causal) of `heads` (model name -> heads, as
    the attention problem's MODELS) and longest sequence, the winner ("form": "gluon").
    Dense-layout rows are left out (SGLang packs its sequences).

    >>> rec = {"rows": [{"model": "m", "lens": [4096] * 4, "causal": True, "layout": "packed",
    ...                  "winner": {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "PINGPONG": 1,
    ...                             "OVERLAP": 1}}]}
    >>> prefill_entries_from_record(rec, {"m": (32, 4, 128, True)})[(32, 4, 128, True)][4096]["PINGPONG"]
    1
    """
    from evokernel.integrations.sglang.plugin import PrefillTable

    out: dict[tuple[int, int, int, bool], dict[int, dict[str, Any]]] = {}
    for row in record.get("rows", []):
        if row.get("layout", "packed") != "packed" or not row.get("winner") or row.get("model") not in heads:
            continue
        hq, hkv, d, _ = heads[row["model"]]
        key = (hq, hkv, d, bool(row.get("causal", True)))
        out.setdefault(key, {})[max(int(n) for n in row["lens"])] = PrefillTable.entry(
            dict(row["winner"], form="gluon"), f"the record's {row.get('spec')}", head_dim=d
        )
    return out


def add_prefill_table(
    out: str | os.PathLike[str],
    entries: Mapping[tuple[int, int, int, bool], Mapping[int, dict[str, Any]]],
    provenance: Any = None,
) -> Path:
    """Write (or merge into) the prefill-attention table of the package at `out` and name it in
    its manifest; entries given replace those of the same heads and length."""
    from evokernel.integrations.sglang.plugin import EXTEND_ATTENTION, PrefillTable

    out = Path(out)
    manifest = json.loads((out / "manifest.json").read_text())
    path = out / "kernels" / "prefill_attention.json"
    table = PrefillTable.from_json(json.loads(path.read_text())) if path.exists() else PrefillTable({})
    for key, per_s in entries.items():
        table.entries.setdefault(key, {}).update(per_s)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table.to_json(), indent=1) + "\n")
    if not any(k.get("op") == "prefill_attention" for k in manifest.get("kernels", [])):
        manifest.setdefault("kernels", []).append(
            {"op": "prefill_attention", "target": EXTEND_ATTENTION, "table": "kernels/prefill_attention.json"}
        )
    if provenance is not None:
        manifest.setdefault("provenance", {})["prefill_attention"] = provenance
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def sglang_plugin_package(
    store: Store,
    out: str | os.PathLike[str],
    *,
    device_name: str | None = None,
    triton_version: str | None = None,
    kernel: bool = True,
    seed_shipped: bool = True,
    decode: bool = True,
    prefill: bool = True,
) -> MoeExport:
    """Write the package the SGLang plugin applies (`evokernel.integrations.sglang.plugin`): SGLang's config
    files for its own fused-MoE kernel (winners whose two BLOCK_SIZE_M agree) under
    `out/configs`, and, with `kernel`, the table of evokernel's fused-MoE template (every
    winner, up and down BLOCK_SIZE_M free) under `out/kernels/fused_moe.json`, with
    `out/manifest.json` naming both and where they came from.

    With `seed_shipped`, a config file SGLang ships for that (E, N, GPU) is copied in first
    (as the up file, and as the down file, which is what SGLang runs for the down GEMM when
    it ships none) and the tuned batch sizes are merged over it: the batch sizes the search
    did not tune keep SGLang's configs instead of borrowing the nearest tuned one.

    With `decode`, the store's paged decode runs at page size 1 give the table of the
    decode-attention hook (`out/kernels/decode_attention.json`: per heads and batch size, the
    best run's configuration at that shape; a batch size tuned at several contexts keeps a run
    measured at the longest, `_decode_winners`).

    With `prefill`, the store's packed prefill runs give the table of the prefill-attention
    hook (`out/kernels/prefill_attention.json`: per heads, masking and longest sequence, the
    best run's kernel form and configuration)."""
    import datetime as dt

    from evokernel.search_spaces.moe.sglang import shipped_file

    from evokernel.integrations.sglang.plugin import (
        DECODE_ATTENTION,
        EXTEND_ATTENTION,
        FORMAT,
        FUSED_EXPERTS,
        DecodeTable,
        MoeTable,
        PrefillTable,
    )

    out = Path(out)
    earlier = _earlier_manifest(out)
    seeded: list[str] = []
    if seed_shipped:
        keys = _winners(store, MoeExport(), device_name=device_name, triton_version=triton_version, shared_m=True)
        for version_dir, E, N, gpu in sorted({k[:4] for k in keys}):
            shipped = shipped_file(E, N, gpu)
            name = sglang_file_name(E, N, gpu)
            folder = out / "configs" / version_dir
            if shipped is None or (folder / name).exists():
                continue
            folder.mkdir(parents=True, exist_ok=True)
            for path in (folder / name, folder / (name.removesuffix(".json") + "_down.json")):
                path.write_text(shipped.read_text())
            seeded.append(str(shipped.name))
    report = sglang_moe(store, out, device_name=device_name, triton_version=triton_version)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "configs": "configs" if report.files else None,
        "kernels": [],
        "provenance": {
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "store": str(store.path) if isinstance(store, Located) else "",
            "configs": report.exported,
            "seeded_from_sglang": seeded,
        },
    }
    if kernel:
        free = MoeExport()
        best = _winners(store, free, device_name=device_name, triton_version=triton_version, shared_m=False)
        entries: dict[tuple[int, int], dict[int, tuple[dict[str, int], dict[str, int]]]] = {}
        for (_, E, N, _, m), (_, up, down, _) in sorted(best.items()):
            entries.setdefault((E, N), {})[m] = (up, down)
        if entries:
            provenance = [
                {"E": E, "N": N, "M": m, "latency_ms": lat, "run": run}
                for (_, E, N, _, m), (lat, _, _, run) in sorted(best.items())
            ]
            _add_table(
                out, manifest, report, "fused_moe", FUSED_EXPERTS, MoeTable(entries).to_json(), provenance, earlier
            )
    if decode:
        found = _decode_winners(store, report)
        if found:
            table = DecodeTable({})
            for (hq, hkv, d, b), (_, params, _, c) in sorted(found.items()):
                # the context it was tuned at: "auto" splits resolve there in the engine
                table.entries.setdefault((hq, hkv, d), {})[b] = dict(params, context=c)
            provenance = [
                {"Hq": hq, "Hkv": hkv, "D": d, "B": b, "C": c, "latency_ms": lat, "run": run}
                for (hq, hkv, d, b), (lat, _, run, c) in sorted(found.items())
            ]
            _add_table(
                out, manifest, report, "decode_attention", DECODE_ATTENTION, table.to_json(), provenance, earlier
            )
    if prefill:
        pre = _prefill_winners(store, report)
        if pre:
            ptable = PrefillTable({})
            for (hq, hkv, d, causal, n), (_, entry, _) in sorted(pre.items()):
                ptable.entries.setdefault((hq, hkv, d, causal), {})[n] = entry
            provenance = [
                {"Hq": hq, "Hkv": hkv, "D": d, "causal": c, "seqlen": n, "latency_ms": lat, "run": run}
                for (hq, hkv, d, c, n), (lat, _, run) in sorted(pre.items())
            ]
            _add_table(
                out, manifest, report, "prefill_attention", EXTEND_ATTENTION, ptable.to_json(), provenance, earlier
            )
    if not report.files:
        raise ConfigError(
            "nothing to export: the store holds no fused-MoE, page-1 decode or packed prefill run with an elite"
            + (f" ({'; '.join(report.skipped[:3])})" if report.skipped else "")
        )
    _keep_earlier(out, manifest, earlier, report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    report.files.append(out / "manifest.json")
    # what an end-to-end A/B found slower (the promotion's dead ends, `promote.py`) never ships
    from evokernel.integrations.sglang.promote import drop_dead_ends

    gpus = {device_name} if device_name else _run_gpus(store)
    for gpu in sorted(g for g in gpus if g):
        for change in drop_dead_ends(store, out, gpu):
            report.notes.append(f"{change}: left out, a dead end in the knowledge base (slower end to end on {gpu})")
    return report


def _add_table(
    out: Path,
    manifest: dict[str, Any],
    report: MoeExport,
    op: str,
    target: str,
    table: dict[str, Any],
    provenance: list[dict[str, Any]],
    earlier: Mapping[str, Any] | None = None,
) -> None:
    """Write a kernel table at out/kernels/<op>.json and name it, with its provenance, in the
    manifest being built. Where the package's `earlier` manifest named a table for this op,
    its entries are merged: those exported now replace theirs (same key and size), the others
    stay (and its provenance under provenance["earlier"][op])."""
    from evokernel.integrations.sglang.plugin import TABLES

    path = out / "kernels" / f"{op}.json"
    before = {k.get("op"): k for k in (earlier or {}).get("kernels", []) if isinstance(k, dict)}
    if op in before and (out / str(before[op].get("table", ""))).is_file():
        old_path = out / str(before[op]["table"])
        try:
            merged = TABLES[op].from_json(json.loads(old_path.read_text()), str(old_path)).to_json()
        except ValueError as exc:  # PackageError, JSONDecodeError
            raise ConfigError(
                f"{old_path} is in the package at {out} but not a {op} table ({exc}); move it away"
            ) from exc
        for key, per in TABLES[op].from_json(table, "the exported table").to_json().items():
            merged.setdefault(key, {}).update(per)
        table = merged
        old_prov = (earlier or {}).get("provenance", {}).get(op)
        if old_prov is not None:
            manifest["provenance"].setdefault("earlier", {})[op] = old_prov
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    report.files.append(path)
    manifest["kernels"].append({"op": op, "target": target, "table": f"kernels/{op}.json"})
    manifest["provenance"][op] = provenance


def _earlier_manifest(out: Path) -> dict[str, Any]:
    """The manifest of the package already at `out` ({} where there is none)."""
    path = out / "manifest.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path} exists but is not a package manifest ({exc}); move it away") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} exists but is not a package manifest; move it away")
    return data


def _keep_earlier(out: Path, manifest: dict[str, Any], earlier: Mapping[str, Any], report: MoeExport) -> None:
    """Keep in the manifest being built what the package's earlier manifest named and this
    export did not write (a prefill table `add_prefill_table` added, a table of an op not
    exported now, SGLang config files merged into), with its provenance."""
    ops = {k["op"] for k in manifest["kernels"]}
    for k in earlier.get("kernels", []):
        if not isinstance(k, dict) or k.get("op") in ops or not (out / str(k.get("table", ""))).is_file():
            continue
        manifest["kernels"].append(k)
        if k.get("op") in earlier.get("provenance", {}):
            manifest["provenance"][k["op"]] = earlier["provenance"][k["op"]]
        report.notes.append(f"{k.get('op')}: the package's table {k.get('table')} kept (not exported now)")
    configs = earlier.get("configs")
    if manifest.get("configs") is None and configs and any((out / str(configs)).rglob("*.json")):
        manifest["configs"] = configs


def _run_gpus(store: Store) -> set[str]:
    """The GPUs the store's runs recorded."""
    out = set()
    for run in store.runs():
        ev = run.config.get("evaluator") if isinstance(run.config, dict) else None
        if isinstance(ev, dict) and ev.get("gpu"):
            out.add(str(ev["gpu"]))
    return out
