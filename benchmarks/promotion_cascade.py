"""The promotion cascade: which micro-benchmark winners earn an end-to-end run.

An end-to-end run (SGLang serving, a whole model) costs a minute or more, so only winners
that beat the baseline at the micro-benchmark stage by a margin are promoted, at most
`max_promoted` of them, best gain first. The rule and what it decided are written to the
store as a `promotion` event of each micro run (promoted or not, with its gain), so a later
reader sees why a kernel reached, or did not reach, the end-to-end stage.

The SGLang end-to-end benchmark's own helper (`sglang_e2e_h200.py`), not the library's,
whose promotion rules are `evokernel.Promotion` (a search's fidelity cascade) and
`evokernel.integrations.sglang.promote` (which changes of a package ship).

>>> rule = Promotion(min_gain=0.02, max_promoted=1)
>>> rows = [{"run": "a", "gain": 1.05}, {"run": "b", "gain": 1.01}, {"run": "c", "gain": 1.10}]
>>> [r["run"] for r in rule.select(rows)]
['c']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Promotion", "record"]


@dataclass(frozen=True)
class Promotion:
    """min_gain: the micro-benchmark speedup over the baseline a winner needs, minus one
    (0.01: 1% faster); max_promoted: end-to-end candidates at most; stage: a label."""

    min_gain: float = 0.01
    max_promoted: int = 4
    stage: str = "micro -> end-to-end"

    def select(self, rows: Sequence[Mapping[str, Any]], key: str = "gain") -> list[Mapping[str, Any]]:
        """The rows (each with a `key` speedup over the baseline) that are promoted."""
        ok = [r for r in rows if (r.get(key) or 0.0) >= 1.0 + self.min_gain]
        return sorted(ok, key=lambda r: -r[key])[: self.max_promoted]


def record(
    store: Any,
    rows: Sequence[Mapping[str, Any]],
    rule: Promotion,
    promoted: Sequence[Mapping[str, Any]],
    *,
    baseline: str,
) -> None:
    """A `promotion` event on each row's micro run: the rule, its gain, and the decision."""
    chosen = {id(r) for r in promoted}
    for r in rows:
        if not r.get("run"):
            continue
        store.log_event(
            r["run"],
            "promotion",
            {
                "rule": asdict(rule),
                "baseline": baseline,
                "gain": r.get("gain"),
                "promoted": id(r) in chosen,
                "what": r.get("what", ""),
            },
            key=f"promotion:{rule.stage}",
        )
