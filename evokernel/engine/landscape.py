"""Recorded landscapes: a complete sweep of a kernel's space on one shape, as a CSV.

Columns: the parameters first, then `latency_ms` (empty when the configuration failed)
and `error` (why it failed). The space is inferred from the parameter columns, each
column's distinct values, so any recorded kernel replays without code.

>>> ls = Landscape.load(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> ls.space.size, len(ls), round(ls.optimum()[1], 6)
(960, 960, 0.019488)
"""

from __future__ import annotations

import csv
import hashlib
import math
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from evokernel.core.errors import LandscapeError
from evokernel.core.geometry import Geometry
from evokernel.core.genome import Value
from evokernel.core.space import Boolean, Choice, Constraint, Ordinal, Param, SearchSpace

__all__ = ["Landscape", "Row", "builtin", "builtin_names", "resolve_landscape", "landscape_seeds"]

_RESERVED = ("latency_ms", "error")


class Row(tuple):
    """(latency_ms or None, error text)."""

    @property
    def latency_ms(self) -> float | None:
        return self[0]

    @property
    def error(self) -> str:
        return self[1]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_column(name: str, raw: list[str], lines: list[int] | None = None, where: str = "") -> list[Value]:
    """Type a column as a whole: int if every cell is, else float, else bool, else str. A column
    that mixes numbers with other cells (a typo, an empty cell) is an error naming the first
    cell of the rarer kind, never a column silently turned into text."""
    numeric = [_is_number(x) for x in raw]
    if any(numeric) and not all(numeric):
        odd_is_number = 2 * sum(numeric) < len(raw)  # numbers are the rarer kind
        i = numeric.index(odd_is_number)
        line = f":{lines[i]}" if lines else ""
        if odd_is_number:
            why = f"{raw[i]!r} is a number, the column's other cells are not (e.g. {raw[numeric.index(False)]!r})"
        else:
            shown = repr(raw[i]) if raw[i] else "empty"
            why = f"{shown} is not a number, the column's other cells are (e.g. {raw[numeric.index(True)]})"
        raise LandscapeError(f"{where}{line}: column {name!r}: {why}")
    for conv in (int, float):
        try:
            return [conv(x) for x in raw]
        except ValueError:
            pass
    lowered = [x.strip().lower() for x in raw]
    if all(x in ("true", "false") for x in lowered):
        return [x == "true" for x in lowered]
    return list(raw)


def _infer_param(name: str, values: list[Value]) -> Param:
    distinct = list(dict.fromkeys(values))  # a column has one type (see _parse_column)
    if all(isinstance(v, bool) for v in distinct):
        return Boolean(name) if len(distinct) == 2 else Choice(name, distinct)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct):
        return Ordinal(name, [v for v in distinct if isinstance(v, (int, float))])
    return Choice(name, sorted(distinct, key=str))


class Landscape:
    def __init__(
        self, name: str, params: list[Param], rows: dict[tuple[Value, ...], Row], sha256: str, path: str = ""
    ) -> None:
        self.name = name
        self.path = path
        self.sha256 = sha256
        self.rows = rows
        names = [p.name for p in params]
        constraints = []
        total = math.prod(len(p) for p in params)
        if len(rows) < total:

            def recorded(point: Mapping[str, Value]) -> str | None:
                return None if tuple(point[n] for n in names) in rows else f"not recorded in landscape {name}"

            constraints.append(Constraint(recorded, "recorded"))
        self.space = SearchSpace(params, constraints, name=name, geometry=Geometry.infer(names))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Landscape:
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise LandscapeError(f"no such landscape file: {path}") from None
        except OSError as exc:
            raise LandscapeError(f"cannot read landscape {path}: {exc.strerror or exc}") from None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise LandscapeError(f"{path} is not a UTF-8 text file") from None
        return cls.parse(text, name=path.stem, path=str(path))

    @classmethod
    def parse(cls, text: str, *, name: str = "landscape", path: str = "") -> Landscape:
        where = path or name
        reader = csv.reader(text.splitlines())
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise LandscapeError(f"{where}: empty file, expected a CSV header")
        header = [h.strip() for h in header]
        for col in _RESERVED:
            if col not in header:
                raise LandscapeError(f"{where}: missing column {col!r} (header: {','.join(header)})")
        pnames = [h for h in header if h not in _RESERVED]
        if not pnames:
            raise LandscapeError(f"{where}: no parameter columns before latency_ms and error")
        if len(set(header)) != len(header):
            raise LandscapeError(f"{where}: duplicate column names in header")
        lat_i, err_i = header.index("latency_ms"), header.index("error")
        p_idx = [header.index(n) for n in pnames]
        cells: list[list[str]] = []
        lines: list[int] = []
        outcome: list[Row] = []
        for lineno, rec in enumerate(reader, start=2):
            if not rec or all(not c.strip() for c in rec):
                continue
            if len(rec) != len(header):
                raise LandscapeError(f"{where}:{lineno}: {len(rec)} fields, header has {len(header)}")
            lat_text, err = rec[lat_i].strip(), rec[err_i].strip()
            if lat_text and err:  # a measurement or a failure, never both: which would it be?
                raise LandscapeError(
                    f"{where}:{lineno}: both latency_ms ({lat_text}) and error ({err[:60]!r}) are "
                    "set; a row is either a measurement or a failure"
                )
            if lat_text:
                try:
                    lat = float(lat_text)
                except ValueError:
                    raise LandscapeError(f"{where}:{lineno}: latency_ms {lat_text!r} is not a number") from None
                if not (math.isfinite(lat) and lat > 0):
                    raise LandscapeError(f"{where}:{lineno}: latency_ms {lat_text!r} must be positive")
                outcome.append(Row((lat, err)))
            elif err:
                outcome.append(Row((None, err)))
            else:
                raise LandscapeError(f"{where}:{lineno}: neither latency_ms nor error is set")
            cells.append([rec[i].strip() for i in p_idx])
            lines.append(lineno)
        if not cells:
            raise LandscapeError(f"{where}: no rows after the header")
        columns = [_parse_column(n, [c[j] for c in cells], lines, where) for j, n in enumerate(pnames)]
        params = [_infer_param(n, col) for n, col in zip(pnames, columns)]
        rows: dict[tuple[Value, ...], Row] = {}
        for i, row in enumerate(outcome):
            key = tuple(params[j].values[params[j].index(columns[j][i])] for j in range(len(pnames)))  # type: ignore[index]
            if key in rows:
                shown = ", ".join(f"{n}={v}" for n, v in zip(pnames, key))
                raise LandscapeError(f"{where}: configuration recorded twice ({shown})")
            rows[key] = row
        if all(r.latency_ms is None for r in rows.values()):
            raise LandscapeError(f"{where}: every configuration failed; nothing to search for")
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cls(name, params, rows, digest, path)

    def __len__(self) -> int:
        return len(self.rows)

    def lookup(self, point: Mapping[str, Any]) -> Row | None:
        """The recorded outcome for a configuration, or None if it was not recorded."""
        try:
            key = tuple(self.space.canonical(point)[n] for n in self.space.names)
        except Exception:
            return None
        return self.rows.get(key)

    def optimum(self) -> tuple[dict[str, Value], float]:
        measured = [(r.latency_ms, k) for k, r in self.rows.items() if r.latency_ms is not None]
        latency, key = min(measured, key=lambda lk: lk[0])
        return dict(zip(self.space.names, key)), latency

    def latencies(self) -> list[float]:
        return sorted(r.latency_ms for r in self.rows.values() if r.latency_ms is not None)


def builtin_names() -> list[str]:
    """Landscapes shipped with evokernel (package data)."""
    folder = resources.files("evokernel.landscapes")
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".csv"))


#: earlier names of shipped landscapes -> their names now (the shape moved into trailing
#: `_<Dim><number>` tokens, which the cost model reads as the shape)
RENAMED = {
    "attention_prefill_bf16_h200_llama3-8b_4x2048_causal": "attention_prefill_bf16_h200_causal_Hq32_Hkv8_B4_S2048",
}


def builtin(name: str) -> str:
    """Path of a shipped landscape by name (with or without .csv; an earlier name in
    `RENAMED` still works)."""
    stem = name[:-4] if name.endswith(".csv") else name
    stem = RENAMED.get(stem, stem)
    if stem not in builtin_names():
        raise LandscapeError(f"no built-in landscape {name!r} (shipped: {', '.join(builtin_names())})")
    return str(resources.files("evokernel.landscapes") / f"{stem}.csv")


def resolve_landscape(target: str) -> str:
    """A path to an existing CSV, else a built-in landscape name."""
    if os.path.exists(target) or target.endswith(".csv") and os.sep in target:
        return target
    stem = target[:-4] if target.endswith(".csv") else target
    if RENAMED.get(stem, stem) in builtin_names():
        return builtin(target)
    return target


def landscape_seeds(
    target: str | os.PathLike[str], space: Any, *, top: int = 6, fill: Mapping[str, Value] | None = None
) -> list[dict[str, Value]]:
    """The `top` fastest points of a recorded landscape (a CSV path or a shipped landscape's
    name) that are valid in `space`, as `Search(seeds=...)`: what a sweep of a neighbouring
    shape found starts the search there (issue 7: a partial prefill sweep held a point 13%
    faster than a budget-16 unseeded search's winner). A missing landscape gives no seeds.

    `fill` gives the genes a landscape of a smaller space lacks (the plain matmul sweeps have
    no split-K, TMA, ... genes: filled with the GEMM template's defaults, they are points of
    `gemm_space`); a landscape gene `space` lacks makes its points not seeds."""
    path = resolve_landscape(str(target))
    if not os.path.exists(path):
        return []
    land = Landscape.load(path)
    names = list(land.space.names)
    ranked = sorted(
        ((row.latency_ms, key) for key, row in land.rows.items() if row.latency_ms is not None), key=lambda t: t[0]
    )
    seeds: list[dict[str, Value]] = []
    for _, key in ranked:
        point = {**(fill or {}), **dict(zip(names, key))}
        if set(point) == set(space.names) and space.is_valid(point):
            seeds.append(point)
        if len(seeds) == top:
            break
    return seeds
