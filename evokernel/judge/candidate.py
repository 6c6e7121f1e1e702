"""A candidate module's tunables: its `CONFIG` dict and the `SPACE` it declares for them.

A candidate that carries its own source (an LLM rewrite, a hand-written kernel) keeps its
tunable parameters in a top-level literal `CONFIG = {...}`, and may declare the values worth
trying for tunables of its own in `SPACE = {name: [values]}`. The evaluator binds a
genome's parameters into `CONFIG` before the candidate runs (`bind_config`), so the numeric
mutators, which change a genome's parameters and keep its source, tune source kernels as
they tune templates; tunables outside the search's space are tuned from `SPACE`.

>>> src = 'CONFIG = {"BM": 64, "UNROLL": 2}\\nSPACE = {"UNROLL": [1, 2, 4]}\\n\\ndef kernel(a):\\n    return a\\n'
>>> config_of(src), space_of(src)
({'BM': 64, 'UNROLL': 2}, {'UNROLL': [1, 2, 4]})
>>> print(bind_config(src, {"BM": 128, "other": 1}).splitlines()[0])
CONFIG = {"BM": 128, "UNROLL": 2}
>>> why_space_invalid(src, known=["BM"]) is None
True
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import Any

__all__ = ["config_of", "space_of", "bind_config", "why_space_invalid", "check_params", "check_integers"]

Scalar = int | float | bool | str


def _assignment(tree: ast.Module, name: str) -> ast.Assign | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
    return None


def _literal(source: str, name: str) -> Any:
    try:
        node = _assignment(ast.parse(source), name)
        return ast.literal_eval(node.value) if node is not None else None
    except (SyntaxError, ValueError, TypeError):
        return None


def config_of(source: str) -> dict[str, Scalar] | None:
    """The literal `CONFIG` dict of a module's source, or None (none, or not a literal)."""
    value = _literal(source, "CONFIG")
    return value if isinstance(value, dict) and all(isinstance(k, str) for k in value) else None


def space_of(source: str) -> dict[str, list[Scalar]] | None:
    """The literal `SPACE` dict (tunable -> the values to try), or None."""
    value = _literal(source, "SPACE")
    if not isinstance(value, dict):
        return None
    return {k: list(v) for k, v in value.items() if isinstance(k, str) and isinstance(v, (list, tuple))}


def _render(values: Mapping[str, Any]) -> str:
    def one(v: Any) -> str:
        return repr(v) if isinstance(v, (bool, float)) or v is None else json.dumps(v)

    return "{" + ", ".join(f"{json.dumps(k)}: {one(v)}" for k, v in values.items()) + "}"


def bind_config(source: str, params: Mapping[str, Any]) -> str:
    """The source with `CONFIG`'s values replaced by `params`' for the keys both have (keys
    `CONFIG` lacks are ignored; its other keys keep their values). Unchanged when the source
    has no literal `CONFIG` or nothing changes."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    node = _assignment(tree, "CONFIG")
    if node is None or node.end_lineno is None:
        return source
    try:
        config = ast.literal_eval(node.value)
    except (ValueError, TypeError):
        return source
    if not isinstance(config, dict):
        return source
    bound = {k: params.get(k, v) for k, v in config.items()}
    if bound == config:
        return source
    lines = source.splitlines(keepends=True)
    value = node.value
    start = sum(len(ln) for ln in lines[: value.lineno - 1]) + _byte_to_char(lines[value.lineno - 1], value.col_offset)
    end_line = value.end_lineno or value.lineno
    end = sum(len(ln) for ln in lines[: end_line - 1]) + _byte_to_char(lines[end_line - 1], value.end_col_offset or 0)
    return source[:start] + _render(bound) + source[end:]


def _byte_to_char(line: str, offset: int) -> int:
    """ast's column offsets count UTF-8 bytes."""
    return len(line.encode()[:offset].decode(errors="ignore"))


def why_space_invalid(source: str, *, known: Iterable[str] = ()) -> str | None:
    """None if every `CONFIG` key is either `known` (a parameter of the search's space) or
    declared in `SPACE` with its `CONFIG` value among the values to try; else why not."""
    config = config_of(source)
    if config is None:
        return None if _literal(source, "SPACE") is None else "declares SPACE without a literal CONFIG"
    space = space_of(source) or {}
    known = set(known)
    for key, value in config.items():
        if key in known:
            continue
        if key not in space:
            return f"CONFIG key {key!r} is neither a parameter of the search space nor declared in SPACE"
        if not space[key]:
            return f"SPACE[{key!r}] lists no values"
        if value not in space[key]:
            return f"CONFIG[{key!r}] = {value!r} is not among SPACE[{key!r}] = {space[key]!r}"
        if not all(isinstance(v, (int, float, bool, str)) for v in space[key]):
            return f"SPACE[{key!r}] must list numbers, booleans or strings"
    extra = set(space) - set(config)
    if extra:
        return f"SPACE declares {sorted(extra)} that CONFIG does not hold"
    return None


def check_integers(params: Mapping[str, Any]) -> None:
    """ValueError unless every value of a template's params is an integer (not a bool)."""
    bad = {k: v for k, v in params.items() if isinstance(v, bool) or not isinstance(v, Integral)}
    if bad:
        raise ValueError(f"params must be integers, got {bad}")


def check_params(params: Mapping[str, Any], names: Iterable[str], *, optional: Iterable[str] = ()) -> None:
    """ValueError unless `params` holds exactly `names` (and any of `optional`), all integers:
    what every template's `candidate_source` asks of the genome it renders."""
    names, optional = list(names), list(optional)
    if set(params) - set(optional) != set(names):
        extra = f" (and optionally {optional})" if optional else ""
        raise ValueError(f"params must be exactly {sorted(names)}{extra}, got {sorted(params)}")
    check_integers(params)
