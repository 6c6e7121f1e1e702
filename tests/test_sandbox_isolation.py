"""The sandbox's namespaces, capabilities, seccomp filter and limits (evokernel.judge._isolation),
set up for real in processes forked here; and the judge's fallback where they are refused.

What a candidate can do with them is in tests/test_gate.py (the corpus's probes, judged by
the real CLI); here, the pieces one at a time, and the line the CLI prints when one is off.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from evokernel.judge import _isolation
from evokernel.judge.sandbox import SandboxOptions, SandboxUnavailable, isolation_report

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "tests" / "corpus" / "problems"
HONEST = ROOT / "tests" / "corpus" / "honest" / "torch_matmul.py"
REPORT = isolation_report(SandboxOptions(isolation="auto"))
needs_all = pytest.mark.skipif(bool(REPORT.off), reason=REPORT.describe())


def _in_sandbox(body, work: str, readable: tuple[str, ...] | None = None) -> dict:
    """Run `body(work)` in pid 1 of a new sandbox (every protection; `readable` folders bound
    back read-only, by default the judge's import path under /tmp as a Sandbox binds it),
    forked from here; returns what it returned (a JSON-able dict), or {"error": ...}."""
    if readable is None:
        from evokernel.judge.sandbox import _hidden_import_path

        readable = tuple(_hidden_import_path())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            _isolation.enter_namespaces(_isolation.PROTECTIONS)
            inner = os.fork()
            if inner == 0:
                try:
                    _isolation.die_with_parent()
                    _isolation.confine(_isolation.Plan(work_dir=work, readable=readable))
                    out = body(work)
                except BaseException as exc:
                    out = {"error": f"{type(exc).__name__}: {exc}"}
                os.write(w, json.dumps(out).encode())
                os._exit(0)
            os.waitpid(inner, 0)
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data or b'{"error": "no answer"}')


def _surroundings(work: str) -> dict:
    judge = int(os.environ["EVOKERNEL_TEST_JUDGE"])
    out: dict = {"pid": os.getpid(), "cwd": os.getcwd(), "procs": sorted(p for p in os.listdir("/proc") if p.isdigit())}
    writes = {}
    for path in (
        str(ROOT / "evokernel-sandbox-probe"),
        "/root/evokernel-sandbox-probe",
        "/tmp/probe",
        "/dev/shm/probe",
        os.path.join(work, "probe"),
    ):
        try:
            with open(path, "w") as f:
                f.write("x")
            writes[path] = "written"
        except OSError as exc:
            writes[path] = errno.errorcode[exc.errno]
    out["writes"] = writes
    try:
        os.kill(judge, 0)
        out["signal_judge"] = "sent"
    except OSError as exc:
        out["signal_judge"] = errno.errorcode[exc.errno]
    libc = ctypes.CDLL(None, use_errno=True)
    out["ptrace"] = libc.ptrace(16, 1, 0, 0) == 0 or errno.errorcode[ctypes.get_errno()]  # PTRACE_ATTACH
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    out["status"] = {k: status[k].strip() for k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")}
    out["net"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
    import socket

    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
        out["connect"] = "connected"
    except OSError as exc:
        out["connect"] = errno.errorcode.get(exc.errno or 0, str(exc))
    return out


@needs_all
def test_pid_1_of_its_own_namespaces_sees_and_writes_nothing_of_the_judge(monkeypatch) -> None:
    monkeypatch.setenv("EVOKERNEL_TEST_JUDGE", str(os.getpid()))
    work = tempfile.mkdtemp(prefix="evokernel-candidate-")
    try:
        got = _in_sandbox(_surroundings, work)
        assert "error" not in got, got
        assert got["pid"] == 1 and got["procs"] == ["1"] and got["cwd"] == work
        # (a checkout under /tmp, as a CI clone, is not even there: the private /tmp hides it)
        root_write = got["writes"].pop(str(ROOT / "evokernel-sandbox-probe"))
        assert root_write == "EROFS" or root_write == "ENOENT" and str(ROOT).startswith(tempfile.gettempdir())
        assert got["writes"] == {
            "/root/evokernel-sandbox-probe": "EROFS",
            "/tmp/probe": "written",
            "/dev/shm/probe": "written",
            os.path.join(work, "probe"): "written",
        }, got["writes"]
        assert got["signal_judge"] == "ESRCH" and got["ptrace"] == "EPERM"
        assert got["status"] == {
            "CapEff": "0000000000000000",
            "CapBnd": "0000000000000000",
            "NoNewPrivs": "1",
            "Seccomp": "2",
        }
        assert got["connect"] in ("ENETUNREACH", "EPERM", "EACCES")
        # its folder is the judge's folder: what it wrote there is here; its /tmp was its own
        assert os.listdir(work) == ["probe"] and not os.path.exists("/tmp/probe")
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _descendants_die(work: str) -> dict:
    """Start a sleeper that leaves every group and session (setsid after a double fork)."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", work])
        os._exit(0)
    import time

    time.sleep(0.5)
    return {"ok": True}


@needs_all
def test_the_namespace_dies_with_its_pid_1() -> None:
    work = tempfile.mkdtemp(prefix="evokernel-candidate-")
    try:
        assert _in_sandbox(_descendants_die, work) == {"ok": True}
        # pid 1 returned and exited: the kernel killed its namespace, the sleeper with it
        import time

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _naming(work):
            time.sleep(0.1)
        left = _naming(work)
        for pid in left:  # started by this test alone (its command line names this test's folder)
            os.kill(pid, signal.SIGKILL)
        assert not left
    finally:
        os.rmdir(work)


def _naming(text: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.append(int(p))
            except OSError:
                continue
    return out


def test_seccomp_program_shape() -> None:
    """Arch check first (a foreign architecture is killed), then the refused calls answer EPERM."""
    for arch in ("x86_64", "aarch64"):
        prog = _isolation._filter(_isolation.REFUSED if arch == _isolation._ARCH else ["ptrace"], arch)
        ins = [struct.unpack("HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
        assert ins[0] == (0x20, 0, 0, 4) and ins[1][3] == _isolation._AUDIT_ARCH[arch]
        assert 1 + 1 + ins[1][2] == len(ins) - 2 and ins[-2] == (0x06, 0, 0, 0x80000000)  # foreign: killed
        assert ins[-1] == (0x06, 0, 0, 0x00050000 | errno.EPERM)
        clone, clone3 = _isolation._NR[arch]["clone"], _isolation._NR[arch]["clone3"]
        for i, (code, jt, jf, k) in enumerate(ins):
            target = ins[i + 1 + jt] if code in (0x15, 0x35, 0x45) else None
            if code in (0x15, 0x35) and i > 1 and k not in (clone, clone3):
                assert i + 1 + jt == len(ins) - 1  # every match jumps to the EPERM return
            elif code == 0x15 and k == clone:  # clone: its flags (args[0]) read, a namespace flag refused
                assert target == (0x20, 0, 0, 16) and ins[i + 2 + jt][0] == 0x45
            elif code == 0x15 and k == clone3:  # clone3: ENOSYS (the C library falls back to clone)
                assert target == (0x06, 0, 0, 0x00050000 | errno.ENOSYS)
            elif code == 0x45:
                assert k == 0x7E020000 and i + 1 + jt == len(ins) - 1 and ins[i + 1 + jf] == (0x06, 0, 0, 0x7FFF0000)


def _signals_outside(_: str) -> dict:
    out = {}
    for name, pid in (("parent", os.getppid()), ("self", os.getpid()), ("group", 0), ("everyone", -1)):
        try:
            os.kill(pid, 0)
            out[name] = "sent"
        except OSError as exc:
            out[name] = errno.errorcode[exc.errno]
    try:
        os.close(os.pidfd_open(os.getppid()))
        out["pidfd"] = "opened"
    except OSError as exc:
        out["pidfd"] = errno.errorcode[exc.errno]
    return out


def test_without_a_pid_namespace_seccomp_refuses_signals_but_to_itself() -> None:
    """The fallback for a judge in sight (a GPU path that needs no PID namespace)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _isolation._install_filter(_isolation.REFUSED, own_pid=os.getpid())
            os.write(w, json.dumps(_signals_outside("")).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = os.read(r, 4096)
    os.close(r)
    os.waitpid(pid, 0)
    assert json.loads(data) == {
        "parent": "EPERM",
        "self": "sent",
        "group": "EPERM",
        "everyone": "EPERM",
        "pidfd": "EPERM",
    }


def _refused(_: str) -> dict:
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}
    for name, call in (
        ("ptrace", lambda: libc.ptrace(0, 0, 0, 0)),  # PTRACE_TRACEME
        ("unshare", lambda: libc.unshare(0x10000000)),
        ("process_vm_readv", lambda: libc.process_vm_readv(1, None, 0, None, 0, 0)),
        # clone with a namespace flag (CLONE_NEWUSER | SIGCHLD); clone3, whose flags no filter can read
        ("clone_newuser", lambda: libc.syscall(_isolation._NR[_isolation._ARCH]["clone"], 0x10000000 | 17, 0, 0, 0, 0)),
        ("clone3", lambda: libc.syscall(_isolation._NR[_isolation._ARCH]["clone3"], None, 0)),
    ):
        out[name] = errno.errorcode[ctypes.get_errno()] if call() < 0 else "allowed"
    child = os.fork()  # a plain fork (clone without namespace flags) still works
    if child == 0:
        os._exit(7)
    out["fork"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    return out


@needs_all
def test_seccomp_refuses_tracing_and_namespaces() -> None:
    work = tempfile.mkdtemp(prefix="evokernel-candidate-")
    try:
        assert _in_sandbox(_refused, work) == {
            "ptrace": "EPERM",
            "unshare": "EPERM",
            "process_vm_readv": "EPERM",
            "clone_newuser": "EPERM",
            "clone3": "ENOSYS",
            "fork": 7,
        }
    finally:
        os.rmdir(work)


def test_options_and_environment_choose_the_protections(monkeypatch) -> None:
    assert isolation_report(SandboxOptions(isolation="off")).on == frozenset()
    report = isolation_report(SandboxOptions(without=("pid", "net")))
    assert {"pid", "net"} <= set(report.off) and report.off["pid"] == "switched off"
    monkeypatch.setenv("EVOKERNEL_SANDBOX_WITHOUT", "user")
    assert isolation_report(SandboxOptions()).off.get("user") == "switched off"
    monkeypatch.setenv("EVOKERNEL_SANDBOX", "sometimes")
    with pytest.raises(SandboxUnavailable, match="expected auto, require or off"):
        isolation_report(SandboxOptions())
    with pytest.raises(SandboxUnavailable, match="unknown protections"):
        isolation_report(SandboxOptions(isolation="auto", without=("walls",)))


#: the CLI started under a seccomp filter that refuses unshare, as some container runtimes do
_NO_NAMESPACES = (
    "import os, sys; from evokernel.judge._isolation import _install_filter; _install_filter(['unshare', "
    "'setns']); os.execv(sys.executable, [sys.executable, '-m', 'evokernel.cli', *sys.argv[1:]])"
)


def _without_namespaces(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", _NO_NAMESPACES, *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOKERNEL_SANDBOX")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


def _check_without_namespaces(*extra: str) -> subprocess.CompletedProcess:
    return _without_namespaces(
        "check", str(PROBLEMS / "matmul_small.py"), str(HONEST), "--device", "cpu", "--no-time", "--json", *extra
    )


@pytest.mark.slow
@pytest.mark.skipif(_isolation._ARCH not in _isolation._NR, reason="no seccomp table for this architecture")
def test_where_namespaces_are_refused_the_judge_says_which_protections_are_off() -> None:
    run = _check_without_namespaces()
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["accepted"] and {"user", "pid", "mount", "net", "ipc"} <= set(data["sandbox"]["off"])
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("evokernel: sandbox:")]
    assert len(lines) == 1 and "pid off" in lines[0] and "user off" in lines[0], run.stderr
    required = _check_without_namespaces("--require-sandbox")
    assert required.returncode == 2 and "the sandbox is required" in required.stderr, required.stderr
    assert not required.stdout


def test_a_search_records_the_sandbox_and_results_do_not_depend_on_it() -> None:
    """A kernel evaluator's environment (recorded with each run) names the protections; its
    fingerprint (what stored results are reused under) leaves the sandbox out."""
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.gate import GateOptions

    def render(genome):
        return HONEST.read_text()

    on = KernelEvaluator(PROBLEMS / "matmul_small.py", render, device="cpu", template="t")
    off = KernelEvaluator(
        PROBLEMS / "matmul_small.py",
        render,
        device="cpu",
        template="t",
        options=GateOptions(sandbox=SandboxOptions(isolation="off", without=("pid",))),
    )
    assert on.fingerprint() == off.fingerprint()
    assert on.environment()["sandbox"] == {"on": sorted(REPORT.on), "off": REPORT.off}
    assert off.environment()["sandbox"]["on"] == []


_SEARCH_FILE = """\
from pathlib import Path

from evokernel import Choice, SearchSpace
from evokernel.evaluators import KernelEvaluator

space = SearchSpace([Choice("x", [1])])
evaluator = KernelEvaluator({problem!r}, lambda genome: Path({honest!r}).read_text(), device="cpu", template="t")
"""


@pytest.mark.slow
@pytest.mark.skipif(_isolation._ARCH not in _isolation._NR, reason="no seccomp table for this architecture")
def test_a_search_says_which_protections_are_off_and_records_them(tmp_path: Path) -> None:
    import sqlite3

    target = tmp_path / "target.py"
    target.write_text(_SEARCH_FILE.format(problem=str(PROBLEMS / "matmul_small.py"), honest=str(HONEST)))
    args = ["search", str(target), "--budget", "1", "--db", str(tmp_path / "s.db"), "--json"]
    required = _without_namespaces(*args, "--require-sandbox", cwd=tmp_path)
    assert required.returncode == 2 and "the sandbox is required" in required.stderr, required.stderr
    run = _without_namespaces(*args, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("evokernel: sandbox:")]
    assert len(lines) == 1 and "pid off" in lines[0], run.stderr[-2000:]
    with sqlite3.connect(tmp_path / "s.db") as db:
        envs = [json.loads(row[0]) for row in db.execute("SELECT environment FROM runs")]
    assert envs and {"user", "pid"} <= set(envs[-1]["sandbox"]["off"]), envs


def test_cuda_candidates_keep_the_hosts_shm_and_say_why() -> None:
    """The driver's CUDA IPC maps the judge's block through the host's /dev/shm (a private
    one failed on the H200: cudaErrorMapBufferObjectFailed), so CUDA candidates keep it, said
    as such and never counted as missing under --require-sandbox."""
    from evokernel.judge.sandbox import CUDA_SHM

    report = isolation_report(SandboxOptions(isolation="auto"), "cuda")
    assert "shm" not in report.on and report.off["shm"] == CUDA_SHM
    assert isolation_report(SandboxOptions(isolation="auto"), "cpu").off.get("shm") != CUDA_SHM
    if not isolation_report(SandboxOptions(isolation="auto")).off:  # everything holds here: required is fine
        assert isolation_report(SandboxOptions(isolation="require"), "cuda").off == {"shm": CUDA_SHM}


@needs_all
def test_the_judges_import_path_under_tmp_stays_readable_inside(tmp_path: Path) -> None:
    """A package the judge imports from under /tmp (a virtual environment or a --target
    install there) is bound back, read-only, inside the candidate's private /tmp."""
    from evokernel.judge.sandbox import _hidden_import_path

    pkg = Path(tempfile.mkdtemp(prefix="evokernel-site-"))
    (pkg / "site_probe_mod.py").write_text("VALUE = 41\n")
    sys.path.insert(0, str(pkg))
    try:
        readable = _hidden_import_path()
        assert os.path.realpath(pkg) in readable
        work = tempfile.mkdtemp(prefix="evokernel-work-")

        def body(work: str) -> dict:
            out = {"listed": sorted(os.listdir(pkg))}
            try:
                with open(pkg / "written", "w") as f:
                    f.write("x")
                out["write"] = "written"
            except OSError as exc:
                out["write"] = errno.errorcode[exc.errno]
            return out

        out = _in_sandbox(body, work, tuple(readable))
        assert out.get("listed") == ["site_probe_mod.py"], out
        assert out["write"] in ("EROFS", "EACCES", "EPERM"), out
        assert not (pkg / "written").exists()
    finally:
        sys.path.remove(str(pkg))


_PID_1 = """\
import os

import torch


def kernel(a, b):
    # right only as pid 1 of a PID namespace of its own
    return a @ b if os.getpid() == 1 else torch.zeros(a.shape[0], b.shape[1])
"""


@pytest.mark.slow
@needs_all
def test_a_candidate_started_from_a_fresh_interpreter_is_sandboxed_too(monkeypatch) -> None:
    """When the fork server serves the other device, a candidate starts from a new
    interpreter, whose threads keep it from entering a user namespace: its keeper forks once
    more, and the candidate is pid 1 of its own namespace all the same."""
    import evokernel.judge.sandbox as sandbox
    from evokernel.judge.gate import GateOptions, Judge
    from evokernel.judge.problem import Problem

    judge = Judge(Problem.load(PROBLEMS / "matmul_small.py"), "cpu", GateOptions(time=False))
    assert judge.check(_PID_1).accepted
    sandbox._context("cpu")  # the fork server runs, serving the CPU
    monkeypatch.setattr(sandbox, "_SERVER_MODE", "native")  # now it serves the GPU: CPU candidates spawn
    v = judge.check(_PID_1)
    assert v.accepted, v.reason


def test_the_c_compiler_outside_usr_is_in_the_candidates_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton builds its host helpers with $CC (or cc/gcc on PATH): a compiler installed
    outside /usr (/opt/gcc on the GPU machines) is bound in the allowlist root, else every
    Triton candidate failed with "No such file or directory: '/opt/gcc/bin/gcc'"."""
    from evokernel.judge._isolation import _compiler_prefixes, default_exposed

    gcc = tmp_path / "opt" / "gcc" / "bin" / "gcc"
    gcc.parent.mkdir(parents=True)
    gcc.write_text("#!/bin/sh\n")
    gcc.chmod(0o755)
    monkeypatch.setenv("CC", str(gcc))
    assert _compiler_prefixes() == [str(tmp_path / "opt" / "gcc")]
    assert str(tmp_path / "opt" / "gcc") in default_exposed()
    monkeypatch.setenv("CC", "/usr/bin/true")  # under /usr: bound already, nothing added
    assert _compiler_prefixes() == []


def _proc_writes(work: str) -> dict:
    out = {}
    for path in (
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/domainname",
        "/proc/sys/kernel/hostname",
        "/proc/sys/vm/drop_caches",
        "/proc/self/comm",
    ):
        try:
            with open(path, "w") as f:
                f.write("evokernel-probe\n" if "comm" in path or "name" in path else "")
            out[path] = "written"
        except OSError as exc:
            out[path] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    with open("/proc/self/uid_map") as f:
        out["uid_map"] = f.read().split()
    return out


@needs_all
def test_a_candidate_as_the_judges_user_writes_its_own_proc_but_no_kernel_setting(tmp_path: Path) -> None:
    """A CUDA candidate's root is the judge's user outside (the host's root where the judge is
    root), and the NVIDIA driver's cuInit needs a writable /proc (error 304 on a read-only one,
    H100): its own /proc is writable, /proc/sys (core_pattern, domainname, hostname,
    drop_caches) read-only whoever it is."""
    got = _in_sandbox(_proc_writes, str(tmp_path))
    assert "error" not in got, got
    assert got["/proc/self/comm"] == "written", got
    for path in ("core_pattern", "domainname", "hostname"):
        assert got[f"/proc/sys/kernel/{path}"] in ("EROFS", "EACCES", "EPERM"), got
    assert got["/proc/sys/vm/drop_caches"] in ("EROFS", "EACCES", "EPERM"), got
    if os.geteuid() == 0:
        assert got["uid_map"][:2] == ["0", "0"]  # mapped as a CUDA candidate is: the host's root outside


FORKER = """
import os, time
n = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
raise ImportError(f"forked {n}")
"""


@needs_all
def test_a_candidate_as_the_host_root_cannot_fork_past_its_pids_cgroup() -> None:
    """RLIMIT_NPROC never applies to the host's root, which a CUDA candidate is outside where
    the judge is root: its pids cgroup caps its processes and threads all the same (here a CPU
    candidate kept as the judge's user, `drop_privileges=False`, stands for it)."""
    from evokernel.judge._cgroup import unavailable
    from evokernel.judge.sandbox import Outcome, Sandbox, _reap

    if unavailable():
        pytest.skip(f"no pids cgroup here: {unavailable()}")
    options = SandboxOptions(drop_privileges=False, processes=64, start_timeout_s=60)
    sandbox = Sandbox(FORKER, device="cpu", input_specs=[], options=options).start()
    try:
        got = sandbox.wait_ready()
        group = sandbox._pids
        assert group is not None and os.path.isdir(group.path)
    finally:
        sandbox.close()
    assert isinstance(got, Outcome) and got.kind == "import", got
    forked = int(got.error.rsplit("forked ", 1)[1].split()[0])
    assert 0 < forked < 64, got.error
    deadline = __import__("time").monotonic() + 20
    while os.path.isdir(group.path) and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.2)
        _reap()
    assert not os.path.isdir(group.path)  # removed once its tasks were gone


def test_a_cgroup_v2_host_gets_groups_under_the_judges_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The v2 layout (the GPU machines'): the judge's own cgroup (from /proc/self/cgroup's
    `0::` line) gets `+pids` in its subtree_control where it lacks it, and each group is made
    under it with its cap in pids.max. (A folder laid out as cgroup2 is: the kernel's files are
    plain files here, so this checks the paths and writes, not the kernel's enforcement.)"""
    import evokernel.judge._cgroup as cg

    if os.geteuid() != 0:
        pytest.skip("the judge makes groups only as root")
    own = tmp_path / "system.slice" / "judge.service"
    own.mkdir(parents=True)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cg, "_ROOT", str(tmp_path))
    monkeypatch.setattr(cg, "_BASE", [])
    monkeypatch.setattr(cg, "_own_path", lambda controller: "/system.slice/judge.service")
    assert cg.unavailable() is None
    assert (own / "cgroup.subtree_control").read_text() == "+pids"
    group = cg.PidsGroup.create(77)
    assert group is not None and Path(group.path).parent == own
    assert (Path(group.path) / "pids.max").read_text() == "77"
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    monkeypatch.setattr(cg, "_BASE", [])
    assert cg.unavailable() == "cgroup v2 without the pids controller"
