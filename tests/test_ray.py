"""A search on several GPUs through Ray, on the CPU: a real local Ray cluster with two logical
GPUs (`ray.init(num_gpus=2)`), one actor per GPU, replayed landscapes and the gate in Triton's
interpreter as the evaluators. The cluster is started once for the module and shut down after.

The evaluators below are defined in this module and sent to the actors by value (cloudpickle),
so that the actors need not import the tests package."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from evokernel import Budget, Genome, Search, SearchOptions, SearchSpec, Status, assemble
from evokernel.core.errors import ConfigError
from evokernel.core.evaluator import DescribesEnvironment, HasTransferKey, Remeasures, Restores
from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator
from evokernel.store import SQLiteStore, open_store

ROOT = Path(__file__).resolve().parents[1]
LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"


# -- evaluators the actors build (sent by value) ---------------------------------------------
def _replay(noise: float = 0.0, delay_s: float = 0.0) -> ReplayEvaluator:
    return ReplayEvaluator(builtin(LANDSCAPE), noise=noise, delay_s=delay_s)


class _Stalls(ReplayEvaluator):
    """Stalls on one genome (the first any actor judges after `after` of its own), saying
    which process stalled and on what in `marker`, so the test can kill that actor."""

    def __init__(self, marker: str, after: int) -> None:
        super().__init__(builtin(LANDSCAPE), delay_s=0.01)
        self.marker, self.after, self.judged = marker, after, 0

    def _one(self, genome: Genome) -> Any:
        self.judged += 1
        if self.judged > self.after:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, f"{os.getpid()} {genome.id}".encode())
                os.close(fd)
                time.sleep(120)  # killed before this ends
        return super()._one(genome)


class _OwnGPU(ReplayEvaluator):
    """A replay whose fingerprint names the GPU it sees: two actors disagree."""

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "gpu": f"gpu-{os.environ.get('CUDA_VISIBLE_DEVICES')}"}


class _SideBySide(ReplayEvaluator):
    """A replay that re-measures together, saying which process did it."""

    def remeasure(self, genomes: list[Genome]) -> list[Any]:
        return [r.__class__(**{**_fields(r), "meta": {"pid": os.getpid()}}) for r in self.evaluate(genomes)]


class _BreaksOn(ReplayEvaluator):
    """Judges `after` genomes, then raises on every one after (an evaluator whose GPU broke),
    on the actors whose GPU is in `gpus`."""

    def __init__(self, gpus: str, after: int) -> None:
        super().__init__(builtin(LANDSCAPE), delay_s=0.02)
        self.gpus, self.after, self.judged = gpus, after, 0

    def _one(self, genome: Genome) -> Any:
        if os.environ.get("CUDA_VISIBLE_DEVICES") in self.gpus:
            self.judged += 1
            if self.judged > self.after:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super()._one(genome)


class _RemeasureBreaks(_SideBySide):
    """Re-measures, unless a file `{marker}-{its GPU}` exists: then it raises."""

    def __init__(self, marker: str) -> None:
        super().__init__(builtin(LANDSCAPE))
        self.marker = marker

    def remeasure(self, genomes: list[Genome]) -> list[Any]:
        if os.path.exists(f"{self.marker}-{os.environ.get('CUDA_VISIBLE_DEVICES')}"):
            raise RuntimeError("CUDA error: unspecified launch failure")
        return super().remeasure(genomes)


def _fields(result: Any) -> dict[str, Any]:
    return {f: getattr(result, f) for f in result.__struct_fields__}


def _broken() -> ReplayEvaluator:
    raise RuntimeError("no such GPU kernel library")


# -- the cluster ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    import ray

    # two logical GPUs; a small object store (results are small), so that CI machines can hold it
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


def _ray_evaluator(factory: Any, **kw: Any) -> Any:
    from evokernel.runtime import RayEvaluator

    return RayEvaluator(factory, **kw)


# -- without Ray ------------------------------------------------------------------------------
def test_without_ray_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch):
    from evokernel.runtime import RayEvaluator, fan_out

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'evokernel\[ray\]'"):
        RayEvaluator(_replay)
    with pytest.raises(ConfigError, match=r"pip install 'evokernel\[ray\]'"):
        fan_out([], "unused.db", 10)
    ev = _replay()
    with pytest.raises(ConfigError, match=r"pip install 'evokernel\[ray\]'"):
        assemble(SearchSpec(ev.space, ev, ray="local"))


def test_gpus_without_ray_is_refused_in_one_line(capsys):
    from evokernel.cli import main

    assert main(["search", LANDSCAPE, "--gpus", "2", "--db", ":memory:"]) == 2
    assert "--gpus picks GPUs of a Ray cluster: add --ray" in capsys.readouterr().err
    assert main(["fan-out", LANDSCAPE, "--db", ":memory:"]) == 2
    assert "fan-out searches share a store" in capsys.readouterr().err


def test_chunks_fill_each_actors_compile_pipeline_and_leave_room_to_balance():
    from evokernel.runtime.ray import RayEvaluator, _Actor

    ev = object.__new__(RayEvaluator)  # (no actors needed to size chunks)
    ev._actors = [_Actor(i, None, {"pipeline": 1}) for i in range(2)]
    assert ev._chunk_size(40) == 10  # two chunks per actor
    ev._actors = [_Actor(i, None, {"pipeline": 14}) for i in range(2)]
    assert ev._chunk_size(40) == 14 and ev._chunk_size(16) == 8 and ev._chunk_size(1) == 1


def test_importing_the_runtime_imports_no_ray():
    code = "import sys, evokernel, evokernel.runtime, evokernel.cli; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- with a local cluster -----------------------------------------------------------------------
@pytest.mark.slow
def test_each_actor_has_its_own_gpu_and_the_capabilities_pass_through(ray_cluster: Any):
    serial = _replay()
    with _ray_evaluator(_replay) as ev:
        visible = [a.info["cuda_visible_devices"] for a in ev._actors]
        assert sorted(visible) == ["0", "1"]
        assert ev.fingerprint() == serial.fingerprint() and ev.name == "ray:replay"
        assert ev.transfer_key() == serial.transfer_key()
        assert isinstance(ev, HasTransferKey) and isinstance(ev, Restores) and isinstance(ev, DescribesEnvironment)
        assert not isinstance(ev, Remeasures)  # the replay has none: the engine evaluates again instead
        env = ev.environment()["ray"]
        assert env["gpus"] == 2 and sorted(g for a in env["actors"] for g in a["gpus"]) == ["0", "1"]
    with _ray_evaluator(partial(_SideBySide, builtin(LANDSCAPE)), gpus=1) as ev:
        assert isinstance(ev, Remeasures) and len(ev.actors) == 1
        genomes = [ev_g for ev_g in _genomes(4)]
        results = ev.remeasure(genomes)
        assert len({r.meta["pid"] for r in results}) == 1  # one actor, side by side
        assert [r.latency_ms for r in results] == [next(iter(serial.evaluate([g]))).latency_ms for g in genomes]


def _genomes(n: int) -> list[Genome]:
    import numpy as np

    ev = _replay()
    rng = np.random.default_rng(0)
    out: dict[str, Genome] = {}
    while len(out) < n:
        g = ev.space.genome(ev.space.sample(rng))
        if ev.true_latency(g) < float("inf"):
            out[g.id] = g
    return list(out.values())


@pytest.mark.slow
def test_actors_that_disagree_on_the_fingerprint_are_refused(ray_cluster: Any):
    with pytest.raises(ConfigError, match="evaluators differ") as refused:
        _ray_evaluator(partial(_OwnGPU, builtin(LANDSCAPE)))
    for gpu in "01":
        assert re.search(rf"Ray actor \d \(GPU {gpu} on [^)]+\): gpu='gpu-{gpu}'", str(refused.value)), refused.value
    with pytest.raises(ConfigError, match="the evaluator factory failed in a Ray actor: RuntimeError: no such GPU"):
        _ray_evaluator(_broken)  # Ray does not restart an actor whose constructor fails
    with pytest.raises(ConfigError, match="asked for 3 GPUs; the Ray cluster at .* has 2"):
        _ray_evaluator(_replay, gpus=3)


@pytest.mark.slow
def test_a_seeded_ray_run_is_the_serial_run(ray_cluster: Any):
    """Same run id, same history in the same order, same trace and elites."""
    serial_store, ray_store = SQLiteStore(":memory:"), SQLiteStore(":memory:")
    ev = _replay()
    opts = SearchOptions(population=6, offspring=10, report_elites=3)
    serial = Search(ev.space, ev, options=opts, store=serial_store).run(Budget(evaluations=70), seed=3)
    for chunk in (None, 1):  # two chunks per actor, and one genome at a time
        store = SQLiteStore(":memory:")
        with _ray_evaluator(_replay, chunk=chunk) as rev:
            report = Search(ev.space, rev, options=opts, store=store).run(Budget(evaluations=70), seed=3)
        assert report.run_id == serial.run_id
        assert [e.genome.id for e in store.history(report.run_id)] == [
            e.genome.id for e in serial_store.history(serial.run_id)
        ]
        assert report.trace == serial.trace and report.best_ids == serial.best_ids
        assert [e.genome.id for e in report.elites] == [e.genome.id for e in serial.elites]
        assert report.best is not None and report.best.latency_ms == serial.best.latency_ms
    del ray_store


@pytest.mark.slow
def test_the_api_runs_a_spec_on_ray(ray_cluster: Any):
    ev = _replay()
    search = assemble(SearchSpec(ev.space, ev, population=4, ray="local", gpus=2))
    try:
        assert search.evaluator.name == "ray:replay" and len(search.evaluator.actors) == 2
        report = search.run(Budget(evaluations=30), seed=0)
        assert report.evaluations == 30 and report.best is not None
    finally:
        search.evaluator.close()
    assert ray_cluster.is_initialized()  # the cluster it found running is left running


@pytest.mark.slow
def test_an_actor_killed_mid_run_is_restarted_and_its_genome_is_a_crash(ray_cluster: Any, tmp_path: Path):
    marker = tmp_path / "stalled"
    ev = _replay()
    rev = _ray_evaluator(partial(_Stalls, str(marker), 6), chunk=4)
    pids = {a.info["pid"]: a for a in rev._actors}
    killed: list[Any] = []

    def kill_the_stalled_actor() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        pid = int(marker.read_text().split()[0])
        killed.append(pids[pid])
        ray_cluster.kill(pids[pid].handle, no_restart=False)

    killer = threading.Thread(target=kill_the_stalled_actor, daemon=True)
    killer.start()
    store = SQLiteStore(":memory:")
    try:
        report = Search(ev.space, rev, options=SearchOptions(population=4, offspring=8), store=store).run(
            Budget(evaluations=40), seed=1
        )
        killer.join(5)
        assert killed, "no actor stalled"
        stalled_genome = marker.read_text().split()[1]
        assert report.evaluations == 40 and report.statuses.get("crash") == 1
        [crash] = [e for e in store.history(report.run_id) if e.result.status is Status.CRASH]
        assert crash.genome.id == stalled_genome
        assert f"Ray actor {killed[0].index} (GPU " in crash.result.error and "died while judging" in crash.result.error
        # Ray restarted it: the same actor answers, from a new process
        assert all(a.live for a in rev._actors)  # and it is back in the pool
        info = ray_cluster.get(killed[0].handle.info.remote(), timeout=120)
        assert info["pid"] != int(marker.read_text().split()[0])
    finally:
        rev.close()


@pytest.mark.slow
def test_an_actor_whose_evaluator_breaks_leaves_the_pool_and_the_others_judge_its_genomes(
    ray_cluster: Any, caplog: pytest.LogCaptureFixture
):
    ev = _replay()
    rev = _ray_evaluator(partial(_BreaksOn, "1", 2), chunk=4)
    store = SQLiteStore(":memory:")
    try:
        with caplog.at_level("WARNING", logger="evokernel.runtime.ray"):
            report = Search(ev.space, rev, options=SearchOptions(population=4, offspring=8), store=store).run(
                Budget(evaluations=40), seed=1
            )
        # every genome judged, none lost or failed for it (the other actor took them over):
        # the run is the serial one
        serial_store = SQLiteStore(":memory:")
        serial = Search(ev.space, ev, options=SearchOptions(population=4, offspring=8), store=serial_store).run(
            Budget(evaluations=40), seed=1
        )
        assert report.evaluations == 40 and report.statuses == serial.statuses and "crash" not in report.statuses
        assert [(e.genome.id, e.result.status, e.result.latency_ms) for e in store.history(report.run_id)] == [
            (e.genome.id, e.result.status, e.result.latency_ms) for e in serial_store.history(serial.run_id)
        ]
        [broken] = [a for a in rev._actors if not a.live]
        assert broken.info["cuda_visible_devices"] == "1"
        assert broken.broken == "RuntimeError: CUDA error: an illegal memory access was encountered"
        assert "leaves the pool: its evaluator failed: RuntimeError: CUDA error" in caplog.text
    finally:
        rev.close()


@pytest.mark.slow
def test_when_every_evaluator_breaks_the_results_judged_before_are_handed_over(ray_cluster: Any):
    """Chunks of four: each actor judges two genomes of its first chunk and raises on the third.
    Genomes 0 and 1 come out; 4 and 5 (judged, but after genome 2, which none could judge) are
    counted in the message; both actors' causes are named."""
    from evokernel.core.errors import EvaluatorError

    genomes = _genomes(16)
    serial = _replay()
    with _ray_evaluator(partial(_BreaksOn, "01", 2), chunk=4) as rev:
        got: list[Any] = []
        with pytest.raises(EvaluatorError) as failed:
            for result in rev.evaluate(genomes):
                got.append(result)
        assert [r.latency_ms for r in got] == [serial.true_latency(g) for g in genomes[:2]]
        message = str(failed.value)
        assert "every Ray actor is gone (2 started); none can judge" in message
        for gpu in "01":
            assert re.search(rf"Ray actor \d \(GPU {gpu} on [^)]+\): RuntimeError: CUDA error", message), message
        assert "(2 results judged after it are dropped)" in message


@pytest.mark.slow
def test_a_remeasurement_whose_evaluator_breaks_goes_to_the_next_actor(ray_cluster: Any, tmp_path: Path):
    from evokernel.core.errors import EvaluatorError

    marker = str(tmp_path / "broken")
    genomes = _genomes(3)
    with _ray_evaluator(partial(_RemeasureBreaks, marker)) as rev:
        first, second = rev._actors
        Path(f"{marker}-{first.info['cuda_visible_devices']}").touch()
        results = rev.remeasure(genomes)
        assert {r.meta["pid"] for r in results} == {second.info["pid"]} and len(results) == 3
        assert not first.live and first.broken == "RuntimeError: CUDA error: unspecified launch failure"
        Path(f"{marker}-{second.info['cuda_visible_devices']}").touch()
        with pytest.raises(EvaluatorError, match="failed in remeasure on Ray actor .*; no Ray actor is left"):
            rev.remeasure(genomes)


TARGET = """
import os
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin
from evokernel.search_spaces import matmul_space

class Logged(ReplayEvaluator):
    '''Appends the id of every genome it measures to a log (in whichever actor measures it).'''
    def _one(self, genome):
        result = super()._one(genome)
        with open({log!r}, "a") as f:
            f.write(genome.id + "\\n")
        return result

space = matmul_space()
evaluator = Logged(builtin("matmul_bf16_h200_M8192_N8192_K1024"), delay_s=0.02)
name = "ray-resume-test"
"""


@pytest.mark.slow
def test_a_killed_ray_search_resumes_with_nothing_measured_twice(
    ray_cluster: Any, tmp_path: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    """The CLI with --ray ADDRESS on an SQLite store, its driver killed with SIGKILL mid-run,
    then the same command again."""
    log, db, target = tmp_path / "measured.log", tmp_path / "run.db", tmp_path / "target.py"
    target.write_text(TARGET.format(log=str(log)))
    address = ray_cluster.get_runtime_context().gcs_address
    budget = 80
    cmd = [*evokernel_cmd, "search", str(target), "--ray", address, "--gpus", "2", "--db", str(db)]
    cmd += ["--budget", str(budget), "--patience", "0", "--seed", "5", "--json"]  # (the whole budget)
    proc = subprocess.Popen(cmd, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 180
    lines = lambda: log.read_text().split() if log.exists() else []  # noqa: E731
    while len(lines()) < 25 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, f"the search ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    con = sqlite3.connect(db)
    [(run_id, status)] = con.execute("SELECT id, status FROM runs").fetchall()
    stored_before = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    con.close()
    assert status == "running" and stored_before >= 10

    out = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["resumed"] and report["evaluations"] == budget and report["run_id"] == run_id
    assert report["resumed_hits"] >= stored_before
    store = open_store(str(db))
    counts = store.count(run_id)
    # every genome measured once: one stored measurement per evaluation, none twice
    assert counts["evaluations"] == counts["distinct_genomes"] == counts["measured"] - counts["remeasurements"]
    assert counts["evaluations"] == budget and store.runs()[0].status == "finished"
    store.close()


@pytest.mark.slow
def test_fan_out_runs_each_search_as_a_task_into_one_store(ray_cluster: Any, tmp_path: Path):
    from evokernel.runtime import fan_out

    db = tmp_path / "fan.db"
    names = [
        "matmul_bf16_h200_M16_N4096_K4096",
        "matmul_bf16_h200_M256_N4096_K14336",
        "moe_bf16_h200_qwen3-30b-a3b_M64",
    ]
    specs: list[Any] = []
    for name in names:
        ev = ReplayEvaluator(builtin(name))
        specs.append(SearchSpec(ev.space, ev, name=name, population=4))
    specs.append(partial(_broken))  # building it fails: a failed summary, the others go on
    summaries = fan_out(specs, str(db), Budget(evaluations=20), seed=0)
    assert [s.status for s in summaries] == ["finished"] * 3 + ["failed"]
    assert [s.name for s in summaries[:3]] == names and "no such GPU kernel library" in summaries[3].error
    assert all(s.evaluations == 20 and s.best_ms is not None and s.best_params for s in summaries[:3])
    store = SQLiteStore(db, create=False)
    runs = store.runs()
    assert sorted(r.id for r in runs) == sorted(s.run_id for s in summaries[:3])
    assert all(r.status == "finished" for r in runs)
    store.close()


@pytest.mark.slow
def test_fan_out_from_the_command_line(ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    from evokernel.cli import main

    db = tmp_path / "fan.db"
    rc = main(["fan-out", LANDSCAPE, "moe_bf16_h200_qwen3-30b-a3b_M64", "--budget", "15", "--db", str(db), "--json"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and [x["status"] for x in lines] == ["finished", "finished"]
    assert [x["name"] for x in lines] == [LANDSCAPE, "moe_bf16_h200_qwen3-30b-a3b_M64"]
    rc = main(["fan-out", LANDSCAPE, "no_such_landscape", "--budget", "15", "--db", str(db), "--json"])
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 1 and out[0]["status"] == "finished" and out[1]["status"] == "failed", [o["error"] for o in out]
    assert out[0]["run_id"] == lines[0]["run_id"]  # the same search again: resumed, not a new run


# -- the gate on the CPU, through Ray ----------------------------------------------------------
def _render(genome: Genome) -> str:
    from evokernel.search_spaces.matmul.template import candidate_source

    return candidate_source(genome.params)


def _kernel_evaluator() -> Any:
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.gate import GateOptions

    quick = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, timing={"max_reps": 5, "min_reps": 3})
    return KernelEvaluator(
        ROOT / "tests/corpus/problems/matmul_small.py", _render, device="cpu", options=quick, workers=1
    )


@pytest.mark.slow
def test_kernel_evaluators_on_two_actors_share_the_racing_bar(ray_cluster: Any):
    from evokernel.search_spaces import matmul_space

    serial = _kernel_evaluator()
    with _ray_evaluator(_kernel_evaluator) as ev:
        assert ev.fingerprint() == serial.fingerprint()  # results cache as the serial run's
        assert ev.environment()["sandbox"] == serial.environment()["sandbox"]
        space = matmul_space()
        genomes = [space.genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=s) for s in (2, 3)] + [
            space.genome(BM=32, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2)
        ]
        results = list(ev.evaluate(genomes))
        assert [r.status for r in results] == [Status.OK] * 3
        assert set(ev.best) == {"M=48,N=40,K=64", "M=33,N=70,K=32"}  # the driver's merged bar
        assert all(ev.best[s] <= min(r.per_shape[s] for r in results) * 1.0001 for s in ev.best)


def test_a_ray_address_where_nothing_listens_ends_at_once_in_one_line(capsys):
    """(was: connection warnings every 5 s, still going after 500 s)"""
    from evokernel.cli import main

    t0 = time.monotonic()
    assert main(["search", LANDSCAPE, "--ray", "127.0.0.1:1", "--budget", "4", "--db", ":memory:"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert time.monotonic() - t0 < 3.0
    assert len(err) == 1 and err[0].startswith("evokernel: error: cannot reach the Ray cluster at 127.0.0.1:1"), err


@pytest.mark.slow
def test_a_ray_address_that_is_not_a_ray_cluster_ends_within_the_connect_timeout(
    tmp_path: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    """A port that accepts and says nothing: ray.init would wait for ever; the CLI ends at
    --ray-timeout with one line, no traceback."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        cmd = [*evokernel_cmd, "search", LANDSCAPE, "--ray", address, "--ray-timeout", "4"]
        cmd += ["--budget", "4", "--db", str(tmp_path / "run.db")]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    assert proc.returncode == 2 and took < 30, (proc.returncode, took, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("evokernel:")]
    assert len(ours) == 1, proc.stderr[-2000:]
    assert ours[0].startswith(f"evokernel: error: could not join the Ray cluster at {address} within 4 s: ")


@pytest.mark.slow
def test_a_ray_cluster_whose_auth_token_differs_ends_within_the_connect_timeout_in_one_line(
    tmp_path: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    """(was: a traceback) A real head started with token authentication, joined with another
    token. Ray's own client warns each second while it waits; the command ends at
    --ray-timeout with one line of ours, no traceback."""
    import contextlib
    import shutil
    import socket
    import tempfile

    ray_bin = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in cli_env.items() if not k.startswith("RAY_")}
    head_env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "a" * 32}
    head_cmd = [ray_bin, "start", "--head", f"--port={port}", "--num-cpus=1", "--num-gpus=1"]
    ray_tmp = tempfile.mkdtemp(prefix="ek-ray-")  # (short: Ray's socket paths must fit in 107 bytes)
    head_cmd += ["--include-dashboard=false", f"--temp-dir={ray_tmp}", "--block", "--disable-usage-stats"]
    with (tmp_path / "head.log").open("w") as sink:
        head = subprocess.Popen(head_cmd, env=head_env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and head.poll() is None, (tmp_path / "head.log").read_text()[-2000:]
                time.sleep(0.2)
        cmd = [*evokernel_cmd, "search", LANDSCAPE, "--ray", f"127.0.0.1:{port}", "--ray-timeout", "5"]
        cmd += ["--budget", "4", "--db", str(tmp_path / "run.db")]
        other = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "b" * 32}
        proc = subprocess.run(cmd, env=other, capture_output=True, text=True, timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("evokernel:")]
    assert len(ours) == 1 and "RAY_AUTH_TOKEN" in ours[0], proc.stderr[-2000:]
