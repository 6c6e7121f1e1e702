"""`LLMRewrite`: the mutator that asks a model to rewrite a parent kernel (see the package's docstring)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.judge.candidate import bind_config, config_of, space_of
from evokernel.core.genome import Genome
from evokernel.core.redact import redact_failure
from evokernel.core.mutator import Context
from evokernel.judge.problem import Problem
from evokernel.mutators.llm.edits import _config_keys, _normal, apply_edits, validate_source
from evokernel.mutators.llm.providers import NOT_STARTED, AnthropicProvider, LLMReply

log = logging.getLogger("evokernel.llm")

_INSTRUCTIONS = """You optimise GPU kernels. You are given a problem (a reference implementation in \
PyTorch and the shapes it runs at) and a candidate module that computes it. Write a faster \
candidate: a complete Python module that defines `kernel(*inputs)` returning exactly what the \
reference returns (same shapes, dtypes, device), written with Triton and/or PyTorch. It is \
checked against the reference on fresh random inputs, every call; then timed on the GPU. \
Do not cache results, skip work, use other streams or threads, or touch the timing: such \
kernels are rejected. If the candidate defines CONFIG (a literal dict of tunable parameters), \
keep CONFIG with at least the same keys and read the tunables from it: the search tunes them. \
A new structure may bring tunables of its own: add them to CONFIG and declare the values worth \
trying in a literal SPACE dict (e.g. SPACE = {"UNROLL": [1, 2, 4]}, with CONFIG's value among \
them); the search tries them before it judges the structure. Submit the whole module \
(`source`) or search/replace `edits` to the candidate, with the submit_kernel tool."""


@dataclass
class _Stats:
    calls: int = 0
    proposed: int = 0
    repairs: int = 0
    tuned: int = 0  # variants of new structures' own tunables (SPACE), proposed without a call
    dropped: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0, "cache_write": 0, "cache_read": 0})


class LLMRewrite:
    """Mutator: asks an LLM to rewrite the parent's kernel source (see the module's doc).

    `render` turns a genome into its candidate source (a genome carrying its own source is
    used as it is); `lessons(problem, parent)` returns text lines for the prompt;
    `measured(genome)` what is known of a genome's results (a dict: latency per shape, error).

    A provider whose calls fail `breaker` proposals in a row (no answer: the API is down,
    overloaded or stalled, after the provider's own retries) is off for the rest of the run,
    said in one line; so is the operator once the run's cost budget left cannot pay for one
    request's worst case. The search goes on with its other operators."""

    arity = 1
    costly = True

    def __init__(
        self,
        problem: Problem | str | os.PathLike[str],
        *,
        provider: Any | Sequence[Any] = None,
        render: Callable[[Genome], str] | None = None,
        name: str = "llm-rewrite",
        inspirations: int = 2,
        repairs: int = 2,
        lessons: Callable[[Problem, Genome], list[str]] | None = None,
        measured: Callable[[Genome], dict[str, Any]] | None = None,
        inputs: int | None = None,
        tune: int = 6,
        breaker: int = 3,
    ) -> None:
        self.problem = problem if isinstance(problem, Problem) else Problem.load(problem)
        # several providers (models) are mixed by Thompson sampling on their gains per dollar
        providers = list(provider) if isinstance(provider, (list, tuple)) else [provider or AnthropicProvider()]
        self.providers = providers
        self.provider = providers[0]
        self._model_stats = [{"calls": 0, "gains": 0.0, "cost": 0.0} for _ in providers]
        self._child_of: dict[str, tuple[int, float | None]] = {}  # child id -> (provider, parent latency)
        self.render, self.name, self.inspirations = render, name, inspirations
        self.lessons, self.measured, self.inputs = lessons, measured, inputs  # inputs: the problem's arity
        self.stats = _Stats()
        self._said_off = False
        self.breaker = breaker
        self._failed = [0] * len(providers)  # proposals in a row whose call failed, by provider
        self._broken: dict[int, str] = {}  # provider -> why it is off for the rest of the run
        self._broke = ""  # why the whole operator is off for the rest of the run (no money left)
        self.last_prompt = ""
        # repair mode: a rewrite of ours that failed to compile or failed the gate goes back
        # with its error, at most `repairs` times along one line of fixes
        self.repairs = repairs
        self._mine: dict[str, int] = {}  # genome id -> repairs already spent on its line
        self._to_repair: list[tuple[Genome, str, int]] = []
        self._seen: dict[str, dict[str, Any]] = {}  # what was measured of each genome (for prompts)
        # a new structure with tunables of its own (SPACE) gets up to `tune` variants of them,
        # proposed without a call once the structure passed the gate, so it is not judged on
        # the one configuration the model happened to write
        self.tune = tune
        self._structures: dict[str, dict[str, list[Any]]] = {}  # child id -> its own SPACE
        self._to_tune: list[Genome] = []
        # a model that answers with a kernel it already gave (or the parent unchanged) is not
        # asked again at once: the next prompts name those answers and ask for something
        # different, and after n repeats in a row the next 2**n - 1 proposals make no call
        self._answers: dict[str, str] = {}  # genomes the model's answers became
        self._repeats: list[str] = []  # genomes the model answered with again (named in prompts)
        self._in_a_row = 0
        self._pause = 0

    def reset(self) -> None:
        self._failed = [0] * len(self.providers)
        self._broken.clear()
        self._broke = ""
        self._said_off = False
        self._answers.clear()
        self._repeats.clear()
        self._in_a_row = self._pause = 0
        self._structures.clear()
        self._to_tune.clear()
        self._child_of.clear()
        self._mine.clear()
        self._to_repair.clear()
        self._seen.clear()

    def observe(self, genome: Genome, result: Any) -> None:
        """Remember what was measured; queue our own failed rewrites for repair."""
        # what of a failure the model may see: the judge's words and the candidate's own
        # traceback, never what the candidate read or printed (evokernel.core.redact)
        error = redact_failure(result.error) if not result.is_ok else ""
        if result.is_ok:
            self._seen[genome.id] = {"latency_ms": result.latency_ms, "per_shape": dict(result.per_shape)}
        else:
            self._seen[genome.id] = {"status": result.status.value, "error": error[:800]}
        origin = self._child_of.pop(genome.id, None)
        if origin is not None:
            which, parent_ms = origin
            if result.is_ok and parent_ms and result.latency_ms < parent_ms:
                self._model_stats[which]["gains"] += 1.0
        own = self._structures.pop(genome.id, None)
        if own and result.is_ok:
            self._queue_variants(genome, own)
        spent = self._mine.get(genome.id)
        if spent is not None and not result.is_ok and spent < self.repairs:
            self._to_repair.append((genome, f"{result.status.value}: {error[:1500]}", spent))

    def _off(self, i: int) -> str | None:
        """Why provider i makes no more calls this run, or None."""
        return self._broken.get(i) or self.providers[i].available()

    def available(self) -> str | None:
        if self._broke:
            return self._broke
        reasons = [self._off(i) for i in range(len(self.providers))]
        return None if any(r is None for r in reasons) else "; ".join(dict.fromkeys(r for r in reasons if r))

    @property
    def exhausted(self) -> bool:
        """Nothing left to offer: every provider is off (a bad key, no such model) and no
        variant of a structure waits to be tried. The engine stops choosing it."""
        return not self._to_tune and self.available() is not None

    def _choose(self, rng: Any) -> int:
        """The provider for this call: a Beta draw of its gain rate (gains / calls) per mean
        dollar per call, so a cheap model that gains as often as a dear one wins; an unpriced
        (local) model counts a cent per call."""
        usable = [i for i in range(len(self.providers)) if self._off(i) is None]
        if len(usable) == 1:
            return usable[0]
        best, pick = -1.0, usable[0]
        for i in usable:
            st = self._model_stats[i]
            draw = rng.beta(1.0 + st["gains"], 1.0 + st["calls"] - st["gains"])
            per_call = max(st["cost"] / st["calls"], 0.01) if st["calls"] else 0.01
            if draw / per_call > best:
                best, pick = draw / per_call, i
        return pick

    def model_stats(self) -> list[dict[str, Any]]:
        return [
            {"model": getattr(p, "model", p.__class__.__name__), **st}
            for p, st in zip(self.providers, self._model_stats)
        ]

    def _queue_variants(self, genome: Genome, own: dict[str, list[Any]]) -> None:
        """Up to `tune` other settings of a structure's own tunables, distinct, in a seeded
        random order (one-at-a-time moves first: the nearest settings are the likeliest)."""
        import itertools
        import random

        base = config_of(genome.source) or {}
        keys = sorted(own)
        singles = [{**{k: base.get(k) for k in keys}, key: v} for key in keys for v in own[key] if v != base.get(key)]
        combos = [dict(zip(keys, vs)) for vs in itertools.islice(itertools.product(*(own[k] for k in keys)), 4096)]
        rng = random.Random(genome.id)
        rng.shuffle(singles)
        rng.shuffle(combos)
        seen, picked = {tuple(base.get(k) for k in keys)}, []
        for values in singles + combos:
            key = tuple(values[k] for k in keys)
            if key not in seen and len(picked) < self.tune:
                seen.add(key)
                picked.append(values)
        for values in picked:
            child = Genome.of(dict(genome.params), source=bind_config(genome.source, values))
            self._to_tune.append(child.with_lineage((genome.id,), self.name, genome.lineage.generation))

    # -- prompt --------------------------------------------------------------------------
    def _source(self, genome: Genome) -> str:
        if genome.source and "def kernel" in genome.source:
            return bind_config(genome.source, genome.params)
        if self.render is None:
            raise ValueError("a genome without its own source needs `render`")
        return self.render(genome)

    def system(self) -> list[dict[str, Any]]:
        """The stable part of the prompt (cached): instructions and the problem."""
        p = self.problem
        ref = Path(p.path).read_text() if p.path and os.path.exists(p.path) else "(no source)"
        shapes = "\n".join(f"- {s}" for s in p.shapes)
        return [
            {"type": "text", "text": _INSTRUCTIONS},
            {
                "type": "text",
                "cache_control": {"type": "ephemeral"},
                "text": f"## Problem `{p.name}`\n\nReference module:\n```python\n{ref}\n```\n\nShapes tuned on:\n{shapes}\n",
            },
        ]

    def repair_prompt(self, failed: Genome, error: str) -> str:
        return (
            f"## Candidate that failed (genome {failed.id})\n```python\n{self._source(failed)}\n```\n\n"
            f"It was rejected with:\n```\n{error}\n```\n\nFix it, keeping its idea, and submit the whole "
            "module with submit_kernel."
        )

    def prompt(self, parent: Genome, ctx: Context) -> str:
        parts = [f"## Candidate to improve (genome {parent.id})\n```python\n{self._source(parent)}\n```"]
        measured = self.measured(parent) if self.measured is not None else self._seen.get(parent.id)
        if isinstance(measured, dict) and measured.get("error"):
            measured = {**measured, "error": redact_failure(str(measured["error"]))[:800]}
        if measured:
            parts.append(f"Measured: {measured}")
        elites = [e for e in ctx.archive.top() if e.genome.id != parent.id][: self.inspirations]
        for e in elites:
            parts.append(
                f"## Inspiration: an elite at {e.latency_ms:.5f} ms ({e.niche})\n"
                f"```python\n{self._source(e.genome)}\n```"
            )
        if self.lessons is not None:
            lines = [ln for ln in self.lessons(self.problem, parent) if ln]
            if lines:
                parts.append("## Lessons from earlier attempts\n" + "\n".join(f"- {ln}" for ln in lines))
        if self._repeats:
            parts.append(
                "## Already submitted\nYour last answers repeated kernels already tried (genomes "
                + ", ".join(dict.fromkeys(self._repeats[-4:]))
                + "). Submit a substantially different "
                "kernel, not one of those again."
            )
        parts.append("Write a faster candidate and submit it with submit_kernel.")
        return "\n\n".join(parts)

    # -- the operator --------------------------------------------------------------------
    def _drop(self, why: str) -> None:
        key = why.split(":")[0][:60]
        self.stats.dropped[key] = self.stats.dropped.get(key, 0) + 1
        log.warning("%s: proposal dropped: %s", self.name, why)

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        off = self.available()
        if off is not None:
            if not self._said_off:
                log.warning("%s is off: %s", self.name, off)
                self._said_off = True
            return None
        if self._to_tune:  # a variant of a new structure's own tunables: no call
            self.stats.tuned += 1
            return self._to_tune.pop(0)
        if self._pause > 0:  # backing off a model that keeps repeating itself: no call
            self._pause -= 1
            return None
        repair = self._to_repair.pop(0) if self._to_repair else None
        parent = repair[0] if repair else parents[0]
        try:
            parent_source = self._source(parent)
        except Exception as exc:  # the user's render failed: this proposal's problem
            self._drop(f"render failed: {type(exc).__name__}: {exc}")
            return None
        self.last_prompt = self.repair_prompt(parent, repair[1]) if repair else self.prompt(parent, ctx)
        which = self._choose(ctx.rng)
        self.provider = self.providers[which]
        reply = self._call(self.provider, ctx)
        if reply.error.startswith(NOT_STARTED):  # no request went out: not a call
            self.stats.dropped["not started"] = self.stats.dropped.get("not started", 0) + 1
            if "cost budget" in reply.error:  # the money left will not grow
                self._broke = reply.error[len(NOT_STARTED) :]
                log.warning("%s is off for the rest of the run: request not started: %s", self.name, self._broke)
                self._said_off = True
            else:
                log.warning("%s: proposal dropped: %s", self.name, reply.error)
            return None
        self._model_stats[which]["calls"] += 1
        self._model_stats[which]["cost"] += reply.cost_usd
        st = self.stats
        st.calls += 1
        st.cost_usd += reply.cost_usd
        for k, v in (
            ("input", reply.input_tokens),
            ("output", reply.output_tokens),
            ("cache_write", reply.cache_write_tokens),
            ("cache_read", reply.cache_read_tokens),
        ):
            st.tokens[k] += v
        if reply.cost_usd:
            ctx.charge(reply.cost_usd, f"{self.name} {getattr(self.provider, 'model', '')}")
        self._failed[which] = self._failed[which] + 1 if self._no_answer(reply) else 0
        if reply.error:
            off = self.provider.available()
            if off is None and self._failed[which] >= self.breaker > 0:
                off = self._broken[which] = f"{self._failed[which]} proposals in a row failed (the last: {reply.error})"
            if off is None:
                self._drop(reply.error)
                return None
            # a permanent error (a bad key, no access, no such model) or an API that keeps
            # failing: that provider makes no more calls this run, said once here rather than
            # once per proposal
            key = reply.error.split(":")[0][:60]
            st.dropped[key] = st.dropped.get(key, 0) + 1
            model = getattr(self.provider, "model", type(self.provider).__name__)
            log.warning("%s: %s is off for the rest of the run: %s", self.name, model, off)
            self._said_off = self.available() is not None
            return None
        source = reply.source
        if reply.edits:
            source, why = apply_edits(parent_source, reply.edits)
            if why is not None:
                self._drop(f"malformed edit: {why}")
                return None
        source = source if source.endswith("\n") else source + "\n"
        known = [p.name for p in ctx.space.params] if ctx.space is not None else None
        why = validate_source(source, config_keys=_config_keys(parent_source), known=known)
        if why is None:
            why = self._check_arity(source)
        if why is not None:
            self._drop(f"invalid source: {why}")
            return None
        st.proposed += 1
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        log.info(
            "%s: %s %s: %s",
            self.name,
            "repair" if repair else "proposal",
            digest,
            re.sub(r"\s+", " ", reply.rationale)[:120],
        )
        # the search's own parameters start where the model set them in CONFIG (if that is a
        # valid point of the space), else at the parent's
        params = dict(parent.params)
        config = config_of(source) or {}
        if ctx.space is not None:
            moved = {**params, **{k: v for k, v in config.items() if k in params}}
            if moved != params and ctx.space.why_invalid(moved) is None:
                params = moved
        child = Genome.of(params, source=source)
        if self._repeated(child, parent_source):
            st.proposed -= 1
            return None
        own = {k: v for k, v in (space_of(source) or {}).items() if k not in params}
        if own and self.tune > 0:
            self._structures[child.id] = own
        if repair:  # its parent is the failed genome it fixes, not the one the search offered
            child = child.with_lineage((parent.id,), self.name, ctx.generation)
        self._mine[child.id] = repair[2] + 1 if repair else 0
        parent_ms = (self._seen.get(parent.id) or {}).get("latency_ms")
        if parent_ms is None and not repair:
            best = ctx.archive.best()
            parent_ms = best.latency_ms if best is not None else None
        self._child_of[child.id] = (which, parent_ms)
        if repair:
            st.repairs += 1
        return child

    @staticmethod
    def _no_answer(reply: LLMReply) -> bool:
        """Whether a call failed for want of an answer (the API down, overloaded, stalled, a
        broken response), not for what the model answered."""
        return bool(reply.error) and not reply.error.startswith(NOT_STARTED) and not reply.output_tokens

    def _call(self, provider: Any, ctx: Context) -> LLMReply:
        """One call, within the run's remaining wall time and cost budget; whatever goes
        wrong is a reply with an error."""
        import inspect

        kwargs: dict[str, Any] = {}
        try:
            takes = set(inspect.signature(provider.complete).parameters)
        except (TypeError, ValueError):
            takes = set()
        left = ctx.seconds_left() if hasattr(ctx, "seconds_left") else None
        if left is not None:
            if "time_left" in takes:
                kwargs["time_left"] = left
            elif left < 1.0:
                return LLMReply(error=f"{NOT_STARTED}no time left in the run's wall-time budget")
        money = ctx.money_left() if hasattr(ctx, "money_left") else None
        if money is not None and "money_left" in takes:
            kwargs["money_left"] = money
        try:
            return provider.complete(self.system(), self.last_prompt, **kwargs)
        except Exception as exc:  # a provider of the user's that raised
            return LLMReply(error=f"provider failed: {type(exc).__name__}: {str(exc)[:200]}")

    def _repeated(self, child: Genome, parent_source: str) -> bool:
        """Whether the answer is a kernel the run already has (an earlier answer, any genome
        measured, or the parent itself, unchanged): dropped, named in the next prompts, and
        the next calls held back (1, 3, 7, ... proposals after 1, 2, 3, ... repeats in a row)."""
        if _normal(self._source(child)) == _normal(parent_source):
            what = "the candidate to improve, unchanged"
        elif child.id in self._answers or child.id in self._seen:
            what = child.id
        else:
            self._answers[child.id] = child.id
            self._in_a_row = 0
            return False
        self._in_a_row += 1
        self._pause = 2**self._in_a_row - 1
        self._repeats.append(what)
        self._drop(
            f"repeated answer: {what} again ({self._in_a_row} in a row; the next {self._pause} proposals make no call)"
        )
        return True

    def _check_arity(self, source: str) -> str | None:
        if self.inputs is None:
            shape = self.problem.shapes[0] if self.problem.shapes else None
            try:
                self.inputs = len(self.problem.make_inputs(dict(shape), 0, "meta")) if shape else -1
            except Exception:
                self.inputs = -1  # the problem cannot make inputs on the meta device: the gate will tell
        return validate_source(source, arity=self.inputs) if self.inputs >= 0 else None
