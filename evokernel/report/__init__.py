"""See a search: a stored run as one self-contained HTML page, PNG figures and pandas frames.

Needs the `report` extra (`pip install 'evokernel-search[report]'`: plotly, pandas, matplotlib); the
core install does not. From the command line: `evokernel report DB --out report.html` (runs)
and `evokernel report --results benchmarks/results --out bench.html` (benchmark records).

    from evokernel.report import results_frame, write_report
    write_report(store, "report.html", png="figures/")
    frame = results_frame(store, run="0f3bd79d")

Modules: `data` (tables), `figures` (plotly), `html` (the page), `png` (matplotlib),
`bench` (the benchmark view). Importing this package imports none of them until asked.
"""

from __future__ import annotations

from typing import Any

__all__ = ["results_frame", "write_report", "write_bench", "require"]

_EXTRA = ("plotly", "pandas", "matplotlib")


def require() -> None:
    """Raise ConfigError naming the extra when a plotting dependency is missing."""
    import importlib.util

    from evokernel.core.errors import ConfigError

    missing = [m for m in _EXTRA if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"the report needs {', '.join(missing)}: pip install 'evokernel-search[report]'")


def results_frame(store: Any, run: Any = None) -> Any:
    """Every stored evaluation of the runs as a pandas DataFrame (`data.results_frame`)."""
    require()
    from evokernel.report.data import results_frame as frame

    return frame(store, run)


def write_report(store: Any, out: Any, *, runs: Any = None, png: Any = None) -> Any:
    """Write the HTML report of `runs` in `store` to `out` (`html.write_report`)."""
    require()
    from evokernel.report.html import write_report as write

    return write(store, out, runs=runs, png=png)


def write_bench(results: Any, out: Any, *, png: Any = None) -> Any:
    """Write the benchmark view of the records in the folder `results` to `out` (`bench.write_bench`)."""
    require()
    from evokernel.report.bench import write_bench as write

    return write(results, out, png=png)
