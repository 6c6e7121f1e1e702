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
) -> tuple[tuple[dict[str, int], dict[str, int]] | None, Elite | None]:
    """The fastest candidate of a run's history whose configs the target runs, as an
    elite-like record, or (None, None). A genome counts by the median of all its readings
    (evaluations and re-measurements), and one that failed any reading does not count: the
    lowest single reading is the lucky draw the search's re-measurement exists to correct."""
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
    for ms, gid in ranked:
        got = _configs(genomes[gid].params, shared_m=shared_m)
        if not isinstance(got, str):
            return got, Elite(niche="history", genome=genomes[gid], latency_ms=ms, run_id=run_id)
    return None, None


def _winners(
    store: Store, report: MoeExport, *, device_name: str | None, triton_version: str | None, shared_m: bool
) -> dict[tuple[str, int, int, str, int], tuple[float, dict[str, int], dict[str, int], str]]:
    """The best (up, down) per (Triton version dir, E, N, GPU, batch size) over the store's
    fused-MoE runs: value (latency, up, down, run id)."""
    best: dict[tuple[str, int, int, str, int], tuple[float, dict[str, int], dict[str, int], str]] = {}
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
        if isinstance(got, str):
            # every elite has a structure (FUSE_SILU can win each niche by ~1%): the
            # fastest candidate of the run's history SGLang's kernel runs, e.g. a winner's
            # twin without the structure, measured in the same run
            got, elite = _runnable_from_history(store, run.id, shared_m=shared_m)
            if got is None:
                report.skipped.append(f"{run.id}: {'; '.join(dict.fromkeys(why))}")
                continue
            report.notes.append(
                f"{run.id}: every elite {why[0].removeprefix('it ')}; exported the fastest "
                f"candidate of the run SGLang's kernel runs ({elite.latency_ms:.4f} ms)"
            )
        elif why:
            report.notes.append(
                f"{run.id}: the best elite {why[0].removeprefix('it ')}; exported the best one "
                f"SGLang's kernel runs ({elite.latency_ms:.4f} ms, elite {len(why) + 1})"
            )
        up, down = got
        E, N = int(shapes[0]["E"]), int(shapes[0]["I"])
        version_dir = f"triton_{str(triton).split('+')[0].replace('.', '_')}"
        for shape in shapes:
            key = (version_dir, E, N, str(gpu), int(shape["M"]))
            if key not in best or elite.latency_ms < best[key][0]:
                best[key] = (elite.latency_ms, up, down, run.id)
    return best


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
    context)."""
    best: dict[tuple[int, int, int, int], tuple[float, dict[str, int], str, int]] = {}
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
        for sh in shapes:
            key = (int(sh["Hq"]), int(sh["Hkv"]), int(sh["D"]), int(sh["B"]))
            if key not in best or elite.latency_ms < best[key][0]:
                best[key] = (elite.latency_ms, params, run.id, int(sh["C"]))
    return best


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
    causal are left out, with the reason."""
    from evokernel.integrations.sglang.plugin import PREFILL_KEYS

    best: dict[tuple[int, int, int, bool, int], tuple[float, dict[str, Any], str]] = {}
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
        for sh in shapes:
            key = (int(sh["Hq"]), int(sh["Hkv"]), int(sh["D"]), causal, _max_len(sh["lens"]))
            if key not in best or elite.latency_ms < best[key][0]:
                best[key] = (elite.latency_ms, entry, run.id)
    return best


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
    best run's configuration; a batch size tuned at several contexts keeps the fastest).

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
            _add_table(out, manifest, report, "fused_moe", FUSED_EXPERTS, MoeTable(entries).to_json(), provenance)
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
            _add_table(out, manifest, report, "decode_attention", DECODE_ATTENTION, table.to_json(), provenance)
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
            _add_table(out, manifest, report, "prefill_attention", EXTEND_ATTENTION, ptable.to_json(), provenance)
    if not report.files:
        raise ConfigError(
            "nothing to export: the store holds no fused-MoE, page-1 decode or packed prefill run with an elite"
            + (f" ({'; '.join(report.skipped[:3])})" if report.skipped else "")
        )
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
) -> None:
    """Write a kernel table at out/kernels/<op>.json and name it, with its provenance, in the
    manifest being built."""
    path = out / "kernels" / f"{op}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    report.files.append(path)
    manifest["kernels"].append({"op": op, "target": target, "table": f"kernels/{op}.json"})
    manifest["provenance"][op] = provenance


def _run_gpus(store: Store) -> set[str]:
    """The GPUs the store's runs recorded."""
    out = set()
    for run in store.runs():
        ev = run.config.get("evaluator") if isinstance(run.config, dict) else None
        if isinstance(ev, dict) and ev.get("gpu"):
            out.add(str(ev["gpu"]))
    return out
