"""`--traceback`: an error raised by the user's own code (a search file, an evaluator) prints its
full traceback, with the file and line, on stderr; without it the error stays one line, with a
hint that there is more to see. An error evokernel raises by itself (a missing file) gets no hint."""

from __future__ import annotations

from evokernel.cli import main

HINT = "(run with --traceback to see where)"

BROKEN_FILE = """from evokernel.search_spaces import matmul_space


def tiles():
    return 1 / 0


space = matmul_space()
evaluator = tiles()
"""

BROKEN_EVALUATOR = """from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator


def read_counter(genome):
    raise RuntimeError("counter unreadable")


class Counting(ReplayEvaluator):
    def evaluate(self, genomes):
        return [read_counter(g) for g in genomes]


evaluator = Counting(builtin("matmul_bf16_h200_M16_N4096_K4096"))
space = evaluator.space
"""


def _lines(err: str) -> list[str]:
    return err.strip().splitlines()


def test_an_error_in_a_search_file_is_one_line_with_a_hint(tmp_path, capsys):
    target = tmp_path / "broken.py"
    target.write_text(BROKEN_FILE)
    assert main(["search", str(target), "--db", str(tmp_path / "e.db")]) == 2
    [line] = _lines(capsys.readouterr().err)
    assert line.startswith("evokernel: error:") and "ZeroDivisionError: division by zero" in line, line
    assert line.endswith(HINT), line


def test_traceback_shows_where_a_search_file_broke(tmp_path, capsys):
    target = tmp_path / "broken.py"
    target.write_text(BROKEN_FILE)
    for argv in (
        ["search", str(target), "--db", str(tmp_path / "e.db"), "--traceback"],
        ["--traceback", "search", str(target), "--db", str(tmp_path / "e.db")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        lines = _lines(err)
        assert lines[0] == "Traceback (most recent call last):", err
        assert f'File "{target}", line 9, in <module>' in err and f'File "{target}", line 5, in tiles' in err, err
        assert "ZeroDivisionError: division by zero" in err
        assert lines[-1].startswith("evokernel: error:") and HINT not in err, lines[-1]


def test_traceback_shows_where_an_evaluator_broke(tmp_path, capsys):
    target, db = tmp_path / "counting.py", str(tmp_path / "e.db")
    target.write_text(BROKEN_EVALUATOR)
    assert main(["search", str(target), "--db", db, "--budget", "4", "--quiet"]) == 1
    [line] = _lines(capsys.readouterr().err)
    assert "evaluator failed" in line and "counter unreadable" in line and line.endswith(HINT), line
    assert main(["search", str(target), "--db", db, "--budget", "4", "--quiet", "--traceback"]) == 1
    err = capsys.readouterr().err
    assert f'File "{target}", line 6, in read_counter' in err and "RuntimeError: counter unreadable" in err, err
    assert _lines(err)[-1].startswith("evokernel: evaluator failed:")


def test_an_error_of_evokernel_s_own_gets_no_hint(tmp_path, capsys):
    assert main(["search", str(tmp_path / "nope.py")]) == 2
    [line] = _lines(capsys.readouterr().err)
    assert line == f"evokernel: error: no such search file: {tmp_path / 'nope.py'}"
    assert main(["search", str(tmp_path / "nope.py"), "--traceback"]) == 2  # still said, with evokernel's traceback
    assert _lines(capsys.readouterr().err)[-1] == line
