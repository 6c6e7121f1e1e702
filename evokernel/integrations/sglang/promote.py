"""The promotion cascade's last stage: which changes of a package ship (issue 29).

A package (`evokernel export sglang-plugin`) is a set of *changes* to what SGLang runs: an
entry of a kernel table (evokernel's decode attention or fused MoE at one batch size), an
entry of one of SGLang's MoE config files that differs from the file SGLang ships, or a
whole config file where SGLang ships none to compare with. A micro-benchmark gain does not
make a change faster inside the engine (measured: the tuned MoE configs read 0.912x end to
end), so each change is judged by the end-to-end A/B at the decode points it serves (the
batch sizes whose lookup lands on it), against the A/A control:

- `promoted`: faster beyond the control at a point it serves, slower at none;
- `dead_end`: slower at a point where it is the only change of its variant: dropped, and
  recorded in the knowledge base (a caveat lesson with its figures), so every later export
  leaves it out (`drop_dead_ends`);
- `suspect`: slower at a point it shares with other changes of its variant: dropped, not
  recorded as a dead end (its own A/B has not been run; `groups` gives variants where it is);
- `no_gain`: within noise wherever it serves: dropped (not shown to pay);
- `unmeasured`: serves no measured point: dropped; or, when `promote` is told the model's
  shapes (`heads`, `experts`), an entry for other heads or another (E, N): kept in the
  package as it is, not A/B'd (the model under test never runs it), never a dead end.

`promote` runs it: the changes in `groups` (no two changes of a group serve the same
point, so one engine per group attributes every verdict), one A/B, the decisions, the
lessons, and the package restricted to the promoted changes (`restrict`: an entry it drops
is reverted to SGLang's, never left to borrow a neighbour's config).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from evokernel.integrations.sglang.plugin import TABLES, Package, PackageError, serving

__all__ = [
    "Change",
    "Decision",
    "changes",
    "groups",
    "restrict",
    "decide",
    "record",
    "dead_ends",
    "drop_dead_ends",
    "promote",
    "fits",
    "LESSON_OP",
]

#: the knowledge base's op for what the promotion learns about packages
LESSON_OP = "sglang_package"
_FILE = re.compile(r"E=(\d+),N=(\d+),device_name=")


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One change a package makes to what SGLang runs.

    op: "decode_attention", "fused_moe" or "prefill_attention" (an entry of evokernel's kernel
    tables; a prefill entry's batch is the sequence length it was tuned at) or
    "configs" (SGLang's own MoE config files); key: the table's key ("Hq=32,Hkv=4,D=128",
    "E=128,N=768") or the config file's path in the package; batch: the entry's batch size,
    None for a whole file; config: what the entry (or file) holds; reference: for a config
    entry, what SGLang ships there (what reverting writes back); keys: every batch size of
    its table or file (reverted and unchanged entries too: they compete in the lookup)."""

    op: str
    key: str
    batch: int | None = None
    config: Any = None
    reference: Any = None
    keys: tuple[int, ...] = ()

    @property
    def id(self) -> str:
        """Stable across exports of the same change (its content hashed in)."""
        digest = hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.op}:{self.key}:{'file' if self.batch is None else self.batch}:{digest}"

    def serves_prefill(self, input_len: int) -> bool:
        """Whether the prefill of sequences `input_len` long runs this change: a prefill table
        entry whose tuned length is the nearest to it within 4x (the plugin's lookup)."""
        if self.op != "prefill_attention" or self.batch is None:
            return False
        return serving(self.keys or (self.batch,), input_len, 4.0) == self.batch

    def serves(self, batch: int) -> bool:
        """Whether a decode step at `batch` runs this change: its lookup lands on this entry
        (the plugin's tables: the nearest within 2x; SGLang's files: the nearest at any distance)."""
        if self.op == "prefill_attention":
            return False  # a prefill table entry (keyed by sequence length): no decode step runs it
        if self.batch is None:
            return True
        return serving(self.keys or (self.batch,), batch, None if self.op == "configs" else 2.0) == self.batch


def fits(change: Change, *, heads: Sequence[int] | None = None, experts: Sequence[int] | None = None) -> bool:
    """Whether the model of `heads` (H_q, H_kv, D) and `experts` (E, N) can run `change`: an
    attention entry of its heads, a fused-MoE entry or SGLang config file of its (E, N). What
    is not given matches anything.

    >>> c = Change(op="decode_attention", key="Hq=64,Hkv=8,D=128", batch=1)
    >>> fits(c, heads=(32, 4, 128)), fits(c, heads=(64, 8, 128)), fits(c, experts=(128, 768))
    (False, True, True)
    >>> fits(Change(op="configs", key="configs/triton_3_6_0/E=128,N=768,device_name=X.json"), experts=(256, 512))
    False
    """
    fields = dict(re.findall(r"(\w+)=(\d+)", change.key if change.op != "configs" else Path(change.key).name))
    if change.op in ("decode_attention", "prefill_attention"):
        want, names = heads, ("Hq", "Hkv", "D")
    else:
        want, names = experts, ("E", "N")
    if want is None or not all(n in fields for n in names):
        return True
    return tuple(int(fields[n]) for n in names) == tuple(int(x) for x in want)


@dataclass
class Decision:
    change: Change
    verdict: str  # promoted | dead_end | suspect | no_gain | unmeasured
    variant: str
    points: dict[str, dict[str, Any]] = field(default_factory=dict)  # served point -> its paired verdict
    shared_with: list[str] = field(default_factory=list)  # other changes of the variant at a slower point
    reason: str = ""  # why a change was not measured (another model's entry)

    def to_json(self) -> dict[str, Any]:
        return {
            "change": self.change.id,
            "op": self.change.op,
            "key": self.change.key,
            "batch": self.change.batch,
            "verdict": self.verdict,
            "variant": self.variant,
            "points": self.points,
            **({"shared_with": self.shared_with} if self.shared_with else {}),
            **({"reason": self.reason} if self.reason else {}),
        }


def _shipped(name: str) -> Path | None:
    from evokernel.search_spaces.moe.sglang import _newest

    return _newest(name)


def changes(root: str | Path) -> list[Change]:
    """Every change of the package at `root`."""
    root = Path(root)
    package = Package.load(root)
    out: list[Change] = []
    tables = (("decode_attention", package.decode), ("prefill_attention", package.prefill), ("fused_moe", package.moe))
    for op, table in tables:
        # each entry of evokernel's kernel tables, as the package's JSON keys and holds it
        for key, entries in (table.to_json() if table is not None else {}).items():
            keys = tuple(int(k) for k in entries)
            for k, c in entries.items():
                if c is not None:
                    out.append(Change(op=op, key=key, batch=int(k), config=c, keys=keys))
    if package.config_dir is not None:
        for path in sorted((root / str(package.manifest["configs"])).rglob("*.json")):
            rel = str(path.relative_to(root))
            table = json.loads(path.read_text())
            shipped = _shipped(path.name)
            if shipped is None:  # nothing SGLang ships to compare with, entry by entry
                out.append(Change(op="configs", key=rel, batch=None, config=table))
                continue
            ref = json.loads(shipped.read_text())
            keys = tuple(sorted({int(m) for m in (*table, *ref)}))
            for m, c in sorted(table.items(), key=lambda kv: int(kv[0])):
                if ref.get(m) != c:
                    out.append(Change(op="configs", key=rel, batch=int(m), config=c, reference=ref.get(m), keys=keys))
    return out


def groups(found: Sequence[Change], batches: Sequence[int]) -> list[list[Change]]:
    """The changes in groups where no two serve the same batch size of `batches`: one
    engine per group, and each verdict belongs to one change (first fit, in order)."""
    out: list[tuple[list[Change], set[int]]] = []
    for c in found:
        mine = {b for b in batches if c.serves(b)}
        for members, used in out:
            if not mine & used:
                members.append(c)
                used |= mine
                break
        else:
            out.append(([c], set(mine)))
    return [members for members, _ in out]


def overlapping(package: str | Path, out: str | Path) -> str | None:
    """Why `out` cannot receive a promoted copy of `package` (it is the package, inside it or
    holds it: replacing it would delete the package), or None.

    >>> overlapping("pkg", "pkg/../pkg"), overlapping("pkg", "pkg/promoted") is not None, overlapping("a", "b")
    ("the promoted package's folder pkg/../pkg would replace the package pkg itself", True, None)
    """
    a, b = Path(package).resolve(), Path(out).resolve()
    if a == b:
        return f"the promoted package's folder {out} would replace the package {package} itself"
    if a in b.parents or b in a.parents:
        return f"the promoted package's folder {out} and the package {package} are inside one another"
    return None


def restrict(root: str | Path, out: str | Path, keep: Collection[str]) -> Path:
    """A copy of the package at `root` in `out` where every change not in `keep` (ids) is
    reverted: a table entry to null (SGLang's kernel for the batch sizes nearest to it), a
    config entry to SGLang's shipped one (or removed where SGLang ships none there), a whole
    file deleted. The manifest lists what was reverted."""
    root, out = Path(root), Path(out)
    if clash := overlapping(root, out):
        raise PackageError(clash)
    found = changes(root)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(root, out)
    manifest = json.loads((out / "manifest.json").read_text())
    drop = [c for c in found if c.id not in keep]
    tables = {k["op"]: k["table"] for k in manifest.get("kernels", [])}
    for op in ("decode_attention", "fused_moe", "prefill_attention"):
        mine = [c for c in drop if c.op == op]
        if not mine:
            continue
        path = out / tables[op]
        # the table as `changes` keyed it (its own JSON may spell a key otherwise: "Hkv=4,Hq=32,D=128")
        data = TABLES[op].from_json(json.loads(path.read_text()), str(path)).to_json()
        for c in mine:
            data[c.key][str(c.batch)] = None
        path.write_text(json.dumps(data, indent=1) + "\n")
    for c in drop:
        if c.op != "configs":
            continue
        path = out / c.key
        if c.batch is None:
            path.unlink(missing_ok=True)
            continue
        data = json.loads(path.read_text())
        if c.reference is None:
            data.pop(str(c.batch), None)
        else:
            data[str(c.batch)] = c.reference
        path.write_text(json.dumps(data, indent=1) + "\n")
    for c in {c.key for c in found if c.op == "configs"}:  # a file now the same as SGLang's: SGLang reads its own
        shipped = _shipped(Path(c).name)
        path = out / c
        if shipped is not None and path.exists() and json.loads(path.read_text()) == json.loads(shipped.read_text()):
            path.unlink()
    if manifest.get("configs") and not any((out / manifest["configs"]).rglob("*.json")):
        shutil.rmtree(out / manifest["configs"], ignore_errors=True)
        manifest["configs"] = None
    manifest.setdefault("provenance", {})["reverted"] = sorted(c.id for c in drop)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def _batch(point: str) -> int:
    return int(point.split("_")[0].removeprefix("b"))


def _input_len(point: str) -> int:
    return int(point.split("_")[1].removeprefix("i"))


def decide(
    ab: Mapping[str, Any], variant_of: Mapping[str, str], found: Sequence[Change], *, reference: str | None = None
) -> list[Decision]:
    """Each change's decision from an A/B report (`ABReport.to_json()`) in which the change
    ran in the variant `variant_of[change.id]`: the paired verdicts (against the baseline, or
    the `reference` composite) at the decode points it serves; for a prefill entry, the
    paired prefill-latency verdicts against the baseline (the decode flags a composite picks
    do not touch the prefill) at every point whose prompt length it serves."""
    key = "decode_throughput" if reference is None else f"decode_throughput_vs_{reference}"
    paired = ab.get("paired", {}).get(key, {})
    prefill = ab.get("paired", {}).get("prefill_speedup", {})
    plan = ab.get("plan", {})
    decode_points = list(plan.get("decode_points", []))
    all_points = [f"b{b}_i{i}_o{o}" for b, i, o in plan.get("points", [])] or decode_points
    out: list[Decision] = []
    for c in found:
        variant = variant_of.get(c.id, "")
        if c.op == "prefill_attention":
            verdicts = prefill.get(variant, {})
            points = {p: verdicts[p] for p in all_points if p in verdicts and c.serves_prefill(_input_len(p))}

            def runs_it(o: Change, p: str) -> bool:
                return o.serves_prefill(_input_len(p))
        else:
            verdicts = paired.get(variant, {})
            points = {p: verdicts[p] for p in decode_points if p in verdicts and c.serves(_batch(p))}

            def runs_it(o: Change, p: str) -> bool:
                return o.op != "prefill_attention" and o.serves(_batch(p))

        slower = [p for p, v in points.items() if v.get("verdict") == "slower"]
        shared = sorted(
            o.id for o in found if o is not c and variant_of.get(o.id) == variant and any(runs_it(o, p) for p in slower)
        )
        if not points:
            verdict = "unmeasured"
        elif slower:
            verdict = "suspect" if shared else "dead_end"
        elif any(v.get("verdict") == "faster" for v in points.values()):
            verdict = "promoted"
        else:
            verdict = "no_gain"
        out.append(Decision(c, verdict, variant, points, shared if slower else []))
    return out


def record(
    store: Any, decisions: Sequence[Decision], *, gpu: str, toolchain: Mapping[str, Any], run_id: str = ""
) -> list[Any]:
    """Each dead end as a caveat lesson (op `LESSON_OP`) with its figures; returns them."""
    from evokernel.store.knowledge import new_lesson

    lessons = []
    for d in decisions:
        if d.verdict != "dead_end":
            continue
        figures = "; ".join(
            f"{p} {v['median']:.3f} [{v['low']:.3f}, {v['high']:.3f}]"
            + (f" (A/A [{v['control'][0]:.3f}, {v['control'][1]:.3f}])" if v.get("control") else " (no A/A control)")
            for p, v in d.points.items()
        )
        lessons.append(
            new_lesson(
                "caveat",
                LESSON_OP,
                gpu,
                dict(toolchain),
                f"dead end in SGLang: {d.change.op} {d.change.key}"
                f"{'' if d.change.batch is None else f' at batch {d.change.batch}'} is slower end to end "
                f"({'prefill latency' if d.change.op == 'prefill_attention' else 'decode throughput'} ratio, "
                f"paired per round: {figures})",
                {"class": "dead end", **d.to_json(), "config": d.change.config},
                run_id,
            )
        )
    if lessons:
        store.save_lessons(lessons)
    return lessons


def dead_ends(store: Any, gpu: str) -> set[str]:
    """The ids of the changes the knowledge base holds as dead ends on this GPU."""
    return {
        str(le.evidence.get("change"))
        for le in store.lessons(op=LESSON_OP, gpu=gpu)
        if le.evidence.get("class") == "dead end" and le.evidence.get("change")
    }


def drop_dead_ends(store: Any, root: str | Path, gpu: str) -> list[str]:
    """Revert, in place, the package's changes that the knowledge base holds as dead ends on
    this GPU; returns their ids (the export calls this: no package it writes holds a change
    whose own A/B was slower)."""
    known = dead_ends(store, gpu)
    found = changes(root)
    drop = [c.id for c in found if c.id in known]
    if drop:
        tmp = Path(str(root).rstrip("/") + ".promoting")
        restrict(root, tmp, keep={c.id for c in found if c.id not in known})
        shutil.rmtree(root)
        tmp.rename(root)
    return drop


@dataclass
class Promotion:
    decisions: list[Decision]
    ab: dict[str, Any]  # the A/B report (`ABReport.to_json()`)
    package: Path | None  # the promoted package (None: nothing promoted, SGLang as shipped)
    groups: list[list[str]]
    report: Any = None  # the `ABReport` itself

    def to_json(self) -> dict[str, Any]:
        return {
            "decisions": [d.to_json() for d in self.decisions],
            "groups": self.groups,
            "package": str(self.package) if self.package else None,
            "promoted": [d.change.id for d in self.decisions if d.verdict == "promoted"],
        }


def promote(
    evaluator: Any,
    root: str | Path,
    out: str | Path,
    *,
    work: str | Path,
    store: Any = None,
    gpu: str = "",
    toolchain: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    name: str = "changes",
    composite: tuple[str, Sequence[str]] | None = None,
    progress: Any = None,
    heads: Sequence[int] | None = None,
    experts: Sequence[int] | None = None,
) -> Promotion:
    """The end-to-end stage of the cascade for the package at `root`: its changes in
    attributable groups, one engine per group beside SGLang as shipped and its A/A control
    (`evaluator`: an `SGLangEvaluator`; `extra`: more variants to run alongside, e.g. SGLang
    at other flag values), the decisions, dead ends recorded in `store`, and the package of
    the promoted changes written to `out`. The groups' engines are named `name` (one group:
    the whole package) or `name`_0, `name`_1, ...; `composite` (a name and engines) adds a
    composite reference to the report (`ABReport.composite`, e.g. SGLang's best flag per point);
    `progress` goes to the evaluator's `compare` (called with the report after every round).

    `heads` (H_q, H_kv, D) and `experts` (E, N) name the served model's shapes: a change for
    other heads or another (E, N) (`fits`) is not A/B'd on this model (no engine is spent on
    it; its verdict would be noise), is `unmeasured` with the reason, never recorded as a
    dead end, and stays as it was in the promoted package (written when a change of the model
    is promoted, as before). Not given: every change is judged."""
    work = Path(work)
    everything = changes(root)
    found = [c for c in everything if fits(c, heads=heads, experts=experts)]
    foreign = [c for c in everything if c not in found]
    batches = sorted({_batch(p) for p in evaluator.plan()["decode_points"]})
    grouped = groups(found, batches)
    variants: dict[str, Any] = dict(extra or {})
    variant_of: dict[str, str] = {}
    for i, members in enumerate(grouped):
        label = name if len(grouped) == 1 else f"{name}_{i}"
        variants[label] = restrict(root, work / label, keep={c.id for c in members})
        variant_of.update({c.id: label for c in members})
    report = evaluator.compare(variants, progress=progress) if progress is not None else evaluator.compare(variants)
    if composite is not None:
        report.composite(*composite)
    ab = report.to_json()
    decisions = decide(ab, variant_of, found)
    if store is not None:
        record(store, decisions, gpu=gpu, toolchain=toolchain or {})
    keep = {d.change.id for d in decisions if d.verdict == "promoted"}
    model = ", ".join(f"{n} {tuple(v)}" for n, v in (("heads", heads), ("(E, N)", experts)) if v is not None)
    decisions += [
        Decision(c, "unmeasured", "", reason=f"another model's entry (the served model's {model}): kept, not A/B'd")
        for c in foreign
    ]
    # another model's entries ship as they were: reverting them would undo their own model's tuning
    package = restrict(root, out, keep | {c.id for c in foreign}) if keep else None
    return Promotion(decisions, ab, package, [[c.id for c in g] for g in grouped], report)
