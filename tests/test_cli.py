"""The command line, run as a user would: a separate process, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from evokernel.core.genome import Genome
from evokernel.engine.landscape import builtin


def run(cmd: list[str], env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def assert_one_line_error(out: subprocess.CompletedProcess, text: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("evokernel: error:") and text in lines[0], lines[0]


@pytest.mark.slow
def test_replay_json_is_one_object(evokernel_cmd, cli_env):
    out = run(
        evokernel_cmd,
        cli_env,
        "replay",
        builtin("matmul_bf16_h200_M16_N4096_K4096"),
        "--budget",
        "100",
        "--seed",
        "3",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)  # exactly one JSON document on stdout
    # the whole budget, or less where the default early stop ended the run (it says so)
    assert data["evaluations"] == len(data["trace"]) <= 100
    assert data["evaluations"] == 100 or data["stop_reason"] == "no improvement in 8 generations"
    assert data["optimum_latency_ms"] == 0.019488
    assert data["best_latency_ms"] >= data["optimum_latency_ms"]
    assert data["trace"][-1] >= data["optimum_latency_ms"]
    finite = [t for t in data["trace"] if t is not None]
    assert finite == sorted(finite, reverse=True)  # best-so-far never gets worse without noise
    assert set(data["best_params"]) == {"BM", "BN", "BK", "GROUP_M", "num_warps", "num_stages"}


@pytest.mark.slow
def test_replay_accepts_a_shipped_name_noise_and_strategy(evokernel_cmd, cli_env):
    a = json.loads(
        run(
            evokernel_cmd,
            cli_env,
            "replay",
            "matmul_bf16_h200_M256_N4096_K14336",
            "--budget",
            "40",
            "--noise",
            "0.05",
            "--strategy",
            "random",
            "--json",
        ).stdout
    )
    b = json.loads(
        run(
            evokernel_cmd,
            cli_env,
            "replay",
            "matmul_bf16_h200_M256_N4096_K14336",
            "--budget",
            "40",
            "--noise",
            "0.05",
            "--strategy",
            "random",
            "--json",
        ).stdout
    )
    assert a["strategy"] == "random" and a["noise"] == 0.05 and a["trace"] == b["trace"]


@pytest.mark.slow
def test_search_writes_the_store_and_show_reads_it(tmp_path, evokernel_cmd, cli_env):
    root = Path(__file__).resolve().parents[1]
    db = tmp_path / "e.db"
    out = run(evokernel_cmd, cli_env, "search", str(root / "examples" / "matmul.py"), "--budget", "60", "--db", str(db))
    assert out.returncode == 0, out.stderr
    assert "elites of run" in out.stdout and "60 evaluations" in out.stdout
    again = run(
        evokernel_cmd,
        cli_env,
        "search",
        str(root / "examples" / "matmul.py"),
        "--budget",
        "60",
        "--db",
        str(db),
        "--json",
    )
    data = json.loads(again.stdout)
    assert data["resumed"] and data["measured"] == 0 and data["resumed_hits"] == 60
    shown = run(evokernel_cmd, cli_env, "show", str(db))
    assert shown.returncode == 0, shown.stderr
    assert "runs in" in shown.stdout and "128x" in shown.stdout and "history of run" in shown.stdout
    as_json = json.loads(run(evokernel_cmd, cli_env, "show", str(db), "--json").stdout)
    assert as_json["counts"]["evaluations"] == 60 and as_json["elites"]


def test_search_on_a_landscape_csv_uses_the_default_db(tmp_path, small_csv, evokernel_cmd, cli_env):
    out = run(evokernel_cmd, cli_env, "search", str(small_csv), "--budget", "10", "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "evokernel.db").exists()


def test_plugins_lists_the_built_in_registrations(evokernel_cmd, cli_env):
    out = run(evokernel_cmd, cli_env, "plugins")
    assert out.returncode == 0, out.stderr
    for group, name in [
        ("evokernel.mutators", "point"),
        ("evokernel.mutators", "crossover"),
        ("evokernel.mutators", "restart"),
        ("evokernel.evaluators", "replay"),
        ("evokernel.search_spaces", "matmul"),
        ("evokernel.strategies", "evolution"),
    ]:
        assert any(group in line and f" {name} " in line for line in out.stdout.splitlines()), (group, name)


def test_landscapes_lists_the_shipped_sweeps(evokernel_cmd, cli_env):
    out = run(evokernel_cmd, cli_env, "landscapes")
    assert out.returncode == 0 and "matmul_bf16_h200_M16_N4096_K4096: 960 configurations" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["replay", "missing.csv"], "no such file or shipped landscape: missing.csv"),
        (["replay", "{small}", "--budget", "0"], "--budget: must be at least 1"),
        (["replay", "{small}", "--budget", "ten"], "'ten' is not an integer"),
        (["replay", "{small}", "--strategy", "annealing"], "unknown strategy 'annealing'"),
        (["replay", "{small}", "--noise", "-1"], "--noise: must be a finite number >= 0"),
        (["search", "{small}", "--noise", "1e6", "--db", "{db}"], "--noise: must be between 0 and 1"),
        (["search", "{small}", "--seed", "-1", "--db", "{db}"], "--seed: must be a whole number >= 0, got -1"),
        (["replay", "{small}", "--seed", "-3"], "--seed: must be a whole number >= 0, got -3"),
        (["replay", "{bad}"], "missing column 'latency_ms'"),
        (["replay", "{typo}"], "typo.csv:3: column 'b': '2O' is not a number, the column's other cells are"),
        (["search", "{both}", "--db", "{db}"], "both.csv:2: both latency_ms (0.5) and error ('boom') are set"),
        (["search", "{empty_py}", "--db", "{db}"], "defines no `space`"),
        (["search", "{broken_py}", "--db", "{db}"], "ZeroDivisionError: division by zero"),
        (["search", "nope.py"], "no such search file: nope.py"),
        (["search", "{small}", "--db", "{notdb}"], "is not an SQLite database"),
        (["show", "{missing_db}"], "no such database"),
        (["show", "{notdb}"], "is not an SQLite database"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required: command"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(tmp_path, small_csv, evokernel_cmd, cli_env, args, message):
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    (tmp_path / "typo.csv").write_text("a,b,latency_ms,error\n1,10,0.5,\n1,2O,0.6,\n2,30,0.7,\n")
    (tmp_path / "both.csv").write_text("a,latency_ms,error\n1,0.5,boom\n2,0.6,\n")
    (tmp_path / "empty.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("space = 1 / 0\n")
    (tmp_path / "notdb.db").write_text("this is not a database " * 100)
    paths = {
        "small": str(small_csv),
        "bad": str(tmp_path / "bad.csv"),
        "empty_py": str(tmp_path / "empty.py"),
        "broken_py": str(tmp_path / "broken.py"),
        "db": str(tmp_path / "e.db"),
        "notdb": str(tmp_path / "notdb.db"),
        "missing_db": str(tmp_path / "missing.db"),
        "typo": str(tmp_path / "typo.csv"),
        "both": str(tmp_path / "both.csv"),
    }
    out = run(evokernel_cmd, cli_env, *[a.format(**paths) for a in args], cwd=tmp_path)
    assert_one_line_error(out, message)


@pytest.mark.slow
def test_a_broken_evaluator_exits_1_and_the_rerun_resumes(tmp_path, evokernel_cmd, cli_env):
    target = tmp_path / "flaky.py"
    target.write_text(
        "import os\n"
        "from evokernel.evaluators import ReplayEvaluator\n"
        "from evokernel.engine.landscape import builtin\n"
        "class Flaky(ReplayEvaluator):\n"
        "    def _one(self, genome):\n"
        "        if os.environ.get('BREAK') and len(self._draws) >= 20:\n"
        "            raise RuntimeError('driver reset')\n"
        "        self._draws[genome.id] = 1\n"
        "        return super()._one(genome)\n"
        "evaluator = Flaky(builtin('matmul_bf16_h200_M16_N4096_K4096'))\n"
        "space = evaluator.space\n"
    )
    db = str(tmp_path / "e.db")
    out = run(evokernel_cmd, {**cli_env, "BREAK": "1"}, "search", str(target), "--budget", "50", "--db", db, "--quiet")
    assert out.returncode == 1 and "driver reset" in out.stderr and "re-run to resume" in out.stderr
    assert "Traceback" not in out.stderr
    again = run(evokernel_cmd, cli_env, "search", str(target), "--budget", "50", "--db", db, "--json")
    data = json.loads(again.stdout)
    assert data["resumed"] and data["resumed_hits"] == 20 and data["evaluations"] == 50


@pytest.mark.slow
def test_sweep_writes_a_landscape_resumes_and_replay_reads_it(tmp_path, evokernel_cmd, cli_env):
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "sweep.csv"
    first = run(
        evokernel_cmd, cli_env, "sweep", str(root / "examples/matmul.py"), "--out", str(out), "--limit", "20", "--quiet"
    )
    assert first.returncode == 0, first.stderr
    assert "20 measured" in first.stderr and "left (re-run to continue)" in first.stderr
    second = run(
        evokernel_cmd, cli_env, "sweep", str(root / "examples/matmul.py"), "--out", str(out), "--limit", "15", "--quiet"
    )
    assert second.returncode == 0 and "35 of" in second.stderr, second.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "BM,BN,BK,GROUP_M,num_warps,num_stages,latency_ms,error" and len(lines) == 36
    assert len(set(lines[1:])) == 35  # no point measured twice
    replay = run(evokernel_cmd, cli_env, "replay", str(out), "--budget", "10", "--quiet", "--json")
    assert replay.returncode == 0, replay.stderr
    # a file of another space is refused in one line, and left as it was
    other = tmp_path / "other.csv"
    other.write_text("a,b,latency_ms,error\n1,2,0.5,\n")
    bad = run(evokernel_cmd, cli_env, "sweep", str(root / "examples/matmul.py"), "--out", str(other), "--quiet")
    assert_one_line_error(bad, "has columns")
    assert other.read_text() == "a,b,latency_ms,error\n1,2,0.5,\n"


def test_a_search_file_may_seed_its_first_generation_from_a_landscape(tmp_path, evokernel_cmd, cli_env):
    # the attention examples start from the fastest recorded points (landscape_seeds); here a
    # replay of the shipped decode landscape seeded from itself starts at its optimum
    target = tmp_path / "seeded.py"
    target.write_text(
        "from evokernel.evaluators import ReplayEvaluator\n"
        "from evokernel.engine.landscape import builtin, landscape_seeds\n"
        "evaluator = ReplayEvaluator(builtin('attention_decode_bf16_h200_llama3-8b_B1_C32768'))\n"
        "space = evaluator.space\n"
        "seeds = landscape_seeds('attention_decode_bf16_h200_llama3-8b_B1_C32768', space, top=3)\n"
    )
    db = tmp_path / "s.db"
    out = run(evokernel_cmd, cli_env, "search", str(target), "--budget", "8", "--db", str(db), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    from evokernel.engine.landscape import Landscape
    from evokernel.store import SQLiteStore

    optimum = Landscape.load(builtin("attention_decode_bf16_h200_llama3-8b_B1_C32768")).optimum()[1]
    assert data["best"]["latency_ms"] == pytest.approx(optimum)
    [info] = SQLiteStore(db, create=False).runs()
    assert len(info.config["seeds"]) == 3


@pytest.mark.slow
def test_check_takes_the_problems_parameters(tmp_path, evokernel_cmd, cli_env):
    root = Path(__file__).resolve().parents[1]
    problem = root / "examples" / "problems" / "gemm_bf16.py"
    cand = tmp_path / "torch_gemm.py"
    cand.write_text("def kernel(a, b, bias):\n    return (a.float() @ b.float() + bias.float()).to(a.dtype)\n")
    env = {k: v for k, v in cli_env.items() if not k.startswith("EVOKERNEL_GEMM")}
    env["EVOKERNEL_GEMM_EPILOGUE"] = "bias+silu"  # --param overrides it
    params = ["--param", "model=tiny", "--param", "dtype=float32", "--param", "m=8,24", "--param", "epilogue=bias"]
    out = run(evokernel_cmd, env, "check", str(problem), str(cand), "--device", "cpu", "--no-time", "--json", *params)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert json.loads(out.stdout)["accepted"]
    assert_one_line_error(
        run(evokernel_cmd, env, "check", str(problem), str(cand), "--param", "mm=8"),
        "unknown parameter 'mm' (parameters: model: str = 'llama3-8b'",
    )
    assert_one_line_error(
        run(evokernel_cmd, env, "check", str(problem), str(cand), "--param", "m=eight"),
        "--param m='eight': expected tuple[int, ...] (comma-separated)",
    )
    assert_one_line_error(
        run(evokernel_cmd, env, "check", str(problem), str(cand), "--param", "m"), "--param 'm': expected NAME=VALUE"
    )


# -- a database that cannot be created or written ----------------------------------------
# root ignores permission bits, so these use what stops root too: a path under a file, the
# immutable attribute (chattr +i) and a read-only bind mount (in a mount namespace of its own)
def _chattr(flag: str, *paths: Path) -> None:
    import shutil

    if shutil.which("chattr") is None:
        pytest.skip("no chattr here")
    done = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr {flag} is not available here: {done.stderr.strip()}")


def _seed_db(evokernel_cmd, cli_env, db: Path) -> None:
    out = run(
        evokernel_cmd,
        cli_env,
        "search",
        "matmul_bf16_h200_M16_N4096_K4096",
        "--budget",
        "5",
        "--db",
        str(db),
        "--quiet",
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "case, message",
    [
        ("under_a_file", "cannot create database {db}: {dir} is not a directory"),
        ("no_such_folder", "cannot create database {db}: no such directory {dir}"),
        ("immutable_file", "cannot write database {db}: Operation not permitted, e.g. immutable"),
        ("immutable_folder_new_db", "cannot create database {db}: cannot write in {dir} (Operation not permitted"),
        (
            "immutable_folder_old_db",
            "cannot write database {db}: its journal files (-wal, -shm) cannot be created in {dir}",
        ),
    ],
)
@pytest.mark.slow
def test_search_says_why_a_database_cannot_be_written_and_exits_2(tmp_path, evokernel_cmd, cli_env, case, message):
    folder = tmp_path / "runs"
    db = folder / "e.db"
    frozen: list[Path] = []
    if case == "under_a_file":
        folder.write_text("a file, not a folder\n")
    elif case == "immutable_file":
        folder.mkdir()
        _seed_db(evokernel_cmd, cli_env, db)
        frozen = [db]
    elif case.startswith("immutable_folder"):
        folder.mkdir()
        if case.endswith("old_db"):
            _seed_db(evokernel_cmd, cli_env, db)
        frozen = [folder]
    before = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    if frozen:
        _chattr("+i", *frozen)
    try:
        out = run(
            evokernel_cmd,
            cli_env,
            "search",
            "matmul_bf16_h200_M16_N4096_K4096",
            "--budget",
            "5",
            "--db",
            str(db),
            "--quiet",
        )
    finally:
        if frozen:
            _chattr("-i", *frozen)
    assert_one_line_error(out, message.format(db=db, dir=folder))
    assert (sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None) == before  # nothing written


@pytest.mark.slow
def test_search_on_a_read_only_file_system_says_so_and_show_still_reads(tmp_path, evokernel_cmd, cli_env):
    import shlex
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    folder = tmp_path / "ro"
    folder.mkdir()
    _seed_db(evokernel_cmd, cli_env, folder / "e.db")
    ro = shlex.quote(str(folder))
    mount = f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}"
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", mount], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {probe.stderr.strip()}")
    cmd = " ".join(map(shlex.quote, evokernel_cmd))
    search = f"{cmd} search matmul_bf16_h200_M16_N4096_K4096 --budget 5 --quiet --db"
    old_db, new_db = shlex.quote(str(folder / "e.db")), shlex.quote(str(folder / "new.db"))
    script = (
        f"{mount} && {search} {old_db}; echo rc=$? >&2; {search} {new_db}; echo rc=$? >&2; {cmd} show {old_db} --json"
    )
    out = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], env=cli_env, capture_output=True, text=True, timeout=120
    )
    lines = out.stderr.strip().splitlines()
    assert lines == [
        f"evokernel: error: cannot write database {folder}/e.db: Read-only file system",
        "rc=2",
        f"evokernel: error: cannot create database {folder}/new.db: cannot write in {folder} (Read-only file system)",
        "rc=2",
    ], out.stderr
    assert json.loads(out.stdout)["counts"]["evaluations"] == 5  # a reader reads it where it lies


# -- check on the CPU ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="on a GPU check runs the full shapes")
def test_check_on_the_cpu_runs_the_problems_cpu_shapes_and_says_so(evokernel_cmd, cli_env):
    # docs/judge.md's example: the H200 shapes of matmul_bf16 took minutes on a CPU, in silence,
    # and printed CPU timings as if they were figures
    root = Path(__file__).resolve().parents[1]
    args = ["check", str(root / "examples/problems/matmul_bf16.py"), str(root / "tests/corpus/honest/torch_matmul.py")]
    out = run(evokernel_cmd, cli_env, *args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("accepted: M=16,N=256,K=256: ") and "M=2048" not in out.stdout
    assert out.stderr.splitlines() == [
        "check: matmul_bf16 on the CPU: correctness, then timing, at 2 CPU-sized shapes (M=16,N=256,K=256; "
        "M=96,N=160,K=320) and 1 held-out",
        "note: timed on the CPU (wall clock; Triton kernels run in its interpreter): these figures say nothing "
        "about GPU speed",
    ]
    data = json.loads(run(evokernel_cmd, cli_env, *args, "--json").stdout)
    assert data["shapes"] == "cpu" and "say nothing about GPU speed" in data["note"]
    assert [t["shape"] for t in data["timings"]] == ["M=16,N=256,K=256", "M=96,N=160,K=320"]


@pytest.mark.slow
def test_check_of_a_large_problem_on_the_cpu_says_it_may_take_minutes(tmp_path, evokernel_cmd, cli_env):
    problem = tmp_path / "big.py"
    problem.write_text(
        "import torch\n"
        "SHAPES = [{'n': 8}]\n"
        "def flops(shape):\n    return 4e12  # what the problem says one call costs\n"
        "def make_inputs(shape, seed, device='cpu'):\n"
        "    return (torch.randn(shape['n'], generator=torch.Generator().manual_seed(seed)).to(device),)\n"
        "def reference(x):\n    return x * 2\n"
    )
    cand = tmp_path / "cand.py"
    cand.write_text("def kernel(x):\n    return x * 2\n")
    out = run(evokernel_cmd, cli_env, "check", str(problem), str(cand), "--device", "cpu", "--no-time")
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [
        "check: big on the CPU: correctness only (--no-time), at 1 shape (n=8); the problem declares no CPU_SHAPES, "
        "so its full sizes run on the CPU: this can take minutes"
    ]


# -- progress, help and docs/cli.md's synopsis --------------------------------------------
@pytest.mark.slow
def test_the_report_counts_the_generations_that_ran(tmp_path, small_csv, evokernel_cmd, cli_env):
    # generations are numbered from 0: "generation 0 ... generation 24" is 25 generations
    for budget in ("30", "100"):  # 100 exhausts the 42 valid points of the small landscape
        out = run(evokernel_cmd, cli_env, "replay", str(small_csv), "--budget", budget, "--population", "4")
        assert out.returncode == 0, out.stderr
        numbers = [
            int(line.split()[1].rstrip(":")) for line in out.stderr.splitlines() if line.startswith("generation ")
        ]
        assert numbers == list(range(len(numbers))) and len(numbers) > 1
        n = len(numbers)
        assert f" in {n} generations: " in out.stdout, (n, out.stdout[-300:])


_SLOW_SEARCH = """
import time
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin

class Slow(ReplayEvaluator):
    def _one(self, genome):
        time.sleep(0.15)
        return super()._one(genome)

evaluator = Slow(builtin("matmul_bf16_h200_M16_N4096_K4096"))
space = evaluator.space
"""


@pytest.mark.slow
def test_off_a_terminal_a_slow_generation_still_reports_progress(tmp_path, evokernel_cmd, cli_env):
    import re

    # an attention search's generation took 100 s, in silence in a log; the interval is
    # shortened here (15 s by default) so that one generation of 8 evaluations shows it
    (tmp_path / "slow.py").write_text(_SLOW_SEARCH)
    code = "import sys; import evokernel.cli as c; c._Progress.every_s = 0.4; sys.exit(c.main(sys.argv[1:]))"
    out = subprocess.run(
        [
            evokernel_cmd[0],
            "-c",
            code,
            "search",
            str(tmp_path / "slow.py"),
            "--budget",
            "16",
            "--population",
            "8",
            "--db",
            str(tmp_path / "e.db"),
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    beats = [line for line in lines if line.startswith("search: ")]
    assert beats and re.match(
        r"search: \d+/16 evaluations \(generation 0\), best (-|[0-9.]+ ms), \d+ s elapsed$", beats[0]
    ), beats
    assert lines.index(beats[0]) < lines.index(next(x for x in lines if x.startswith("generation 0: ")))


@pytest.mark.slow
def test_on_a_terminal_the_progress_bar_shows_the_time_left(tmp_path, evokernel_cmd, cli_env):
    import os
    import pty
    import re

    (tmp_path / "slow.py").write_text(_SLOW_SEARCH)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*evokernel_cmd, "search", str(tmp_path / "slow.py"), "--budget", "12", "--db", str(tmp_path / "e.db")],
            env={**cli_env, "COLUMNS": "160"},
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=120)
    finally:
        os.close(leader)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))  # no colours
    assert proc.returncode == 0, screen[-2000:]
    assert "12/12" in screen and re.search(r" left \d+:\d\d:\d\d", screen), screen[-2000:]


def test_every_option_has_help_and_strategy_help_lists_the_strategies(evokernel_cmd, cli_env):
    import argparse
    import re

    from evokernel.cli import _build_parser
    from evokernel.engine.strategies import _BUILTIN

    sub = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        bare = [a.dest for a in parser._actions if not a.help]
        assert not bare, (name, bare)
    for command in ("search", "replay"):
        out = run(evokernel_cmd, {**cli_env, "COLUMNS": "2000"}, command, "--help")
        line = next(x for x in out.stdout.splitlines() if x.strip().startswith("--strategy"))
        assert sorted(re.findall(r"[a-z0-9-]+", line.split(":", 1)[1].split(", or")[0])) == sorted(_BUILTIN), line


def test_the_readme_synopsis_names_every_option():
    import argparse
    import re

    from evokernel.cli import _build_parser

    page = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()  # moved from the README
    block = page[page.index("# Command line") :]
    block = block[block.index("```") + 3 :]
    block = block[: block.index("```")]
    synopsis: dict[str, str] = {}
    for line in block.splitlines():
        m = re.match(r"evokernel (\S+)", line)
        if m:
            synopsis[m.group(1)] = line
        elif synopsis:
            synopsis[list(synopsis)[-1]] += line
    sub = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        options = [o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
        missing = [o for o in options if not re.search(re.escape(o) + r"(?![\w-])", synopsis.get(name, ""))]
        assert not missing, (name, missing)


@pytest.mark.slow
def test_replay_says_what_the_model_learned_from_and_holds_the_replayed_landscape_out(evokernel_cmd, cli_env):
    name = "matmul_bf16_h200_M2048_N6144_K4096"
    out = run(evokernel_cmd, cli_env, "replay", name, "--budget", "8", "--json")
    assert out.returncode == 0, out.stderr
    priors = json.loads(out.stdout)["priors"]
    assert priors["held_out"] == [name] and name not in priors["groups"] and priors["own_shape"] == []
    text = run(evokernel_cmd, cli_env, "replay", name, "--budget", "8", "--quiet").stdout
    assert f"held out: {name} (the landscape replayed)" in text and "INCLUDES" not in text
    seen = run(evokernel_cmd, cli_env, "replay", name, "--budget", "8", "--quiet", "--train-on-replayed")
    assert seen.returncode == 0, seen.stderr
    assert f"INCLUDES {name} (the landscape replayed: the model has seen the answer)" in seen.stdout


def _stored_run(path: str, small_csv: Path, budget: int = 40) -> str:
    """A store at `path` (a file or a URL) holding one search of the small landscape; its run id."""
    from evokernel import Budget, Search, open_store
    from evokernel.evaluators import ReplayEvaluator

    ev = ReplayEvaluator(small_csv)
    store = open_store(path)
    try:
        return Search(ev.space, ev, strategy="evolution", store=store).run(Budget(evaluations=budget), seed=0).run_id
    finally:
        store.close()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", "{afile}/x.html"], "cannot write the report {afile}/x.html: {afile} is not a folder"),
        (["--out", "{gone}/r.html"], "cannot write the report {gone}/r.html: {gone} does not exist"),
        (["--out", "{tmp}"], "the report {tmp} is a folder; give a file name"),
        (["--out", "{tmp}/r.html", "--png", "{afile}"], "the PNG folder {afile} is a file, not a folder"),
        (["--out", "{tmp}/r.html", "--png", "/proc/figs"], "cannot make the PNG folder /proc/figs"),
        (["--out", "{tmp}/r.html", "--png", "{gone}/figs"], "cannot make the PNG folder {gone}/figs: {gone} does not"),
    ],
)
def test_report_refuses_an_output_it_cannot_write_in_one_line(
    tmp_path, small_csv, evokernel_cmd, cli_env, args, message
):
    import shutil
    import uuid

    db = str(tmp_path / "r.db")
    _stored_run(db, small_csv, budget=8)
    (tmp_path / "afile").write_text("a file\n")
    # a folder under / that does not exist: the report must not make it (it did, as root)
    paths = {"afile": str(tmp_path / "afile"), "gone": f"/nonexistent-{uuid.uuid4().hex[:8]}", "tmp": str(tmp_path)}
    try:
        out = run(evokernel_cmd, cli_env, "report", db, *[a.format(**paths) for a in args], cwd=tmp_path)
        made = os.path.exists(paths["gone"])
    finally:
        shutil.rmtree(paths["gone"], ignore_errors=True)
    assert_one_line_error(out, message.format(**paths))
    assert not made and not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_report_opens_a_postgresql_store(tmp_path, small_csv, evokernel_cmd, cli_env, pg_url):
    run_id = _stored_run(pg_url, small_csv, budget=12)
    out = run(evokernel_cmd, cli_env, "report", pg_url, "--out", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    assert run_id in (tmp_path / "r.html").read_text()


def test_show_json_gives_each_elite_its_lineage(tmp_path, small_csv, evokernel_cmd, cli_env):
    from evokernel import SQLiteStore

    db = str(tmp_path / "e.db")
    run_id = _stored_run(db, small_csv)
    with SQLiteStore(db) as store:
        first = {}
        for e in store.history(run_id):
            if e.kind == "eval":
                first.setdefault(e.genome.id, e.genome.lineage)
    out = run(evokernel_cmd, cli_env, "show", db, "--json")
    assert out.returncode == 0, out.stderr
    elites = json.loads(out.stdout)["elites"]
    assert elites
    shown = {e["genome"]["lineage"]["operator"] + str(e["genome"]["lineage"]["generation"]) for e in elites}
    for e in elites:
        lin = first[Genome.of(e["genome"]["params"]).id]
        want = {"parents": list(lin.parents), "operator": lin.operator, "generation": lin.generation}
        assert e["genome"]["lineage"] == want, (e, lin)
    assert shown != {"init0"}  # what every elite said before: its lineage was lost on the way


def test_help_states_the_strategy_default_and_version_prints_it(evokernel_cmd, cli_env):
    from importlib.metadata import version

    for command in ("search", "replay"):
        out = run(evokernel_cmd, {**cli_env, "COLUMNS": "2000"}, command, "--help")
        line = next(x for x in out.stdout.splitlines() if x.strip().startswith("--strategy"))
        assert "default: the kernel family's measured best: model for matmul and attention spaces" in line, line
    out = run(evokernel_cmd, cli_env, "--version")
    assert out.returncode == 0 and out.stdout.strip() == f"evokernel {version('evokernel-search')}", out
