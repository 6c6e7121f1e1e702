"""The SGLang end-to-end benchmark's promotion rule (benchmarks/promotion_cascade.py): which
micro-benchmark winners earn an end-to-end run, and its decisions recorded in the store."""

from __future__ import annotations

import doctest
from pathlib import Path

import promotion_cascade
import pytest
from promotion_cascade import Promotion, record

pytestmark = pytest.mark.bench


def test_the_modules_doctests():
    got = doctest.testmod(promotion_cascade)
    assert got.attempted >= 3 and got.failed == 0


def test_the_promotion_rule_and_its_decisions_are_recorded_in_the_store(tmp_path: Path):
    from evokernel import Budget, Search
    from evokernel.engine.landscape import builtin
    from evokernel.evaluators import ReplayEvaluator
    from evokernel.store import SQLiteStore

    store = SQLiteStore(tmp_path / "s.db")
    ev = ReplayEvaluator(builtin("moe_bf16_h200_qwen3-30b-a3b_M64"))
    ids = [
        Search(ev.space, ev, store=store, name=f"moe-M{m}").run(Budget(evaluations=3), seed=m).run_id for m in (1, 2)
    ]
    rows = [{"run": ids[0], "gain": 1.04, "what": "a"}, {"run": ids[1], "gain": 1.005, "what": "b"}]
    rule = Promotion(min_gain=0.01)
    chosen = rule.select(rows)
    record(store, rows, rule, chosen, baseline="sglang_h200")
    events = {rid: [p for k, p, _ in store.events(rid) if k == "promotion"] for rid in ids}
    assert events[ids[0]][0]["promoted"] and not events[ids[1]][0]["promoted"]
    assert events[ids[1]][0]["rule"] == {"min_gain": 0.01, "max_promoted": 4, "stage": "micro -> end-to-end"}
