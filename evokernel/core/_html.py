"""A small HTML table, escaped, for notebooks' `_repr_html_` (no third-party import).

>>> html_table(["a", "b"], [[1, "<x>"]])
'<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>&lt;x&gt;</td></tr></tbody></table>'
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["html_table", "cell"]


def cell(value: Any) -> str:
    """A value as table text: floats to 6 significant digits, None and NaN as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return " ".join(f"{k}={cell(v)}" for k, v in value.items())
    return str(value)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str = "") -> str:
    """An HTML table of `rows` under `headers`, every cell escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in r) + "</tr>" for r in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
