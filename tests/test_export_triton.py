"""`evokernel export triton` / `triton-json`: a run's winners as `triton.Config` entries for
`@triton.autotune`, checked by executing the snippet with the real Triton; genomes that are no
Triton config (a source rewrite) refused in one line."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from evokernel.cli import main
from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.store import SQLiteStore, open_store

triton = pytest.importorskip("triton")

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("triton") / "run.db")
    assert main(["replay", LANDSCAPE, "--budget", "8", "--db", db, "--quiet"]) == 0
    return db


def _ranked(db: str) -> tuple[str, list[tuple[float, Genome]]]:
    """The latest run's genomes that never failed, by the median of their readings."""
    store = open_store(db, create=False)
    run = store.runs()[-1]
    readings: dict[str, list[float]] = {}
    genomes: dict[str, Genome] = {}
    failed = set()
    for ev in store.history(run.id):
        genomes[ev.genome.id] = ev.genome
        if ev.result.is_ok:
            readings.setdefault(ev.genome.id, []).append(ev.result.latency_ms)
        else:
            failed.add(ev.genome.id)
    ranked = sorted((statistics.median(v), g) for g, v in readings.items() if g not in failed)
    return run.id, [(ms, genomes[g]) for ms, g in ranked]


def test_triton_snippet_execs_to_the_stored_genomes(replayed: str, tmp_path, capsys) -> None:
    out = tmp_path / "configs.py"
    assert main(["export", "triton", replayed, "--top", "3", "--out", str(out)]) == 0
    text = out.read_text()
    namespace: dict = {}
    exec(compile(text, str(out), "exec"), namespace)  # the real triton
    configs = namespace["configs"]
    run_id, ranked = _ranked(replayed)
    assert len(configs) == 3 and all(isinstance(c, triton.Config) for c in configs)
    for c, (ms, genome) in zip(configs, ranked):
        meta = {k: v for k, v in genome.params.items() if k not in OPTIONS}
        assert c.kwargs == meta
        assert c.num_warps == genome.params["num_warps"]
        assert c.num_stages == genome.params["num_stages"]
        assert f"{ms:.6f} ms" in text and genome.id in text
    assert "H200" in text and run_id in text  # the card and the run the figures come from
    assert "wrote" in capsys.readouterr().err


def test_triton_default_is_the_winner_on_stdout(replayed: str, capsys) -> None:
    assert main(["export", "triton", replayed]) == 0
    namespace: dict = {}
    exec(capsys.readouterr().out, namespace)
    _, ranked = _ranked(replayed)
    (c,) = namespace["configs"]
    assert c.kwargs == {k: v for k, v in ranked[0][1].params.items() if k not in OPTIONS}


def test_triton_json(replayed: str, tmp_path) -> None:
    out = tmp_path / "configs.json"
    assert main(["export", "triton-json", replayed, "--top", "2", "--out", str(out)]) == 0
    entries = json.loads(out.read_text())
    _, ranked = _ranked(replayed)
    assert len(entries) == 2
    for e, (ms, genome) in zip(entries, ranked):
        assert e["kwargs"] == {k: v for k, v in genome.params.items() if k not in OPTIONS}
        assert e["num_warps"] == genome.params["num_warps"]
        assert e["num_stages"] == genome.params["num_stages"]
        assert math.isclose(e["latency_ms"], ms)
        assert e["shape"] == {"K": 4096, "M": 16, "N": 4096}
        assert "H200" in e["device"] and e["genome"] == genome.id
        # the entry rebuilds the triton.Config
        c = triton.Config(e["kwargs"], num_warps=e["num_warps"], num_stages=e["num_stages"])
        assert c.kwargs == e["kwargs"]


def test_a_source_rewrite_genome_is_refused_in_one_line(tmp_path, capsys) -> None:
    db = str(tmp_path / "rewrite.db")
    store = SQLiteStore(db)
    store.begin_run("r1", name="rewrite", archive_key="k", fingerprint="fp", config={}, environment={})
    genome = Genome.of({"BM": 64, "num_warps": 4}, source="@triton.jit\ndef k(): pass\n")
    store.record("r1", 0, genome, "fp", Result.ok(0.5))
    store.close()
    for fmt in ("triton", "triton-json"):
        assert main(["export", fmt, db]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "source" in err and "triton.Config" in err and genome.id in err
