"""Bad search files and evaluators end in one clear line, never a traceback, a silent exit or a
run of nothing: an evaluator that returns None, a fingerprint that cannot be encoded, a
`sys.exit()` in the file, a file that hangs at import (with --wall-time)."""

from __future__ import annotations

from pathlib import Path

import pytest

import evokernel.cli._common as common
from evokernel.cli import main

HEAD = """from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator
"""

NONE_RESULTS = (
    HEAD
    + """

class Nothing(ReplayEvaluator):
    def evaluate(self, genomes):
        return [None for g in genomes]


evaluator = Nothing(builtin("matmul_bf16_h200_M16_N4096_K4096"))
space = evaluator.space
"""
)

BAD_FINGERPRINT = (
    HEAD
    + """

class BadFingerprint(ReplayEvaluator):
    def fingerprint(self):
        return {"x": object()}


evaluator = BadFingerprint(builtin("matmul_bf16_h200_M16_N4096_K4096"))
space = evaluator.space
"""
)


def _run(tmp_path: Path, source: str, *extra: str) -> int:
    target = tmp_path / "target.py"
    target.write_text(source)
    return main(["search", str(target), "--db", str(tmp_path / "s.db"), "--budget", "16", "--quiet", *extra])


def _ours(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("evokernel:") and "starting run" not in ln]


def test_an_evaluator_returning_none_ends_the_run_in_one_line(tmp_path: Path, capsys) -> None:
    """Was: '0 evaluations in 9 generations', exit 0."""
    assert _run(tmp_path, NONE_RESULTS) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = _ours(err)
    assert "returned NoneType for genome" in line and "not a Result" in line, line


def test_a_fingerprint_that_cannot_be_encoded_is_one_line(tmp_path: Path, capsys) -> None:
    """Was: a traceback ending in 'TypeError: Encoding objects of type object is unsupported', exit 1."""
    assert _run(tmp_path, BAD_FINGERPRINT) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = _ours(err)
    assert "fingerprint() must return JSON-like values" in line, line


def test_sys_exit_in_a_search_file_is_said(tmp_path: Path, capsys) -> None:
    """Was: exit 3 and nothing on stderr."""
    assert _run(tmp_path, "import sys\nsys.exit(3)\n") == 2
    [line] = _ours(capsys.readouterr().err)
    assert "called sys.exit(3) while loading" in line, line


def test_a_search_file_that_hangs_at_import_ends_by_the_wall_time(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: held for good whatever --wall-time said (loading is bounded at no less than
    LOADING_FLOOR_S; 1 s here)."""
    monkeypatch.setattr(common, "LOADING_FLOOR_S", 1.0)
    assert _run(tmp_path, "import time\ntime.sleep(600)\n", "--wall-time", "1") == 2
    [line] = _ours(capsys.readouterr().err)
    assert "still loading after 1 s" in line, line


def test_check_with_a_reference_that_hangs_ends_in_one_line(tmp_path: Path, capsys) -> None:
    """The reference is the user's code, run in the judge's process: one that hangs held
    `evokernel check` for good. It is bounded at 5 call timeouts (here `--timeout 1`: 5 s)."""
    root = Path(__file__).resolve().parents[1] / "tests" / "corpus"
    source = (root / "problems" / "matmul_small.py").read_text()
    hanging = source.replace("    return (a.double() @ b.double()).to(a.dtype)", "    import time\n    time.sleep(600)")
    assert hanging != source
    problem = tmp_path / "hangref.py"
    problem.write_text(hanging)
    candidate = str(root / "honest" / "torch_matmul.py")
    assert main(["check", str(problem), candidate, "--device", "cpu", "--no-time", "--timeout", "1"]) == 2
    [line] = _ours(capsys.readouterr().err)
    assert "the reference did not return within 5 s" in line, line
