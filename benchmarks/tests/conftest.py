"""The benchmark lane (`-m bench`): tests of the benchmark scripts and of the records past
device calls left under benchmarks/results/. Every module here sets `pytestmark =
pytest.mark.bench` (and `slow` where a test is slow), so both lanes of the README's test
command (`pytest -m "not slow"`, `pytest -m slow`) run them, and `pytest -m bench` (or
`pytest benchmarks/tests`) runs them alone.

The benchmarks import each other as sibling modules (`python benchmarks/x.py` puts their
folder first on sys.path); here that folder, and the repository root (for the `tests`
package's helpers), are put on sys.path the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
