"""`evokernel search --mutator NAME`: registered mutators picked by name from the command line;
an unknown name is one line listing the registered ones."""

from __future__ import annotations

import json

from evokernel.cli import main
from evokernel.core.plugins import registered
from evokernel.store import open_store

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"


def test_registered_mutators_are_picked_by_name(tmp_path, capsys):
    db = str(tmp_path / "e.db")
    argv = ["search", LANDSCAPE, "--mutator", "point", "--mutator", "local", "--budget", "24", "--db", db, "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    store = open_store(db, create=False)
    [run] = store.runs()
    assert run.id == report["run_id"]
    assert run.config["mutators"] == ["point", "local"] and run.config["strategy"] == "custom"
    found = {e.genome.lineage.operator for e in store.history(run.id) if e.kind == "eval"}
    assert found & {"point", "local"} and not found & {"optuna-tpe", "cost-model", "crossover"}, found
    store.close()


def test_an_unknown_mutator_is_one_line_naming_the_registered_ones(tmp_path, capsys):
    argv = ["search", LANDSCAPE, "--mutator", "point", "--mutator", "pointy", "--db", str(tmp_path / "e.db")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no mutator named 'pointy'" in err, err
    for name in registered("evokernel.mutators"):
        assert name in err


def test_what_mutator_cannot_go_with_is_refused_in_one_line(tmp_path, capsys):
    db = str(tmp_path / "e.db")
    for extra, said in (
        (["--mutator", "llm"], "add it with --llm"),
        (["--mutator", "point", "--strategy", "random"], "not both"),
        (["--mutator", "point", "--mutator", "point"], "named twice"),
    ):
        assert main(["search", LANDSCAPE, "--db", db, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err, err


def test_fan_out_takes_mutator_and_no_fallback_as_search_does():
    from evokernel.cli import _build_parser
    from evokernel.cli.fanout import Target

    args = _build_parser().parse_args(["fan-out", LANDSCAPE, "--mutator", "point", "--no-fallback"])
    spec = Target(LANDSCAPE, args)()
    assert [m.name for m in spec.mutators] == ["point"] and spec.fallback is False
