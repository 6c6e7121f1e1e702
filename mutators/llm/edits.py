"""What comes back from the model, made safe to run: search/replace edits applied, sources validated."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

from evokernel.judge.candidate import why_space_invalid


def apply_edits(source: str, edits: Sequence[Mapping[str, str]]) -> tuple[str, str | None]:
    r"""`source` with search/replace `edits` applied in order, and None; or the source
    unchanged and why an edit cannot apply (its search text is missing, empty or ambiguous).

    >>> apply_edits("a = 1\nb = 2\n", [{"search": "b = 2", "replace": "b = 3"}])
    ('a = 1\nb = 3\n', None)
    >>> apply_edits("a = 1\n", [{"search": "c = 1", "replace": "c = 2"}])[1]
    'edit 1: its search text is not in the candidate'
    """
    out = source
    for i, edit in enumerate(edits, 1):
        search = edit.get("search", "")
        if not search:
            return source, f"edit {i}: empty search text"
        found = out.count(search)
        if found == 0:
            return source, f"edit {i}: its search text is not in the candidate"
        if found > 1:
            return source, f"edit {i}: its search text occurs {found} times in the candidate"
        out = out.replace(search, edit.get("replace", ""), 1)
    return out, None


def validate_source(
    source: str,
    *,
    arity: int | None = None,
    config_keys: Sequence[str] | None = None,
    known: Sequence[str] | None = None,
) -> str | None:
    """None if `source` may be judged, else why not: it must parse, define a top-level
    `kernel` taking `arity` positional inputs, keep `CONFIG` with (at least) `config_keys`,
    and declare in `SPACE` every new `CONFIG` key that is not a parameter of the search
    (`known`; None: no new keys are checked)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"does not parse: {exc.msg} (line {exc.lineno})"
    kernel = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel"), None)
    if kernel is None:
        return "defines no top-level function `kernel`"
    args = kernel.args
    if arity is not None and not args.vararg:
        positional = len(args.posonlyargs) + len(args.args)
        required = positional - len(args.defaults)
        if not required <= arity <= positional:
            return f"`kernel` takes {positional} inputs, the problem gives {arity}"
    if config_keys:
        config = next(
            (
                n
                for n in tree.body
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG" for t in n.targets)
            ),
            None,
        )
        if config is None or not isinstance(config.value, ast.Dict):
            return "dropped its CONFIG dict (the tunable parameters)"
        keys = {k.value for k in config.value.keys if isinstance(k, ast.Constant)}
        if not set(config_keys) <= keys:
            return f"CONFIG keys dropped: {sorted(set(config_keys) - keys)}"
    if known is not None:
        why = why_space_invalid(source, known=list(known) + list(config_keys or ()))
        if why is not None:
            return why
    return None


def _normal(source: str) -> str:
    """A source without trailing spaces and blank-line differences: two answers equal here
    are the same kernel."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines() if line.strip())


def _config_keys(source: str) -> list[str] | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for n in tree.body:
        if (
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "CONFIG" for t in n.targets)
            and isinstance(n.value, ast.Dict)
        ):
            return [k.value for k in n.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return None
