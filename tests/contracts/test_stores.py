"""Every store back end passes the same contract suite, through the complete protocol.

`CompleteStore` (evokernel.store) is what the engine and the tools call on a store: runs,
results, re-measurements, elites, events, and the capabilities the tools use (forgetting a
batch, finding runs, the knowledge base, the kernel database, workload profiles). The suite
runs once per back end of `_components.STORES` (SQLite in a file and in memory) and on a
real PostgreSQL (tests/_postgres.py).
"""

from __future__ import annotations

import pytest

from evokernel import Budget, Genome, Result, Search, Status, StoreError
from evokernel.core.archive import Elite
from evokernel.store import CompleteStore, RunInfo, Store
from evokernel.store._base import CAPABILITIES
from evokernel.store.knowledge import Lesson


def begin(store: Store, run_id: str = "run-1", key: str = "key") -> RunInfo:
    return store.begin_run(
        run_id, name="contract", archive_key=key, fingerprint="fp", config={"x": 1}, environment={"gpu": None}
    )


def lesson(i: int, op: str = "matmul", gpu: str = "cpu", created: float = 0.0, text: str = "") -> Lesson:
    return Lesson(
        id=f"lesson-{i}",
        kind="pattern",
        op=op,
        gpu=gpu,
        toolchain={"triton": "3"},
        text=text or f"lesson {i}",
        evidence={"runs": [i]},
        created=created or float(i),
    )


def test_it_is_a_complete_store(store: Store):
    assert isinstance(store, Store) and isinstance(store, CompleteStore)
    for capability in CAPABILITIES:
        assert isinstance(store, capability), capability.__name__
    assert isinstance(store.path, str) and store.path


def test_runs_begin_resume_finish_and_are_found(store: CompleteStore):
    info = begin(store, "abc-1")
    assert isinstance(info, RunInfo) and info.id == "abc-1" and info.status == "running" and not info.resumed
    assert info.config == {"x": 1} and info.archive_key == "key" and info.fingerprint == "fp"
    again = begin(store, "abc-1")
    assert again.resumed and again.seq == info.seq
    begin(store, "abd-2")
    assert [r.id for r in store.runs()] == ["abc-1", "abd-2"]
    store.finish_run("abc-1", "finished", {"best_ms": 0.1})
    [first] = [r for r in store.runs() if r.id == "abc-1"]
    assert first.status == "finished" and first.summary == {"best_ms": 0.1}
    assert store.run("abc").id == "abc-1" and store.run("abd-2").id == "abd-2"
    with pytest.raises(StoreError):
        store.run("ab")  # two runs match
    with pytest.raises(StoreError):
        store.run("zzz")
    assert not store.running_elsewhere("abc-1") and not store.running_elsewhere("abd-2")


def test_results_are_looked_up_in_the_run_then_reused_from_earlier_runs(store: CompleteStore):
    g = Genome.of({"x": 1}, operator="point", parents=("p",), generation=2)
    ok = Result.ok(0.5, noise=0.01, samples=(0.5, 0.51))
    begin(store, "r1")
    assert store.lookup("r1", g.id, "fp") is None
    store.record("r1", 0, g, "fp", ok)
    hit = store.lookup("r1", g.id, "fp")
    assert hit is not None and hit.in_run and hit.result == ok
    begin(store, "r2")
    reused = store.lookup("r2", g.id, "fp")
    assert reused is not None and not reused.in_run and reused.result_id == hit.result_id
    assert store.lookup("r2", g.id, "another-fingerprint") is None
    store.record("r2", 0, g, "fp", reused.result, reuse=reused.result_id)
    assert store.count("r2")["cached"] == 1 and store.count("r2")["evaluations"] == 1
    assert store.count() == {"genomes": 1, "results": 1, "evaluations": 2, "runs": 2}
    [e] = store.history("r1")
    assert e.kind == "eval" and e.seq == 0 and e.genome == g and e.result == ok and not e.cached
    assert e.genome.lineage.operator == "point" and e.genome.lineage.parents == ("p",)


def test_failures_and_sources_round_trip(store: CompleteStore):
    begin(store)
    failed = Result.failed(Status.TIMEOUT, "hung for 60 s")
    g = Genome.of({"x": 2}, source="def kernel(a):\n    return a\n")
    store.record("run-1", 0, g, "fp", failed)
    [e] = store.history("run-1")
    assert e.result.status is Status.TIMEOUT and e.result.error == "hung for 60 s" and not e.result.is_ok
    assert e.genome.source == g.source and e.genome.id == g.id


def test_history_is_in_order(store: CompleteStore):
    begin(store)
    genomes = [Genome.of({"x": i}) for i in range(5)]
    for seq, g in enumerate(genomes):
        store.record("run-1", seq, g, "fp", Result.ok(1.0 + seq))
    assert [e.genome.id for e in store.history("run-1")] == [g.id for g in genomes]


def test_a_batch_can_be_forgotten(store: CompleteStore):
    begin(store)
    a, b = Genome.of({"x": 1}), Genome.of({"x": 2})
    store.record("run-1", 0, a, "fp", Result.ok(1.0))
    store.record("run-1", 1, b, "fp", Result.ok(2.0))
    store.forget_measured("run-1", [b.id])
    assert store.lookup("run-1", b.id, "fp") is None and store.lookup("run-1", a.id, "fp") is not None
    assert [e.genome.id for e in store.history("run-1")] == [a.id]


def test_remeasurements_are_kept_apart(store: CompleteStore):
    begin(store)
    g = Genome.of({"x": 1})
    store.record_remeasurement("run-1", 0, g, "fp", Result.ok(0.5))
    assert store.remeasurement("run-1", g.id, 0).latency_ms == 0.5
    assert store.remeasurement("run-1", g.id, 1) is None
    assert store.lookup("run-1", g.id, "fp") is None or not store.lookup("run-1", g.id, "fp").in_run
    assert store.count("run-1")["remeasurements"] == 1 and store.count("run-1")["evaluations"] == 0


def test_elites_best_per_niche_by_run_key_and_sequence(store: CompleteStore):
    g1, g2 = Genome.of({"x": 1}), Genome.of({"x": 2})
    begin(store, "r1", "k")
    store.save_elites("r1", "k", [Elite(niche="a", genome=g1, latency_ms=0.5)])
    begin(store, "r2", "k")
    store.save_elites(
        "r2", "k", [Elite(niche="a", genome=g2, latency_ms=0.4), Elite(niche="b", genome=g1, latency_ms=0.9)]
    )
    assert [e.latency_ms for e in store.elites(archive_key="k")] == [0.4, 0.9]
    assert [e.latency_ms for e in store.elites(archive_key="k", before_seq=2)] == [0.5]
    assert [e.genome.id for e in store.elites(run_id="r1")] == [g1.id]
    assert store.elites(archive_key="other") == []
    store.save_elites("r2", "k", [])  # nothing to save is not an error


def test_events_are_appended_and_a_keyed_one_is_written_once(store: CompleteStore):
    begin(store)
    for _ in range(3):
        store.log_event("run-1", "generation", {"n": 1}, key="generation:1")
    store.log_event("run-1", "note", {"n": 2, "nested": {"a": [1, 2]}})
    events = store.events("run-1")
    assert [(k, p) for k, p, _ in events] == [("generation", {"n": 1}), ("note", {"n": 2, "nested": {"a": [1, 2]}})]
    assert all(isinstance(t, float) for _, _, t in events)


def test_lessons_are_kept_by_op_and_gpu_oldest_first(store: CompleteStore):
    store.save_lessons([lesson(2), lesson(1), lesson(3, op="softmax"), lesson(4, gpu="h200")])
    assert [le.id for le in store.lessons()] == ["lesson-1", "lesson-2", "lesson-3", "lesson-4"]
    assert [le.id for le in store.lessons(op="matmul", gpu="cpu")] == ["lesson-1", "lesson-2"]
    store.save_lessons([lesson(1, text="said again")])  # the same id replaces
    [one] = [le for le in store.lessons() if le.id == "lesson-1"]
    assert one.text == "said again" and one.toolchain == {"triton": "3"} and one.evidence == {"runs": [1]}


def test_kernels_are_kept_fastest_first(store: CompleteStore):
    for gid, op, gpu, ms in (
        ("g1", "matmul", "cpu", 2.0),
        ("g2", "matmul", "cpu", 1.0),
        ("g3", "softmax", "cpu", 0.5),
        ("g4", "matmul", "h200", 0.1),
    ):
        store.save_kernel({"genome_id": gid, "op": op, "gpu": gpu, "latency_ms": ms, "source": f"# {gid}\n"})
    assert [k["genome_id"] for k in store.kernels(op="matmul", gpu="cpu")] == ["g2", "g1"]
    assert [k["genome_id"] for k in store.kernels()] == ["g4", "g3", "g2", "g1"]
    store.save_kernel({"genome_id": "g1", "op": "matmul", "gpu": "cpu", "latency_ms": 0.05, "source": "# g1\n"})
    assert [k["genome_id"] for k in store.kernels(op="matmul", gpu="cpu")] == ["g1", "g2"]  # replaced, now fastest
    assert store.kernels(op="matmul", gpu="cpu")[0]["source"] == "# g1\n"


def test_profiles_are_kept_and_found_by_name(store: CompleteStore):
    rows = [{"kernel": "mm", "ms": 1.0}]
    first = store.save_profile(
        {"name": "qwen", "rows": rows, "device_name": "cpu", "toolchain": {"torch": "2"}, "total_ms": 1.0}
    )
    second = store.save_profile({"name": "flux", "rows": [], "total_ms": 2.0})
    assert isinstance(first, int) and second > first
    [p] = store.profiles(name="qwen")
    assert p["id"] == first and p["rows"] == rows and p["device"] == "cpu" and p["toolchain"] == {"torch": "2"}
    assert p["summary"]["total_ms"] == 1.0
    assert [q["name"] for q in store.profiles()] == ["qwen", "flux"]


def test_claims_are_held_renewed_released_and_never_of_a_measured_genome(store: CompleteStore):
    begin(store, "r1")
    assert store.claim("r1", ["a", "b"], "fp", "me", 60) == {"a", "b"}
    assert store.claim("r1", ["a"], "fp", "me", 60) == {"a"}  # renewed
    assert store.claim("r1", [], "fp", "me", 60) == set()
    store.release("me", ["a"])
    store.release("me")
    g = Genome.of({"x": 1})
    store.record("r1", 0, g, "fp", Result.ok(1.0))
    assert store.claim("r1", [g.id, "c"], "fp", "me", 60) == {"c"}  # g has a result: nothing to measure
    store.release("me")


def test_a_search_resumes_from_it(store: CompleteStore):
    from evokernel.engine.landscape import builtin
    from evokernel.evaluators import ReplayEvaluator

    ev = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
    first = Search(ev.space, ev, store=store).run(Budget(evaluations=20), seed=3)
    again = Search(ev.space, ev, store=store).run(Budget(evaluations=20), seed=3)
    assert first.measured == 20 and again.measured == 0 and again.best.genome.id == first.best.genome.id
    assert store.count(first.run_id)["evaluations"] == 20


def test_a_file_store_keeps_everything_when_reopened(store_url: str):
    from evokernel.store import open_store

    if store_url == ":memory:":
        pytest.skip("an in-memory store ends with its process")
    store = open_store(store_url)
    begin(store)
    g = Genome.of({"x": 1})
    store.record("run-1", 0, g, "fp", Result.ok(0.5))
    store.save_lessons([lesson(1)])
    store.close()
    reopened = open_store(store_url, create=False)
    try:
        assert reopened.lookup("run-1", g.id, "fp").result.latency_ms == 0.5
        assert [le.id for le in reopened.lessons()] == ["lesson-1"]
    finally:
        reopened.close()
