"""The gate as a search fitness, on the CPU: Triton through the interpreter, torch on the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from evokernel import Budget, Genome, Search, Status
from evokernel.evaluators import KernelEvaluator
from evokernel.evaluators.kernel import reference_source
from evokernel.judge.gate import GateOptions, Judge
from evokernel.judge.problem import Problem
from evokernel.judge.sandbox import Sandbox, scrubbed_environment
from evokernel.search_spaces import matmul_space
from evokernel.search_spaces.matmul.template import candidate_source

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "tests/corpus/problems/matmul_small.py"
QUICK = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, timing={"max_reps": 5, "min_reps": 3})


def _render(genome: Genome) -> str:
    if genome["BM"] == 256:
        raise ValueError("no 256-row tiles in this test")
    return candidate_source(genome.params)


def test_triton_candidates_through_the_interpreter_and_render_failures():
    space = matmul_space()
    rng = np.random.default_rng(3)
    genomes = [
        space.genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2),
        space.genome(BM=256, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2),
    ]
    genomes += [space.genome(space.sample(rng)) for _ in range(1)]
    ev = KernelEvaluator(MATMUL, _render, device="cpu", options=QUICK, workers=2)
    results = list(ev.evaluate(genomes))
    assert results[0].status is Status.OK and results[0].latency_ms > 0
    assert set(results[0].per_shape) == {"M=48,N=40,K=64", "M=33,N=70,K=32"}
    assert results[1].status is Status.COMPILE_ERROR and "render failed: ValueError" in results[1].error
    assert results[2].status in (Status.OK, Status.COMPILE_ERROR)
    fp = ev.fingerprint()
    assert fp["evaluator"] == "kernel" and fp["device"] == "cpu" and fp["problem"] == "matmul_small"


@pytest.mark.slow
def test_a_search_over_the_gate(tmp_path: Path):
    ev = KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=2)
    from evokernel.engine.search import SearchOptions

    report = Search(matmul_space(), ev, options=SearchOptions(population=3, remeasure=1, report_elites=2)).run(
        Budget(evaluations=5), seed=0
    )
    assert report.evaluations == 5 and report.best is not None
    assert report.statuses.get("ok", 0) >= 1


def test_closing_the_generator_early_leaves_no_candidate_process():
    genomes = [
        matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=g, num_warps=4, num_stages=s)
        for g in (1, 8)
        for s in (2, 3, 4)
    ]
    ev = KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=4)
    gen = ev.evaluate(genomes)
    first = next(gen)
    assert first.status is Status.OK
    gen.close()
    import multiprocessing

    for child in multiprocessing.active_children():
        child.join(5)
    assert not [c for c in multiprocessing.active_children() if c.is_alive()]


def test_the_reference_candidate_is_always_accepted():
    judge = Judge(Problem.load(MATMUL), "cpu", QUICK)
    verdict = judge.check(reference_source(str(MATMUL)))
    assert verdict.accepted, verdict.reason


def test_candidates_see_no_secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-not-leak")
    env = scrubbed_environment()
    assert "ANTHROPIC_API_KEY" not in env and "PATH" in env
    assert all(not any(s in k for s in ("KEY", "TOKEN", "SECRET")) for k in env)


@pytest.mark.slow
def test_a_sandbox_that_never_answers_is_killed_with_its_group(tmp_path: Path):
    """A candidate that hangs at import, with a child: both gone after close(). The child's
    command line names the candidate's folder, so only processes this test started are
    looked for (and killed, should one survive)."""
    source = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', os.getcwd()])\n"
        "open('started', 'w').write(str(p.pid))\n"
        "time.sleep(300)\n"
        "def kernel(*a):\n    return a[0]\n"
    )
    from evokernel.judge.sandbox import SandboxOptions

    # trusted: its folder is the host's (an untrusted candidate's lives on its own scratch file
    # system, out of the judge's sight), so the judge can see that the child was started
    sb = Sandbox(source, device="cpu", input_specs=[], options=SandboxOptions(start_timeout_s=3), trusted=True)
    sb.start()
    outcome = sb.wait_ready()
    assert outcome.kind == "timeout" and "importing" in outcome.error, outcome
    assert (Path(sb.work_dir) / "started").exists()  # the child was started before the timeout
    tag = sb.work_dir.encode()
    sb.close()
    import time

    def naming() -> list[int]:
        pids = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and tag in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
        return pids

    for _ in range(50):
        if not naming():
            break
        time.sleep(0.1)
    left = naming()
    for pid in left:
        os.kill(pid, 9)
    assert not left


def test_a_forged_message_is_a_protocol_failure_not_a_verdict():
    source = (
        "import gc, msgspec\n"
        "def kernel(a, b):\n"
        "    for o in gc.get_objects():\n"
        "        if type(o).__name__ == 'Connection':\n"
        "            o.send_bytes(b'\\x93garbage')\n"
        "            o.send_bytes(msgspec.msgpack.encode({'type': 'done', 'trial': 1, 'ok': True}))\n"
        "    return a @ b\n"
    )
    judge = Judge(Problem.load(MATMUL), "cpu", QUICK)
    verdict = judge.check(source)
    assert not verdict.accepted and "malformed message" in verdict.reason, verdict.reason


def test_a_forged_ok_is_still_judged_on_the_slots():
    # a valid "done, ok" sent before the outputs were copied: the judge reads NaN-poisoned slots
    source = (
        "import gc, msgspec\n"
        "from evokernel.judge._worker import Done\n"
        "calls = [0]\n"
        "def kernel(a, b):\n"
        "    calls[0] += 1\n"
        "    for o in gc.get_objects():\n"
        "        if type(o).__name__ == 'Connection':\n"
        "            o.send_bytes(msgspec.msgpack.encode(Done(trial=calls[0], ok=True)))\n"
        "    return a[:, :1].expand(a.shape[0], b.shape[1]).clone()\n"
    )
    judge = Judge(Problem.load(MATMUL), "cpu", QUICK)
    verdict = judge.check(source)
    assert not verdict.accepted, verdict.reason


@pytest.mark.slow
def test_remeasure_interleaves_and_a_search_ranks_by_it():
    genomes = [matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=s) for s in (2, 3)]
    bad = Genome.of({**genomes[0].params, "num_stages": 4}, source="def kernel(a, b):\n    return a @ b * 1.5\n")
    ev = KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=2)
    results = ev.remeasure(genomes + [bad], rounds=2)
    assert [r.status for r in results] == [Status.OK, Status.OK, Status.INCORRECT]
    # two rounds of interleaved blocks per shape, both merged into the figure
    assert all(t["samples"] >= 2 * 3 for r in results[:2] for t in r.meta["timings"])

    from evokernel.engine.search import SearchOptions
    from evokernel.store import SQLiteStore

    store = SQLiteStore(":memory:")
    report = Search(
        matmul_space(), ev, store=store, options=SearchOptions(population=2, remeasure=1, report_elites=2)
    ).run(3, seed=1)
    remeasured = [e for e in store.history(report.run_id) if e.kind == "remeasure"]
    assert len(remeasured) == len(report.elites) and all(e.seq == 0 for e in remeasured)
    assert report.best.latency_ms == report.best.samples[0]


def test_perturbation_reports_are_validated():
    judge = Judge(Problem.load(MATMUL), "cpu", QUICK)
    shape = judge.tuning[0]
    base = shape.refill_rotation()[0]
    k = judge.problem.perturb
    n0, n1 = base[0].numel(), base[1].numel()
    good = [(0, list(range(0, n0, n0 // k))[:k], [1.0] * k), (1, list(range(0, n1, n1 // k))[:k], [2.0] * k)]
    inputs = shape.perturbed(base, good, k)
    assert not isinstance(inputs, str)
    assert float(inputs[0].view(-1)[0]) == 1.0 and float(inputs[1].view(-1)[0]) == 2.0
    assert shape.perturbed(base, good[:1], k) == "perturbation report misses inputs"
    assert "malformed" in shape.perturbed(base, [good[0], (1, [0] * k, [2.0] * k)], k)
    assert "malformed" in shape.perturbed(base, [good[0], (1, [n1 + 5] + good[1][1][1:], [2.0] * k)], k)
    assert "malformed" in shape.perturbed(base, [good[0], (5, good[1][1], [2.0] * k)], k)


_SLOW = """
import time
import torch

def kernel(a, b):
    time.sleep(0.02)
    return a @ b
"""


def test_racing_times_far_slower_candidates_briefly():
    """Once a shape's best is known, a candidate far slower on it is timed in one short block."""
    problem = Problem.load(MATMUL)
    judge = Judge(problem, "cpu", GateOptions(timing={"min_reps": 12, "max_reps": 12, "rel_ci": 0.0}, race_reps=4))
    fast = (ROOT / "tests/corpus/honest/torch_matmul.py").read_text()
    first = judge.check(fast)
    assert first.accepted and not first.raced
    best = {t.shape: t.median_ms for t in first.timings}
    sb = judge.sandbox(_SLOW)
    try:
        slow = judge.judge(sb, best)
    finally:
        sb.close()
    assert slow.accepted, slow.reason
    assert slow.raced == [t.shape for t in slow.timings]
    assert all(t.samples == 4 for t in slow.timings)  # the short block only
    # it sleeps 20 ms a call: the judge's own clock cannot read less (a ratio to the fast one's
    # figure is no bound: that figure is mostly a pipe round trip, which a busy host stretches)
    assert slow.latency_ms >= 20.0
    sb = judge.sandbox(fast)
    try:
        # a contender (the bar is loose: CPU timings of tiny calls wander): short block, then full timing
        again = judge.judge(sb, {k: 100 * v for k, v in best.items()})
    finally:
        sb.close()
    assert again.accepted and not again.raced and all(t.samples == 16 for t in again.timings)
    assert "raced" in again.to_result().meta


def test_the_evaluator_keeps_the_bar_from_accepted_full_timings():
    genomes = [
        Genome.of({"i": 0}, source=(ROOT / "tests/corpus/honest/torch_matmul.py").read_text()),
        Genome.of({"i": 1}, source=_SLOW),
    ]
    ev = KernelEvaluator(
        MATMUL,
        lambda g: "",
        device="cpu",
        options=GateOptions(timing={"min_reps": 6, "max_reps": 6}, race_reps=3),
        workers=1,
    )
    fast, slow = list(ev.evaluate(genomes))
    assert fast.is_ok and slow.is_ok
    assert not fast.meta["raced"] and slow.meta["raced"]
    assert set(ev.best) == set(fast.per_shape) and ev.best == fast.per_shape


def test_seed_cache_takes_only_helper_modules_and_candidates_copy_it(tmp_path: Path):
    from evokernel.judge._worker import _seed_cache
    from evokernel.judge.toolcache import SeedCache

    work = tmp_path / "cand"
    (work / "triton-cache" / "k1").mkdir(parents=True)
    (work / "triton-cache" / "k1" / "__triton_launcher.cpython-311-x86_64-linux-gnu.so").write_bytes(b"x")
    (work / "triton-cache" / "k2").mkdir()
    (work / "triton-cache" / "k2" / "kernel.cubin").write_bytes(b"y")  # a kernel: never shared
    (work / "triton-cache" / "k3").mkdir()
    (work / "triton-cache" / "k3" / "cuda_utils.so").symlink_to("/etc/passwd")  # not a plain file
    seed = SeedCache()
    assert seed.harvest(str(work)) == 1 and seed.harvest(str(work)) == 0
    assert sorted(os.listdir(seed.path)) == ["k1"]
    assert oct(os.stat(seed.path).st_mode & 0o777) == "0o755"
    other = tmp_path / "other-cache"
    _seed_cache(seed.path, str(other))
    assert (other / "k1" / "__triton_launcher.cpython-311-x86_64-linux-gnu.so").read_bytes() == b"x"
    (other / "k1" / "__triton_launcher.cpython-311-x86_64-linux-gnu.so").write_bytes(b"evil")  # a copy
    assert (Path(seed.path) / "k1" / "__triton_launcher.cpython-311-x86_64-linux-gnu.so").read_bytes() == b"x"
    path = seed.path
    seed.close()
    assert not os.path.exists(path)


def test_only_template_rendered_candidates_are_trusted():
    from evokernel.evaluators.kernel import _source_of

    g = matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2)
    assert _source_of(g, lambda g: candidate_source(g.params))[1] is True
    own = Genome.of({"i": 0}, source="def kernel(a, b):\n    return a @ b\n")
    assert _source_of(own, lambda g: "unused") == (own.source, False)


def test_uid_claims_are_exclusive_released_off_the_judges_path_and_stale_ones_cleaned(tmp_path, monkeypatch):
    """The uid bookkeeping alone (dropping to a uid needs root and a world-readable Python)."""
    import time

    from evokernel.judge import sandbox as sbx
    from evokernel.judge.sandbox import SandboxOptions

    monkeypatch.setattr(sbx, "can_drop_privileges", lambda: True)
    monkeypatch.setattr(sbx, "_UID_LOCKS", str(tmp_path / "uids"))
    killed: list[int] = []
    monkeypatch.setattr(sbx, "_kill_user", killed.append)
    opts = SandboxOptions(uid_base=5000)
    monkeypatch.setattr(sbx, "_UID_RANGE", 2)
    a, b = sbx._claim_uid(opts), sbx._claim_uid(opts)
    assert a is not None and b is not None and a[0] != b[0]
    assert sbx._claim_uid(opts) is None  # both uids of the range are held
    assert killed == []  # fresh lock files: nothing to clean
    work = tmp_path / "work"
    work.mkdir()
    sbx._release_uid(a[0], a[1], str(work))
    # the reaper thread kills, removes the folder, empties the lock file, then closes it (the
    # uid is free only then): wait for the claim to succeed rather than for one of the steps
    again = None
    for _ in range(250):
        again = sbx._claim_uid(opts)
        if again is not None:
            break
        time.sleep(0.02)
    assert again is not None and again[0] == a[0]
    assert killed == [a[0]] and not work.exists()  # cleaned: the claim did not scan again
    # a holder that died (its lock released by the kernel) without cleaning up: the next claim scans
    os.close(b[1])
    stale = sbx._claim_uid(opts)
    assert stale is not None and stale[0] == b[0] and killed == [a[0], b[0]]
    for fd in (again[1], stale[1]):
        os.close(fd)


def test_trusted_candidates_share_a_process_untrusted_ones_never_and_a_crash_ends_it():
    """A process that judged a template-rendered candidate cleanly takes the next one (no new
    process, no new CUDA context); a crash ends it and the next candidate gets a fresh one;
    a candidate carrying its own source always gets a process of its own."""
    sources = {
        0: "def kernel(a, b):\n    return a @ b\n",
        1: "import torch\ndef kernel(a, b):\n    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)\n",
        2: "def kernel(a, b):\n    return (a.double() @ b.double()).to(a.dtype)\n",
        3: "import os\ndef kernel(a, b):\n    os._exit(3)\n",
        4: "def kernel(a, b):\n    return a @ b\n",
        5: "raise ImportError('this template point does not build')\n",
    }
    ev = KernelEvaluator(MATMUL, lambda g: sources[g["i"]], device="cpu", options=QUICK, workers=1)
    order = [0, 1, 5, 2, 3, 4]
    results = list(ev.evaluate([Genome.of({"i": i}) for i in order]))
    assert [r.status for r in results] == [
        Status.OK,
        Status.INCORRECT,
        Status.COMPILE_ERROR,
        Status.OK,
        Status.CRASH,
        Status.OK,
    ]
    assert "does not build" in results[2].error
    fresh = ["r_fork" in r.meta["steps"] for r in results]
    # 0 starts a process; 1 (wrong, not a fault), 5 (did not import) and 2 reuse it; 3 reuses
    # it and kills it; 4 starts anew
    assert fresh == [True, False, False, False, False, True]
    own = [Genome.of({"i": i}, source=sources[0]) for i in (10, 11)]
    assert all("r_fork" in r.meta["steps"] for r in ev.evaluate(own))
    no_reuse = KernelEvaluator(MATMUL, lambda g: sources[0], device="cpu", options=QUICK, workers=1, reuse=0)
    assert all("r_fork" in r.meta["steps"] for r in no_reuse.evaluate([Genome.of({"i": i}) for i in range(2)]))


@pytest.mark.slow
def test_the_judge_takes_the_first_ready_candidate_and_results_leave_in_order():
    """A candidate that is slow to import does not hold up one that is ready behind it."""
    slow = "import time\ntime.sleep(4)\nimport torch\n\n\ndef kernel(a, b):\n    return (a.float() @ b.float()).to(a.dtype)\n"
    fast = "import torch\n\n\ndef kernel(a, b):\n    return (a.float() @ b.float()).to(a.dtype)\n"
    genomes = [Genome.of({"which": "slow"}, source=slow), Genome.of({"which": "fast"}, source=fast)]
    ev = KernelEvaluator(MATMUL, lambda g: "", device="cpu", options=QUICK, workers=2)
    judged: list[str] = []
    real = ev.judge.judge

    def recording(sandbox, best=None):
        judged.append(sandbox.label)
        return real(sandbox, best)

    ev.judge.judge = recording
    results = list(ev.evaluate(genomes))
    assert [r.status for r in results] == [Status.OK, Status.OK]
    assert judged == [genomes[1].id, genomes[0].id]  # the fast one first, then the slow one


@pytest.mark.slow
def test_closing_an_evaluator_frees_its_judge_and_a_later_evaluation_builds_a_new_one():
    """A benchmark judges one problem after another in one process: each judge holds its
    input sets (rotated while timing) in device memory until it is closed (call Z4 held
    95-128 GiB of the H200 by its twelfth MoE job and the next ones ran out of memory)."""
    genome = matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2)
    with KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=1) as ev:
        first = next(iter(ev.evaluate([genome])))
        assert first.status is Status.OK, first.error
        judge = ev.judge
        assert judge.arena.base is not None and judge.tuning
        ev.close()
        assert judge.arena.base is None and not judge.tuning and not judge.heldout and ev._judge is None
        again = next(iter(ev.evaluate([genome])))  # a fresh judge, the same verdict
        assert again.status is Status.OK and ev.judge is not judge
    assert ev._judge is None  # leaving the block closed it


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU (CUDA IPC)")
def test_closing_gives_the_judges_gpu_memory_back_after_its_candidates_were_killed():
    """Call AA: each Mixtral job's judge (13 GiB) stayed allocated after `close()`: its
    candidate processes were killed holding PyTorch's IPC reference on the block, so it sat
    in limbo for good, and the 6th job ran out of memory. Three judges in a row must not
    add up."""
    import torch

    genome = matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=2)
    after = []
    for _ in range(3):
        with KernelEvaluator(
            MATMUL, lambda g: candidate_source(g.params), device="cuda", options=QUICK, workers=1
        ) as ev:
            assert next(iter(ev.evaluate([genome]))).status is Status.OK
            block = ev.judge.arena.base.numel()
            during = torch.cuda.memory_allocated()
        after.append(torch.cuda.memory_allocated())
        assert after[-1] <= during - block  # the judge's block itself was given back
    # (what stays is not the judges': cuBLAS's workspace, 32 MiB, from the references' matmuls)
    assert after[2] == after[1] == after[0]


def test_a_killed_candidates_hold_on_the_judges_block_is_released_once_it_is_gone(monkeypatch):
    """The bookkeeping behind the test above, on any machine: a killed process's counter
    slot is released once the process has exited, and kept while it is still alive."""
    import multiprocessing
    import torch

    import evokernel.judge.sandbox as sandbox

    released: list[tuple[bytes, int]] = []
    monkeypatch.setattr(
        torch.UntypedStorage,
        "_release_ipc_counter_cuda",
        staticmethod(lambda handle, slot: released.append((handle, slot))),
        raising=False,
    )
    # a counter file as PyTorch lays it out: slot 3 still held (1), slot 5 freed by its process (0)
    name = f"torch_evokernel_test_{os.getpid()}"
    header, slots, width = sandbox._COUNTER_FILE
    counters = bytearray(header + slots * width)
    counters[header + 3 * width : header + 4 * width] = (1).to_bytes(width, __import__("sys").byteorder)
    shm = Path("/dev/shm") / name
    shm.write_bytes(bytes(counters))
    handle = f"/{name}".encode()
    done = [multiprocessing.get_context("spawn").Process(target=int) for _ in range(3)]
    for p in done:
        p.start()
        p.join()
    alive = multiprocessing.get_context("spawn").Process(target=__import__("time").sleep, args=(30,))
    alive.start()
    try:
        # (keeper, pidfd of the candidate's process, counter file, slot); the last: a keeper gone,
        # its candidate's process (here `alive`) not yet
        monkeypatch.setattr(
            sandbox,
            "_DEAD_HOLDERS",
            [
                (done[0], None, handle, 3),
                (done[1], None, handle, 5),
                (done[2], None, b"/torch_not_there", 7),
                (alive, None, handle, 4),
                (done[0], os.pidfd_open(alive.pid), handle, 6),
            ],
        )
        assert sandbox.release_dead_holders(wait_s=0.1) == 2
        # slot 5 was at 0 already (released twice, the unsigned counter would wrap); no file: released
        assert released == [(handle, 3), (b"/torch_not_there", 7)] and len(sandbox._DEAD_HOLDERS) == 2
    finally:
        alive.kill()
        alive.join()
        shm.unlink()
    assert sandbox.release_dead_holders(wait_s=5) == 0 and sorted(released[-2:]) == [(handle, 4), (handle, 6)]


@pytest.mark.slow
def test_an_interleaved_round_times_every_candidate_on_the_same_inputs(monkeypatch):
    """Where the work depends on the values (an MoE's routing: 2 to 4 of Mixtral's experts
    at 2 tokens), candidates re-measured against each other must see the same input sets in
    a round; each round draws new ones (call Z4's Mixtral M=2: the same config read 0.287
    and 0.351 ms in two re-measurements, on different routings)."""
    import evokernel.judge.gate as gate

    drawn: list[tuple[str, tuple[int, ...] | None]] = []
    original = gate._Shape.refill_rotation

    def spy(self, seeds=None):
        drawn.append((self.key, tuple(seeds) if seeds is not None else None))
        return original(self, seeds)

    monkeypatch.setattr(gate._Shape, "refill_rotation", spy)
    genomes = [matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=s) for s in (2, 3, 4)]
    ev = KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=2)
    results = ev.remeasure(genomes, rounds=2)
    assert all(r.status is Status.OK for r in results)
    shapes = {key for key, _ in drawn}
    assert len(shapes) == 2 and len(drawn) == 2 * 2 * 3  # shapes x rounds x candidates
    for key in shapes:
        per_shape = [seeds for k, seeds in drawn if k == key]
        rounds = [per_shape[i : i + 3] for i in range(0, len(per_shape), 3)]
        assert all(seeds is not None and len(set(r)) == 1 for r in rounds for seeds in r)  # shared in a round
        assert rounds[0][0] != rounds[1][0]  # new inputs each round


@pytest.mark.slow
def test_a_search_times_its_candidates_on_the_same_sequence_of_inputs(monkeypatch):
    """The n-th timing block of every candidate on a shape uses the same input sets (drawn
    once per judge); a candidate's blocks differ from each other."""
    import evokernel.judge.gate as gate

    drawn: dict[tuple[str, str], list[tuple[int, ...]]] = {}
    original = gate.Judge._time_block

    def spy(self, sandbox, shape, timing, steps=None, seeds=None):
        drawn.setdefault((sandbox.label, shape.key), []).append(tuple(seeds))
        return original(self, sandbox, shape, timing, steps=steps, seeds=seeds)

    monkeypatch.setattr(gate.Judge, "_time_block", spy)
    genomes = [matmul_space().genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=s) for s in (2, 3)]
    ev = KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=1)
    assert all(r.status is Status.OK for r in ev.evaluate(genomes))
    a, b = (genome.id for genome in genomes)
    for key in {k for _, k in drawn}:
        first, second = drawn[(a, key)], drawn[(b, key)]
        n = min(len(first), len(second))
        assert n >= 1 and first[:n] == second[:n]  # the n-th blocks saw the same inputs
        assert len(set(first)) == len(first) and len(set(second)) == len(second)  # new inputs block after block


def test_an_interpreter_that_cannot_run_here_is_said_at_once(monkeypatch):
    """Call BB: on the H200's image (Triton 3.6, numpy 2.4) every CPU candidate failed with a
    runtime error about 0-dimensional arrays; the evaluator now says why before any runs."""
    import evokernel.evaluators.kernel as kernel_module
    from evokernel.judge.env import interpreter_problem
    from evokernel.core.errors import EvaluatorError

    assert interpreter_problem() is None  # this machine's Triton and numpy work together
    monkeypatch.setattr(kernel_module, "interpreter_problem", lambda: "Triton 3.6.0's CPU interpreter cannot run")
    with pytest.raises(EvaluatorError, match="interpreter cannot run"):
        KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=1)
