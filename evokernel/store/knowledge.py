"""The knowledge base and the kernel database: what runs learned, for the runs after them.

After each generation, `KnowledgeRecorder` (a search observer) turns what happened into
lessons, without an LLM:

- a **caveat** per failure class met (out of shared memory, registers, a compile error, wrong
  results, a crash, a timeout), with how many configurations hit it and examples;
- a **pattern** per child that beat its parent by more than `min_gain` (and its noise): what
  changed (the parameters, or "a rewritten source" and its first docstring line) and by how
  much, on which op, GPU and shapes;
- a **caveat** per child that lost to its parent by more than that: a regression, what
  changed and by how much.

An LLM may add a **summary** in prose over those lessons (`summarize`, or the recorder's
`summarizer` at the end of a run); it is stored with the lessons it read as its evidence.

Every lesson carries its evidence (genome ids, figures) and the toolchain it was learned
under; `lessons_for` leaves out lessons from another GPU, op or toolchain (a new Triton or
CUDA can change what fails and what is fast). The LLM operator puts them in its prompt
(`LLMRewrite(lessons=...)`).

Every accepted kernel that carries its own source (an LLM rewrite, a hand-written one) goes
into the kernel database with its source, its unified diff against its parent's source,
the problem and shapes it passed on, its results and the workload (GPU, toolchain, shapes)
it was measured under; `kernels(store, op=..., gpu=..., shape=...)` queries it. Elites of
earlier runs seed new runs of the same space and evaluator through the archive already.

Both live in the store (SQLite tables `lessons` and `kernels`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from evokernel.judge.candidate import bind_config
from evokernel.core.genome import Genome
from evokernel.core.redact import redact_failure
from evokernel.core.result import Status

__all__ = ["Lesson", "new_lesson", "KnowledgeRecorder", "lessons_for", "kernels", "failure_class", "summarize"]


class Lesson(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    kind: str  # "pattern", "caveat" or "summary"
    op: str  # the problem's family (or name)
    gpu: str
    toolchain: dict[str, Any]
    text: str
    evidence: dict[str, Any]
    run_id: str = ""
    created: float = 0.0


def failure_class(status: str, error: str) -> str:
    """A failure's class, for caveats: what a later run should avoid."""
    low = error.lower()
    if "shared memory" in low or "outofresources" in low and "shared" in low:
        return "out of shared memory"
    if "register" in low:
        return "out of registers"
    if status == Status.COMPILE_ERROR.value:
        first = error.strip().splitlines()[0] if error.strip() else ""
        return "compile error" + (f" ({first.split(':')[0][:60]})" if first else "")
    return {
        "incorrect": "wrong results",
        "crash": "a crash",
        "timeout": "a timeout",
        "runtime_error": "a runtime error",
    }.get(status, status)


def _error(ind: Any) -> str:
    """A failure's text as a lesson may quote it (lessons reach the model's prompts)."""
    return redact_failure(ind.result.error)


def new_lesson(
    kind: str, op: str, gpu: str, toolchain: dict[str, Any], text: str, evidence: dict[str, Any], run_id: str
) -> Lesson:
    """A lesson stamped now, its id the digest of what it says (kind, op, GPU, text): the same
    lesson learned again by another run replaces the first rather than standing twice."""
    digest = hashlib.sha256(json.dumps([kind, op, gpu, text], sort_keys=True).encode()).hexdigest()[:16]
    return Lesson(
        id=digest,
        kind=kind,
        op=op,
        gpu=gpu,
        toolchain=toolchain,
        text=text,
        evidence=evidence,
        run_id=run_id,
        created=time.time(),
    )


def _first_doc_line(source: str) -> str:
    for line in source.splitlines():
        text = line.strip().strip('"').strip("'").strip()
        if text:
            return text[:100]
    return ""


class KnowledgeRecorder:
    """Search observer: writes lessons after each generation and accepted source kernels as
    they are judged. `where` gives (op, gpu, toolchain, shapes) for the run; the default
    reads them from a KernelEvaluator (`from_evaluator`)."""

    def __init__(
        self,
        store: Any,
        where: Mapping[str, Any],
        *,
        min_gain: float = 0.03,
        render: Callable[[Genome], str] | None = None,
        summarizer: Any = None,
    ) -> None:
        self.store, self.where, self.min_gain, self.render = store, dict(where), min_gain, render
        self.summarizer = summarizer  # an LLM provider: a prose summary of the lessons when the run ends
        self.run_id = ""
        self.budget: Any = None  # the run's budget: the summary keeps within its wall time and dollars
        self._started = 0.0
        self._pending: list[Any] = []
        self._by_id: dict[str, Any] = {}

    @classmethod
    def from_evaluator(cls, store: Any, evaluator: Any, **kw: Any) -> KnowledgeRecorder:
        fp = evaluator.fingerprint() if hasattr(evaluator, "fingerprint") else {}
        problem = getattr(evaluator, "problem", None)
        where = {
            "op": getattr(problem, "family", None) or fp.get("problem") or getattr(evaluator, "name", "kernel"),
            "gpu": fp.get("gpu") or fp.get("device") or fp.get("cpu") or "unknown",
            "toolchain": {k: fp.get(k) for k in ("triton", "torch", "cuda", "driver") if fp.get(k)},
            "shapes": list(getattr(problem, "shapes", []) or []),
        }
        return cls(store, where, render=getattr(evaluator, "render", None), **kw)

    # -- observer hooks -----------------------------------------------------------------
    def on_start(self, run_id: str, budget: Any, resumed: bool) -> None:
        self.run_id = run_id
        self.budget, self._started = budget, time.monotonic()

    def on_evaluation(self, individual: Any, best: Any, evaluations: int) -> None:
        self._by_id[individual.genome.id] = individual
        self._pending.append(individual)
        if individual.result.is_ok and individual.genome.source and "def kernel" in individual.genome.source:
            self._save_kernel(individual)

    def on_generation(self, generation: int, summary: dict[str, Any]) -> None:
        self.flush()

    def on_finish(self, report: Any) -> None:
        self.flush()
        if self.summarizer is None:
            return
        import logging

        log = logging.getLogger("evokernel.knowledge")
        wall_s = getattr(self.budget, "wall_s", None)
        cap = getattr(self.budget, "cost", None)
        spent = float(getattr(report, "cost", 0.0) or 0.0)
        if cap is not None and spent >= cap:
            log.warning("lesson summary skipped: the run's LLM budget ($%.2f) is spent", cap)
            return
        time_left = None
        if wall_s is not None:
            # the run's clock started at or before on_start, and the report says how long it ran
            elapsed = max(time.monotonic() - self._started, float(getattr(report, "wall_s", 0.0) or 0.0))
            time_left = wall_s - elapsed
            if time_left < 1.0:
                log.warning("lesson summary skipped: no time left in the run's wall-time budget")
                return
        lesson = summarize(
            self.store,
            self.summarizer,
            op=self.where["op"],
            gpu=self.where["gpu"],
            toolchain=self.where["toolchain"],
            run_id=self.run_id,
            time_left=time_left,
        )
        cost = float(lesson.evidence.get("cost_usd") or 0.0) if lesson is not None else 0.0
        if cost:
            # the run's: the search charges what its observers add to the report (a `charge`
            # event, the stored summary's cost)
            report.cost = spent + cost
            log.info("lesson summary cost $%.4f (charged to the run)", cost)

    # -- lessons --------------------------------------------------------------------------
    def flush(self) -> list[Lesson]:
        batch, self._pending = self._pending, []
        op, gpu, tc, run = self.where["op"], self.where["gpu"], self.where["toolchain"], self.run_id
        lessons: list[Lesson] = []
        failures: dict[str, list[Any]] = {}
        for ind in batch:
            if not ind.result.is_ok:
                failures.setdefault(failure_class(ind.result.status.value, _error(ind)), []).append(ind)
        for cls, inds in sorted(failures.items()):
            examples = [i.genome for i in inds[:3]]
            shown = "; ".join(("a rewritten source" if g.source else g.short()) for g in examples)
            error = _error(inds[0]).strip()
            first = error.splitlines()[0][:160] if error else ""
            lessons.append(
                new_lesson(
                    "caveat",
                    op,
                    gpu,
                    tc,
                    f"{len(inds)} candidate(s) failed with {cls} on {gpu}: {shown}" + (f" ({first})" if first else ""),
                    {"genomes": [g.id for g in examples], "class": cls},
                    run,
                )
            )
        for ind in batch:
            lineage = ind.genome.lineage
            parent = self._ok_ancestor(ind)
            if parent is None or not ind.result.is_ok:
                continue
            gain = parent.result.latency_ms / ind.result.latency_ms - 1
            noise = max(ind.result.noise, parent.result.noise)
            if abs(gain) <= max(self.min_gain, 2 * noise):
                continue
            if ind.genome.source and ind.genome.source != parent.genome.source:
                what = f"a rewritten source ({_first_doc_line(ind.genome.source)})"
            else:
                changed = {
                    k: (parent.genome.params.get(k), v)
                    for k, v in ind.genome.params.items()
                    if parent.genome.params.get(k) != v
                }
                what = ", ".join(f"{k} {a}->{b}" for k, (a, b) in sorted(changed.items())) or "a new genome"
            shapes = ", ".join(ind.result.per_shape) or "its shapes"
            if gain < 0:  # a regression: slower than its parent by more than the noise
                lessons.append(
                    new_lesson(
                        "caveat",
                        op,
                        gpu,
                        tc,
                        f"{what} (operator {lineage.operator}) regressed by {100 * (1 / (1 + gain) - 1):.1f}% on "
                        f"{shapes} ({parent.result.latency_ms:.4g} -> {ind.result.latency_ms:.4g} ms)",
                        {
                            "genome": ind.genome.id,
                            "parent": parent.genome.id,
                            "class": "regression",
                            "slowdown": 1 / (1 + gain) - 1,
                            "latency_ms": ind.result.latency_ms,
                            "parent_ms": parent.result.latency_ms,
                        },
                        run,
                    )
                )
                continue
            lessons.append(
                new_lesson(
                    "pattern",
                    op,
                    gpu,
                    tc,
                    f"{what} (operator {lineage.operator}) gained {100 * gain:.1f}% on {shapes} "
                    f"({parent.result.latency_ms:.4g} -> {ind.result.latency_ms:.4g} ms)",
                    {
                        "genome": ind.genome.id,
                        "parent": parent.genome.id,
                        "gain": gain,
                        "latency_ms": ind.result.latency_ms,
                        "parent_ms": parent.result.latency_ms,
                    },
                    run,
                )
            )
        if lessons:
            self.store.save_lessons(lessons)
        return lessons

    def _ok_ancestor(self, ind: Any) -> Any:
        """The fastest accepted parent, or, for a child of failed parents (a repair), the
        nearest accepted ancestor."""
        frontier, seen = list(ind.genome.lineage.parents), set()
        while frontier:
            found = [self._by_id[p] for p in frontier if p in self._by_id]
            ok = [p for p in found if p.result.is_ok]
            if ok:
                return min(ok, key=lambda p: p.result.latency_ms)
            seen.update(frontier)
            frontier = [q for p in found for q in p.genome.lineage.parents if q not in seen]
        return None

    # -- the kernel database --------------------------------------------------------------
    def _parent_source(self, ind: Any) -> str:
        for pid in ind.genome.lineage.parents:
            p = self._by_id.get(pid)
            if p is not None:
                if p.genome.source and "def kernel" in p.genome.source:
                    return bind_config(p.genome.source, p.genome.params)
                if self.render is not None:
                    try:
                        return self.render(p.genome)
                    except Exception:
                        return ""
        return ""

    def _save_kernel(self, ind: Any) -> None:
        base = self._parent_source(ind)
        source = bind_config(ind.genome.source, ind.genome.params)  # what ran
        diff = "".join(
            difflib.unified_diff(
                base.splitlines(keepends=True), source.splitlines(keepends=True), "parent/candidate.py", "candidate.py"
            )
        )
        self.store.save_kernel(
            {
                "genome_id": ind.genome.id,
                "op": self.where["op"],
                "gpu": self.where["gpu"],
                "toolchain": self.where["toolchain"],
                "shapes": self.where.get("shapes", []),
                "source": source,
                "diff": diff,
                "latency_ms": ind.result.latency_ms,
                "per_shape": dict(ind.result.per_shape),
                "run_id": self.run_id,
                "workload": {
                    "gpu": self.where["gpu"],
                    "toolchain": self.where["toolchain"],
                    "shapes": self.where.get("shapes", []),
                },
            }
        )


def lessons_for(
    store: Any, *, op: str, gpu: str, toolchain: Mapping[str, Any] | None = None, limit: int = 12
) -> list[str]:
    """The text of the valid lessons for this op and GPU (most recent first; caveats and
    patterns interleaved), leaving out those learned under another toolchain."""
    found = [
        le
        for le in store.lessons(op=op, gpu=gpu)
        if not toolchain or all(le.toolchain.get(k) == v for k, v in toolchain.items() if k in le.toolchain)
    ]
    found.sort(key=lambda le: -le.created)
    caveats = [le for le in found if le.kind == "caveat"]
    patterns = [le for le in found if le.kind == "pattern"]
    summaries = [le for le in found if le.kind == "summary"]
    out: list[str] = [f"[summary] {summaries[0].text}"] if summaries and limit > 0 else []
    while (caveats or patterns) and len(out) < limit:
        for group in (patterns, caveats):
            if group and len(out) < limit:
                le = group.pop(0)
                out.append(f"[{le.kind}] {le.text}")
    return out


def kernels(
    store: Any, *, op: str | None = None, gpu: str | None = None, shape: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Accepted source kernels, fastest first; `shape` keeps those tested on that shape."""
    rows = store.kernels(op=op, gpu=gpu)
    if shape is not None:
        rows = [r for r in rows if any(all(s.get(k) == v for k, v in shape.items()) for s in r["shapes"])]
    return sorted(rows, key=lambda r: r["latency_ms"])


_SUMMARY_TOOL = {
    "name": "submit_summary",
    "description": "Submit the summary of the lessons.",
    "input_schema": {
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "at most 120 words of prose"}},
        "required": ["summary"],
    },
}

_SUMMARY_INSTRUCTIONS = """You summarise what kernel-tuning runs learned, for the engineer and the \
model that will run the next search on the same operation and GPU. You are given lessons \
(patterns: changes that made a kernel faster, with the gain; caveats: failures, regressions). \
Write at most 120 words of prose: what to try first, what to avoid, and what is uncertain. \
State only what the lessons support, with their figures. Submit it with submit_summary."""


def summarize(
    store: Any,
    provider: Any,
    *,
    op: str,
    gpu: str,
    toolchain: Mapping[str, Any] | None = None,
    run_id: str = "",
    limit: int = 40,
    time_left: float | None = None,
) -> Lesson | None:
    """An LLM's prose summary of the lessons for this op and GPU, stored as a `summary`
    lesson (its evidence: the lessons it read, the model, tokens and dollars), or None when
    there is nothing to summarise or the call fails (the failure is logged, never raised).
    With `time_left` (seconds), the call and its retries end within it (no call under 1 s)."""
    import inspect
    import logging

    log = logging.getLogger("evokernel.knowledge")
    found = [
        le
        for le in store.lessons(op=op, gpu=gpu)
        if le.kind != "summary"
        and (not toolchain or all(le.toolchain.get(k) == v for k, v in toolchain.items() if k in le.toolchain))
    ]
    found = sorted(found, key=lambda le: -le.created)[:limit]
    if not found or provider is None or (hasattr(provider, "available") and provider.available() is not None):
        return None
    kwargs: dict[str, Any] = {}
    if time_left is not None:
        if time_left < 1.0:
            log.warning("lesson summary skipped: no time left")
            return None
        try:
            takes = "time_left" in inspect.signature(provider.complete).parameters
        except (TypeError, ValueError):
            takes = False
        if takes:  # (a provider of the user's without it is called as the LLM operator calls it)
            kwargs["time_left"] = time_left
    prompt = f"Operation {op} on {gpu}.\n\n" + "\n".join(f"- [{le.kind}] {le.text}" for le in found)
    try:
        reply = provider.complete(
            [{"type": "text", "text": _SUMMARY_INSTRUCTIONS}], prompt, tool=_SUMMARY_TOOL, **kwargs
        )
    except Exception as exc:  # a provider of the user's that raised: logged, never raised
        log.warning("lesson summary dropped: provider failed: %s: %s", type(exc).__name__, str(exc)[:200])
        return None
    text = str(reply.fields.get("summary") or reply.fields.get("text") or "").strip() if not reply.error else ""
    if not text:
        log.warning("lesson summary dropped: %s", reply.error or "empty summary")
        return None
    lesson = new_lesson(
        "summary",
        op,
        gpu,
        dict(toolchain or found[0].toolchain),
        text[:2000],
        {
            "lessons": [le.id for le in found],
            "model": getattr(provider, "model", ""),
            "cost_usd": reply.cost_usd,
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
        },
        run_id,
    )
    store.save_lessons([lesson])
    return lesson
