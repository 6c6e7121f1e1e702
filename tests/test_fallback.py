"""The fallback: when no mutator proposes a genome the run has not seen, the search takes a random
unseen point. It is counted (the report's `fallbacks`, the stored summary, the command's report),
recorded as operator 'fallback', never used while a mutator has something new, and off with
`--no-fallback` (`SearchOptions(fallback=False)`)."""

from __future__ import annotations

import json
from collections import Counter

from evokernel import Budget, Search
from evokernel.cli import main
from evokernel.core.genome import Genome
from evokernel.engine.landscape import builtin
from evokernel.engine.options import NOTHING_NEW, SearchOptions
from evokernel.evaluators import ReplayEvaluator
from evokernel.store import SQLiteStore, open_store

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"

SEARCH_FILE = f"""
from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator

evaluator = ReplayEvaluator(builtin({LANDSCAPE!r}))
space = evaluator.space


class Stale:
    name, arity = "stale", 1

    def propose(self, parents, ctx):
        return parents[0]  # seen already: never anything new


mutators = [Stale()]
"""


class Fresh:
    """A user's mutator that always proposes a point it has not proposed before."""

    name, arity = "fresh", 1

    def __init__(self) -> None:
        self.proposed: set[str] = set()

    def propose(self, parents, ctx):
        while True:
            g = Genome.of(ctx.space.sample(ctx.rng))
            if g.id not in self.proposed:
                self.proposed.add(g.id)
                return g


def _operators(store, run_id: str) -> Counter:
    return Counter(e.genome.lineage.operator for e in store.history(run_id) if e.kind == "eval")


def test_a_mutator_with_something_new_gets_no_fallback_proposals():
    ev = ReplayEvaluator(builtin(LANDSCAPE))
    store = SQLiteStore(":memory:")
    report = Search(ev.space, ev, [Fresh()], store=store).run(Budget(evaluations=60), seed=0)
    ops = _operators(store, report.run_id)
    assert report.fallbacks == 0 and set(ops) == {"init", "fresh"}, ops
    assert store.runs()[0].summary["fallbacks"] == 0


def test_fallback_proposals_are_counted_and_reported(tmp_path, capsys):
    target, db = tmp_path / "stale.py", str(tmp_path / "e.db")
    target.write_text(SEARCH_FILE)
    assert main(["search", str(target), "--budget", "30", "--db", db, "--quiet"]) == 0
    out = capsys.readouterr().out
    store = open_store(db, create=False)
    [run] = store.runs()
    ops = _operators(store, run.id)
    n = run.summary["fallbacks"]
    assert n == ops["fallback"] == 30 - ops["init"] and "stale" not in ops and "restart" not in ops, ops
    assert f"{n} proposals of 30 came from the fallback" in " ".join(out.split()), out
    store.close()
    assert main(["search", str(target), "--budget", "30", "--db", db, "--json"]) == 0  # resumed: the same count
    assert json.loads(capsys.readouterr().out)["fallbacks"] == n


def test_no_fallback_takes_none_and_says_why_the_run_stopped(tmp_path, capsys):
    target, db = tmp_path / "stale.py", str(tmp_path / "e.db")
    target.write_text(SEARCH_FILE)
    assert main(["search", str(target), "--budget", "30", "--db", db, "--json", "--no-fallback"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fallbacks"] == 0 and report["stop_reason"] == NOTHING_NEW
    store = open_store(db, create=False)
    assert set(_operators(store, report["run_id"])) == {"init"}
    store.close()


def test_the_fallback_switch_leaves_existing_runs_ids_alone():
    ev = ReplayEvaluator(builtin(LANDSCAPE))
    on, off = Search(ev.space, ev, [Fresh()]), Search(ev.space, ev, [Fresh()], options=SearchOptions(fallback=False))
    assert "fallback" not in on.config(0)["options"] and on.run_id(0) != off.run_id(0)
