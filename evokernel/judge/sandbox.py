"""Run one candidate in a process of its own, and survive anything it does.

Candidates are forked from a server that imported torch and triton once (so a new
candidate costs a fork, not an interpreter start) and was started with a scrubbed
environment: no API keys, tokens or secrets reach candidate code. The forked process is the
candidate's *keeper* (`_worker.main`): it enters new user, PID, mount, network and IPC
namespaces, forks the candidate's process (pid 1 of the new PID namespace), tells the judge
that process's pid (a `Sandboxed` message, the first on the channel), keeps what it prints
in a log cut after `output_bytes`, and exits as that process did. The candidate's process
confines itself before any candidate code runs (`evokernel.judge._isolation.confine`: a read-only
file system but its own folder, a private /tmp and /dev/shm, its own /proc, every capability
dropped, a seccomp filter, limits). The judge kills the keeper's process group and the
candidate's process (through a pidfd); pid 1's death ends its namespace and everything in
it. What the candidate sends back is decoded as msgspec structs, never unpickled.

Which protections hold here is probed once per judge process (`isolation_report`);
`SandboxOptions.isolation` (or EVOKERNEL_SANDBOX) is "auto" (all that hold, the rest said),
"require" (SandboxUnavailable unless all hold) or "off" (no namespaces, as before: then, as
before, a user of its own per candidate where the judge is root and others can reach its
Python); `without` (or EVOKERNEL_SANDBOX_WITHOUT=pid,...) leaves chosen protections out.

>>> sorted(k for k in scrubbed_environment({"PATH": "/bin", "ANTHROPIC_API_KEY": "x", "HF_TOKEN": "y",
...                                           "CUDA_VISIBLE_DEVICES": "0", "TRITON_AUTH": "z"}))
['CUDA_VISIBLE_DEVICES', 'PATH']
"""

# One module on purpose, though over 400 lines: the judge's side of one candidate's life (fork server, keeper, namespaces
# chosen per device, the shared CUDA block, kill and reap) is one state machine whose steps share the process handles
# and the probe's findings; split, each part would need the others' private state.

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
import os
import re
import signal
import struct
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from evokernel.judge._isolation import PROTECTIONS, Report, probe
from evokernel.judge.cleanup import remove_tree
from evokernel.judge.device import is_cuda
from evokernel.judge._worker import Ask, Block, Done, Failed, Ready, Sandboxed, Setup, Timing, WorkerMessage
from evokernel.judge.timing import Bracket
from evokernel.core.errors import EvokernelError
from evokernel.core.readable import readable

__all__ = [
    "Sandbox",
    "SandboxOptions",
    "Outcome",
    "scrubbed_environment",
    "can_drop_privileges",
    "isolation_report",
    "SandboxUnavailable",
]

_KEEP = re.compile(
    r"^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_[A-Z]+|TZ|TERM|TMPDIR|TEMP|TMP|PWD|"
    r"PYTHONPATH|PYTHONHASHSEED|VIRTUAL_ENV|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|CC|CXX|"
    r"CUDA_[A-Z0-9_]+|NVIDIA_[A-Z0-9_]+|TRITON_[A-Z0-9_]+|TORCH_[A-Z0-9_]+|PYTORCH_[A-Z0-9_]+|"
    r"NCCL_[A-Z0-9_]+|NVSHMEM_[A-Z0-9_]+|OMP_[A-Z_]+|MKL_[A-Z_]+|OPENBLAS_[A-Z_]+|XDG_CACHE_HOME)$"
)
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)


def scrubbed_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a candidate may see: an allowlist, minus anything that looks secret."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if _KEEP.match(k) and not _SECRET.search(k)}


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _neutral_main() -> Iterator[None]:
    """Keep multiprocessing from re-importing the user's main script in every candidate."""
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


@contextlib.contextmanager
def _quiet_fds() -> Iterator[None]:
    """Start the fork server with /dev/null as its stdout and stderr, so that no candidate
    inherits (or finds under /proc) the judge's own output streams."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


_SERVER_MODE: str | None = None
_CTX_LOCK = threading.Lock()


def _context(device: str) -> Any:
    """Where candidates are started from: the fork server, started once per process with a
    scrubbed environment, with torch and triton imported.

    Triton decides at import whether its own library functions are interpreted (CPU) or
    compiled, so the server serves one mode: the first device asked for. Candidates for
    the other device start from a fresh interpreter instead (slower, as correct)."""
    global _SERVER_MODE
    mode = "interpret" if device == "cpu" else "native"
    with _CTX_LOCK:
        if _SERVER_MODE is None:
            import multiprocessing.forkserver as forkserver

            import torch.multiprocessing  # noqa: F401  (registers tensor sharing for pipes)

            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(
                [
                    "torch",
                    "torch.multiprocessing",
                    "triton",
                    "triton.runtime.jit",
                    "evokernel.judge._preload",
                    "evokernel.judge._worker",
                    "evokernel.judge.timing",
                ]
            )
            # the server must import the same modules the judge did: its sys.path is the
            # judge's, and not the current directory first (Python ignores the sys.path it is
            # handed, so it goes in through PYTHONPATH)
            env = _candidate_environment(device)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            env["PYTHONSAFEPATH"] = "1"
            with _environ(env), _neutral_main(), _quiet_fds():
                forkserver.ensure_running()
            _SERVER_MODE = mode
        if mode == _SERVER_MODE:
            return multiprocessing.get_context("forkserver")
        return multiprocessing.get_context("spawn")


def _candidate_environment(device: str) -> dict[str, str]:
    env = scrubbed_environment()
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


class SandboxOptions(msgspec.Struct, frozen=True, kw_only=True):
    start_timeout_s: float = 180.0  # import and compile
    call_timeout_s: float = 60.0
    time_timeout_s: float = 120.0
    max_message_bytes: int = 1 << 20
    keep_work_dir: bool = False
    # when the judge runs as root, each candidate runs as a user of its own from this range:
    # it cannot signal the judge, read its environment or open its files, and every process
    # it leaves behind (even one that left the process group) is found by its user and killed
    drop_privileges: bool = True
    uid_base: int = 2_000_000
    # address-space limit of a CPU candidate's process (None: half the machine's memory).
    # Not applied on CUDA, whose driver reserves far more address space than it uses.
    cpu_memory_bytes: int | None = None
    # CUDA: load the timing harness's kernels while the candidate compiles, so the judge does
    # not wait for it (bench.prewarm_cuda)
    prewarm: bool = True
    # namespaces, capabilities, seccomp, limits (evokernel.judge._isolation): "auto" sets up every
    # protection this machine allows and says which are off, "require" refuses to judge
    # without all of them, "off" runs candidates as before (for an A/B). None: the
    # environment's EVOKERNEL_SANDBOX, else "auto". `without` names protections to leave
    # off (with EVOKERNEL_SANDBOX_WITHOUT=pid,user, comma-separated).
    isolation: str | None = None
    without: tuple[str, ...] = ()
    output_bytes: int = 4 << 20  # what a candidate prints is cut after this, with a note
    file_bytes: int = 1 << 30  # no file a candidate writes grows past this
    # a CUDA candidate keeps the host's /dev/shm (the driver's IPC): writable, or read-only but
    # for the judge's CUDA block's counter file (then nothing it writes lands in the host's
    # memory; on an H100 the driver then failed to map the judge's block: off by default)
    host_shm_writable: bool = True
    # a CUDA candidate's root stands for the judge's own user outside, unless this is on: with
    # the candidate as another user the driver refuses to map the judge's block ("mapping of
    # buffer object failed", H100 with the allowlist root, as before it: docs/lessons.md)
    cuda_unprivileged: bool = False
    # the most processes and threads a candidate may have at once: RLIMIT_NPROC for its own host
    # user, and (the judge as root) a pids cgroup of its own, which holds for a CUDA candidate
    # too (the host's root outside, which RLIMIT_NPROC exempts)
    processes: int = 512


#: SandboxOptions fields that do not change what a candidate's measurement means (left out of
#: evaluator fingerprints)
ISOLATION_FIELDS = (
    "isolation",
    "without",
    "output_bytes",
    "file_bytes",
    "host_shm_writable",
    "cuda_unprivileged",
    "processes",
)


class SandboxUnavailable(EvokernelError):
    """The sandbox was required, and this machine does not allow every protection."""


def _isolation_wanted(options: SandboxOptions) -> tuple[str, frozenset[str]]:
    """(mode, protections wanted) from the options, else the environment."""
    mode = options.isolation or os.environ.get("EVOKERNEL_SANDBOX", "").strip().lower() or "auto"
    if mode not in ("auto", "require", "off"):
        raise SandboxUnavailable(f"EVOKERNEL_SANDBOX={mode!r}: expected auto, require or off")
    without = set(options.without) | {
        w.strip() for w in os.environ.get("EVOKERNEL_SANDBOX_WITHOUT", "").split(",") if w.strip()
    }
    unknown = without - set(PROTECTIONS)
    if unknown:
        raise SandboxUnavailable(f"unknown protections {sorted(unknown)}: expected some of {sorted(PROTECTIONS)}")
    return mode, frozenset() if mode == "off" else frozenset(PROTECTIONS) - without


@functools.lru_cache(maxsize=8)
def _probe(wanted: frozenset[str]) -> Report:
    if not wanted:
        return Report(frozenset(), {n: "switched off" for n in PROTECTIONS})
    return probe(wanted)


#: why a CUDA candidate keeps the host's /dev/shm (measured on the H200: with a private
#: one, opening the judge's block fails with cudaErrorMapBufferObjectFailed; the driver's
#: CUDA IPC goes through files there; BENCHMARKS.md, "The sandbox on the H200")
CUDA_SHM = "kept for CUDA: the driver's IPC maps the judge's memory through the host's /dev/shm"


def isolation_report(options: SandboxOptions | None = None, device: str | None = None) -> Report:
    """Which protections candidates get on this machine under `options` (probed once per
    process and set of protections), for candidates on `device` (CUDA ones keep the host's
    /dev/shm: `CUDA_SHM`). Raises SandboxUnavailable if they are required and one that was
    not switched off (or left out for CUDA) does not hold.

    >>> isolation_report(SandboxOptions(isolation="off")).on
    frozenset()
    """
    mode, wanted = _isolation_wanted(options or SandboxOptions())
    cuda = is_cuda(device)
    report = _probe(wanted - {"shm"} if cuda else wanted)
    if cuda and "shm" in wanted:
        report = Report(report.on, {**report.off, "shm": CUDA_SHM})
    missing = {k: v for k, v in report.off.items() if v not in ("switched off", CUDA_SHM)}
    if mode == "require" and missing:
        raise SandboxUnavailable("the sandbox is required, and " + Report(report.on, missing).describe())
    return report


def _hidden_import_path() -> list[str]:
    """The judge's import path under a folder the sandbox replaces with a private one (/tmp,
    /dev/shm: a package, a checkout or a virtual environment there): bound back read-only,
    so that the candidate imports what the judge can. That is the `sys.path` entries there,
    the folders of the packages the judge imported from there, and the folders an editable
    install maps packages to (setuptools' finder: `evokernel.search_spaces` lives in the
    checkout's `search_spaces/`). Computed again only when what is imported changes."""
    key = (len(sys.modules), tuple(sys.path), len(sys.meta_path))
    if _HIDDEN[0] == key:
        return list(_HIDDEN[1])
    roots = {os.path.realpath(r) for r in ("/tmp", tempfile.gettempdir(), "/dev/shm")}

    def hidden(path: str) -> bool:
        return any(path.startswith(r + os.sep) for r in roots)

    # (the interpreter's own prefix too: a candidate may start sys.executable)
    candidates = [entry for entry in sys.path if entry] + [sys.prefix, sys.exec_prefix]
    for finder in sys.meta_path:  # an editable install's package -> folder mapping
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "") or ""), "MAPPING", None)
        if isinstance(mapping, dict):
            candidates += [v for v in mapping.values() if isinstance(v, str)]
    for module in list(sys.modules.values()):
        try:  # packages (namespace ones too); some modules' __path__ is no list (torch's ops)
            entries = list(getattr(module, "__path__", None) or ())
        except TypeError:
            continue
        candidates += [entry for entry in entries if isinstance(entry, str)]
    found = sorted({os.path.realpath(c) for c in candidates if hidden(os.path.realpath(c))})
    out = [d for d in found if os.path.isdir(d) and not any(d.startswith(o + os.sep) for o in found if o != d)]
    _HIDDEN[0], _HIDDEN[1] = key, out
    return list(out)


_HIDDEN: list = [None, []]


def exposed_paths() -> list[str]:
    """The host paths a candidate's root is built from (`evokernel.judge._isolation.hold`):
    the system's and the interpreter's (`default_exposed`), every installed-packages folder
    on the import path, and the folder of each package the judge imported from elsewhere (a
    checkout's `evokernel/`, an editable install's mapped folders), never the folder they sit
    in: a checkout's other files (a `.env` beside the judge) stay out of sight. Computed again
    only when what is imported changes."""
    key = (len(sys.modules), tuple(sys.path), len(sys.meta_path))
    if _EXPOSED[0] == key:
        return list(_EXPOSED[1])
    from evokernel.judge._isolation import default_exposed

    base = [os.path.realpath(p) for p in default_exposed()]
    found: set[str] = set()
    for entry in sys.path:
        if entry and (
            os.path.basename(entry.rstrip("/")) in ("site-packages", "dist-packages") or entry.endswith(".zip")
        ):
            found.add(os.path.realpath(entry))
    for finder in sys.meta_path:  # an editable install's package -> folder mapping
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "") or ""), "MAPPING", None)
        if isinstance(mapping, dict):
            found |= {os.path.realpath(v) for v in mapping.values() if isinstance(v, str)}
    for name, module in list(sys.modules.items()):
        if "." in name or module is None:
            continue
        try:  # a package's folders (namespace ones too), else the module's own file
            entries = list(getattr(module, "__path__", None) or ())
        except TypeError:
            entries = []
        file = getattr(module, "__file__", None)
        if not entries and isinstance(file, str):
            entries = [file]
        found |= {os.path.realpath(e) for e in entries if isinstance(e, str) and os.path.isabs(e)}

    def inside(path: str, roots: list[str]) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    extra = sorted(p for p in found if os.path.exists(p) and not inside(p, base))
    extra = [p for p in extra if not any(p != o and inside(p, [o]) for o in extra)]
    out = base + extra
    _EXPOSED[0], _EXPOSED[1] = key, out
    return list(out)


_EXPOSED: list = [None, []]


_UID_RANGE = 500_000
_UID_LOCKS = os.path.join(tempfile.gettempdir(), "evokernel-uids")
_UID_COUNTER = iter(range(1 << 30))
_UID_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def can_drop_privileges() -> bool:
    """Whether candidates can run as a user of their own: the judge runs as root, and an
    unprivileged user can reach this Python and its packages (not so when Python lives
    under a private home such as /root). Otherwise candidates run as the judge's user."""
    if os.geteuid() != 0:
        return False
    import importlib.util

    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.__file__)}
    for name in ("torch", "triton", "msgspec", "numpy", "evokernel"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            paths.add(os.path.dirname(os.path.dirname(spec.origin)))
    for path in paths:
        path = os.path.realpath(path)
        while True:
            try:
                mode = os.stat(path).st_mode
            except OSError:
                return False
            if not mode & 0o001:  # others may not traverse it
                return False
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
    return True


def _claim_uid(options: SandboxOptions, reach: bool = True) -> tuple[int, int] | None:
    """A user id no other sandbox of any judge on this host holds: (uid, lock fd). `reach`:
    only where that user can reach this Python by path (it runs as that user in the host's
    tree; a candidate in a root of its own reaches it through bind mounts instead).

    Each uid is claimed with an exclusive flock on a file of its own, released when the
    sandbox closes or its judge dies; whatever still runs under a newly claimed uid (left
    by a judge that died) is killed before the candidate starts."""
    if not options.drop_privileges or os.geteuid() != 0 or (reach and not can_drop_privileges()):
        return None
    import fcntl

    os.makedirs(_UID_LOCKS, mode=0o700, exist_ok=True)
    with _UID_LOCK:
        start = (os.getpid() * 7919 + next(_UID_COUNTER)) % _UID_RANGE
    for i in range(_UID_RANGE):
        uid = options.uid_base + (start + i) % _UID_RANGE
        fd = os.open(os.path.join(_UID_LOCKS, str(uid)), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if os.pread(fd, 1, 0):  # its last holder died before it had cleaned up: kill what is left
            _kill_user(uid)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # in use; emptied once its processes are gone
        return uid, fd
    return None


_REAPER: Any = None


def _release_uid(uid: int, fd: int, work_dir: str | None) -> None:
    """Kill whatever still runs as `uid`, remove the work folder, then free the uid. Done on
    a thread of its own: scanning /proc takes milliseconds the judge should not wait for.
    The uid stays claimed (its lock held) until its processes are gone."""
    global _REAPER
    import queue

    def reap(q: Any) -> None:
        while True:
            uid, fd, work_dir = q.get()
            try:
                _kill_user(uid)
                if work_dir:
                    remove_tree(work_dir)  # never raises (a deep chain of folders included)
                os.ftruncate(fd, 0)
            except Exception:  # whatever it was, the reaper goes on with the next uid
                pass
            finally:
                os.close(fd)
                with _REAPING:
                    _REAPING_LEFT[0] -= 1
                    _REAPING.notify_all()

    with _UID_LOCK:
        if _REAPER is None:
            _REAPER = queue.SimpleQueue()
            threading.Thread(target=reap, args=(_REAPER,), name="evokernel-reaper", daemon=True).start()
            atexit.register(wait_for_cleanup)
    with _REAPING:
        _REAPING_LEFT[0] += 1
    _REAPER.put((uid, fd, work_dir))


_REAPING = threading.Condition()
_REAPING_LEFT = [0]  # folders the reaper has yet to remove


def wait_for_cleanup(timeout_s: float = 60.0) -> bool:
    """Wait until the folders of closed sandboxes are removed (by the reaper's thread, which
    dies with the process) and their pids cgroups with them: at exit, and before `os._exit`.
    True if none is left."""
    deadline = time.monotonic() + timeout_s
    with _REAPING:
        done = _REAPING.wait_for(lambda: _REAPING_LEFT[0] <= 0, timeout_s)
    limit = min(deadline, time.monotonic() + 5.0)  # killed tasks leave within milliseconds
    while True:
        _reap()
        if not _UNREMOVED_GROUPS:
            return done
        if time.monotonic() >= limit:
            return False
        time.sleep(0.05)


def _remove_groups_at_exit() -> None:
    _reap()
    deadline = time.monotonic() + 5.0  # killed tasks leave within milliseconds
    while _UNREMOVED_GROUPS and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap()


atexit.register(_remove_groups_at_exit)


def _kill_user(uid: int) -> None:
    """SIGKILL every process running as `uid` (a candidate's user, used by nothing else)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid or int(line.split()[2]) == uid:
                            os.kill(int(entry.name), signal.SIGKILL)
                        break
        except (OSError, ValueError):
            continue


def _kill_namespace(userns: int) -> None:
    """SIGKILL every process in the user namespace `userns` (a candidate's, used by nothing
    else): where there is no PID namespace, what the candidate left running, whatever its
    process group or session."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(f"/proc/{entry.name}/ns/user").st_ino == userns:
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                continue


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """Why a sandbox stopped answering: timeout, crash (a signal), exit (the candidate
    called sys.exit/os._exit), or a failure the worker reported (import, no_kernel, ...)."""

    kind: str
    error: str
    log_tail: str = ""


_decoder = msgspec.msgpack.Decoder(WorkerMessage)


class _BadFrame(Exception):
    """The candidate's process announced a message the judge will not read (too long, or a
    negative length): a protocol failure, not a dead channel."""


class _Frames:
    """Reads the candidate's messages off the channel's descriptor under a deadline.

    `Connection.recv_bytes` waits, without limit, until the length a message announces has
    arrived, and `Connection.poll` says only that some byte has: a candidate that writes a
    length and a byte of body, then sleeps, would hang the judge for good. So the judge reads
    the frames itself, with the framing of CPython's `multiprocessing.connection.Connection`
    (`_send_bytes`/`_recv_bytes`, 3.8 to 3.13): a 4-byte big-endian signed length, or -1 and
    then an 8-byte big-endian unsigned length, followed by the message. It reads no further
    than the message it is on (the next one stays in the pipe for `Connection.poll` to see),
    and keeps what arrived of an unfinished message for the next read.

    >>> import socket
    >>> a, b = socket.socketpair()
    >>> frames = _Frames(b.fileno(), 1 << 10)
    >>> _ = a.send(struct.pack("!i", 3) + b"h")
    >>> frames.read(time.monotonic() + 0.05) is None  # the deadline passed mid-message
    True
    >>> _ = a.send(b"ey")
    >>> frames.read(time.monotonic() + 0.05)
    b'hey'
    >>> a.close()
    >>> b.close()
    """

    def __init__(self, fd: int, max_bytes: int) -> None:
        self.fd = fd
        self.max_bytes = max_bytes
        self.buf = bytearray()  # what arrived of the message being read

    @property
    def partial(self) -> bool:
        """Whether part of a message has arrived and the rest has not."""
        return bool(self.buf)

    def read(self, deadline: float) -> bytes | None:
        """The next whole message, or None if `deadline` (time.monotonic()) passed first
        (what arrived is kept). Raises EOFError where the channel closed between messages,
        OSError where it closed inside one, _BadFrame for a length the judge refuses."""
        while True:
            head, missing = self._missing()
            if not missing:
                data = bytes(self.buf[head:])
                self.buf.clear()
                return data
            if not readable(self.fd, max(0.0, deadline - time.monotonic())):
                return None
            chunk = os.read(self.fd, min(missing, 1 << 20))
            if not chunk:
                if self.buf:
                    raise OSError("got end of file during message")
                raise EOFError
            self.buf += chunk

    def _missing(self) -> tuple[int, int]:
        """(header length, bytes still missing) of the message being read; the header
        length is 0 while the header itself is incomplete."""
        if len(self.buf) < 4:
            return 0, 4 - len(self.buf)
        (size,) = struct.unpack("!i", self.buf[:4])
        head = 4
        if size == -1:
            if len(self.buf) < 12:
                return 0, 12 - len(self.buf)
            (size,) = struct.unpack("!Q", self.buf[4:12])
            head = 12
        if size < 0:
            raise _BadFrame(f"the candidate's process sent a message of length {size}")
        if size > self.max_bytes:
            raise _BadFrame(
                f"the candidate's process sent a message of {size} bytes, over the limit of {self.max_bytes}"
            )
        return head, head + size - len(self.buf)


#: Failures before ready after which a trusted candidate's process can take the next one.
_CLEAN_FAILURES = ("import", "no_kernel", "compile")

# -- the judge's CUDA block, shared with candidate processes -----------------------------
# PyTorch shares a CUDA allocation between processes with a reference counter in shared
# memory: one slot per send, set to 1 when the block is sent and decremented when the
# receiving process frees its mapping. A block whose owner frees it while a slot is still
# above 0 is kept ("limbo") until `torch.cuda.ipc_collect()` finds every slot at 0. The judge
# kills candidate processes (SIGKILL: nothing in them runs on the way out), so their slots
# stayed at 1 and every judge's block stayed allocated for good: 13 GiB per Mixtral job,
# until the 6th job ran out of the H200's memory. So the block is shared here by
# hand (`_share_cuda_`, what torch.multiprocessing does when it pickles a CUDA tensor) and
# the judge releases a killed process's slot once the process is gone.
_DEAD_HOLDERS: list[tuple[Any, int | None, bytes, int]] = []  # (keeper, pidfd of the candidate's process,
#                                                              counter file, slot) of killed candidates
_HOLDERS_LOCK = threading.Lock()


def _share_cuda_block(block: Any) -> tuple[Any, tuple[bytes, int]]:
    """What a candidate process needs to map `block`: the arguments torch.multiprocessing
    itself would pickle for it (`reduce_tensor`; the process rebuilds it with
    `rebuild_cuda_tensor`), and the reference-counter slot (file, offset) of this send."""
    import inspect

    from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

    _, args = reduce_tensor(block)
    names = list(inspect.signature(rebuild_cuda_tensor).parameters)
    slot = (args[names.index("ref_counter_handle")], int(args[names.index("ref_counter_offset")]))
    return ("cuda-ipc", args), slot


#: PyTorch's reference-counter files: shared memory holding 10000 slots of 8 bytes after the
#: 64-byte header of ATen's RefcountedMapAllocator (CudaIPCTypes.h, MapAllocator.cpp)
_COUNTER_FILE = (64, 10000, 8)


def _counter_path(handle: bytes) -> str:
    return os.path.join("/dev/shm", os.fsdecode(handle).lstrip("/"))


def _slot_value(handle: bytes, slot: int) -> int | None:
    """A reference-counter slot's value, read from its shared-memory file; None where the
    file is not there or not of the layout above (the caller then releases as if held)."""
    header, slots, width = _COUNTER_FILE
    path = _counter_path(handle)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != header + slots * width or not 0 <= slot < slots:
                return None
            f.seek(header + slot * width)
            return int.from_bytes(f.read(width), sys.byteorder)
    except OSError:
        return None


_UNREAPED: list[Any] = []  # killed candidate processes not yet gone (each holds a descriptor)
_UNREAPED_LOCK = threading.Lock()
_UNREMOVED_GROUPS: list[Any] = []  # closed candidates' pids cgroups with tasks still in them


def _reap(process: Any = None, group: Any = None) -> None:
    """Free what each killed candidate process that is gone holds in the judge (its sentinel
    descriptor: closed otherwise only when the Process object is collected, so a judge that
    keeps its sandboxes leaked two descriptors a candidate), and remove each closed
    candidate's pids cgroup once its tasks are gone; `process` and `group` join the ones kept
    for a later sweep while still exiting."""
    with _UNREAPED_LOCK:
        if group is not None:
            _UNREMOVED_GROUPS.append(group)
        _UNREMOVED_GROUPS[:] = [g for g in _UNREMOVED_GROUPS if not g.remove()]
        if process is not None:
            _UNREAPED.append(process)
        left = []
        for p in _UNREAPED:
            try:
                p.join(0)
                if p.exitcode is None:
                    left.append(p)
                else:
                    p.close()
            except ValueError:  # closed already
                pass
        _UNREAPED[:] = left


def release_dead_holders(wait_s: float = 0.0) -> int:
    """Release the reference-counter slots of killed candidate processes that are gone,
    waiting up to `wait_s` for those still exiting; returns how many are still alive (their
    slots stay held: a block a live process maps must not be freed)."""
    import torch

    deadline = time.monotonic() + wait_s
    with _HOLDERS_LOCK:
        pending = list(_DEAD_HOLDERS)
        _DEAD_HOLDERS.clear()
    alive, finished = [], []
    for process, pidfd, handle, slot in pending:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None or not _gone(pidfd, max(0.0, deadline - time.monotonic())):
            alive.append((process, pidfd, handle, slot))
            continue
        if pidfd is not None:
            os.close(pidfd)
        finished.append(process)
        # a process that freed its mapping on its way out (its `_main` returned) took its slot
        # to 0 itself; the counter is unsigned, so releasing it again would wrap it and keep
        # the block for good
        if _slot_value(handle, slot) != 0:
            torch.UntypedStorage._release_ipc_counter_cuda(handle, slot)
    with _HOLDERS_LOCK:
        _DEAD_HOLDERS.extend(alive)
    for process in {id(p): p for p in finished if all(p is not a[0] for a in alive)}.values():
        _reap(process)
    return len(alive)


def _gone(pidfd: int | None, wait_s: float = 0.0) -> bool:
    """Whether the process behind `pidfd` has exited (a pidfd turns readable then)."""
    if pidfd is None:
        return True
    return readable(pidfd, wait_s)


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # gone already, or a kernel before 5.3
        return None


class Sandbox:
    """One candidate's process. `start()` returns at once: the candidate imports and
    compiles in the background while the judge works with other sandboxes. `device`: "cpu" or
    "cuda:N", the GPU the process selects before it maps the judge's block (a bare "cuda" is
    the new process's current device, its GPU 0; the Judge always sends an index)."""

    def __init__(
        self,
        source: str,
        *,
        device: str,
        input_specs: list[list[tuple[list[int], list[int], str]]],
        arena: Any = None,
        options: SandboxOptions | None = None,
        label: str = "candidate",
        seed_cache: str | None = None,
        trusted: bool = False,
        output_dtypes: list[str] | None = None,
    ) -> None:
        self.source = source
        self.output_dtypes = list(output_dtypes or [])
        self.seed_cache = seed_cache
        self.trusted = trusted  # its source came from the user's own template, not from a genome
        self.arena = arena
        self.device = device
        self.input_specs = input_specs
        self.options = options or SandboxOptions()
        self.label = label
        self.isolation = isolation_report(self.options, device).on
        self.work_dir = tempfile.mkdtemp(prefix="evokernel-candidate-")
        self.log_path = self.work_dir + ".log"  # written by the keeper, out of the candidate's sight
        # a host user of its own: the root of its user namespace stands for it (the judge is
        # root: never the host's root), or, where namespaces do not isolate it, it runs as it
        self.mapped = (
            "user" in self.isolation
            and os.geteuid() == 0
            and self.options.drop_privileges
            and (not is_cuda(device) or self.options.cuda_unprivileged)
        )
        if self.mapped:
            claim = _claim_uid(self.options, reach=False)
            self.mapped = claim is not None
        else:
            claim = None if self.isolation & {"user", "pid"} else _claim_uid(self.options)
        self.uid, self._uid_lock = claim if claim is not None else (None, None)
        self._pids: Any = None  # its pids cgroup (evokernel.judge._cgroup), where the judge made one
        # mapped candidates share one group: the judge's CUDA block's counter file is theirs to open
        self.gid = self.options.uid_base - 1 if self.mapped else self.uid
        if self.uid is not None:
            os.chown(self.work_dir, self.uid, self.gid)
        self.process: Any = None
        self.conn: Any = None
        self.inner_pid: int | None = None  # the candidate's process (the keeper's child), as the judge sees it
        self._inner_fd: int | None = None  # a pidfd on it
        self._userns: int | None = None  # its user namespace (inode), where it has no PID namespace
        self._pending: WorkerMessage | None = None  # read by `answered`, not yet handed to the judge
        self._frames: _Frames | None = None  # reads the channel under deadlines (`_receive`)
        self._ipc_slot: tuple[bytes, int] | None = None  # this process's counter slot on the judge's block
        self.ready: Ready | None = None
        self.outcome: Outcome | None = None
        self.started_at = 0.0
        self.started_wall = 0.0
        self.uses = 0  # candidates this process served before the current one
        self._clean_failure = False  # a trusted candidate failed to import or compile; the process waits

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> Sandbox:
        ctx = _context(self.device)
        parent, child = ctx.Pipe()
        memory = None
        if self.device == "cpu":
            memory = self.options.cpu_memory_bytes or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        from evokernel.judge._worker import main

        if "limits" in self.isolation and self._pids is None:
            from evokernel.judge._cgroup import PidsGroup

            self._pids = PidsGroup.create(self.options.processes)
        # the judge's memory block travels once, with the process: the candidate maps it while
        # it imports and compiles, and every later message names views of it by offset
        arena = self.arena
        shared = []
        if arena is not None and getattr(arena, "is_cuda", False):
            arena, self._ipc_slot = _share_cuda_block(arena)
            shared.append(_counter_path(self._ipc_slot[0]))
            if self.mapped:  # the candidate's user is not the judge's: its group may open it
                with contextlib.suppress(OSError):
                    os.chown(shared[-1], -1, self.gid)
                    os.chmod(shared[-1], 0o660)
        setup = Setup(
            source=self.source,
            device=self.device,
            log_path=self.log_path,
            work_dir=self.work_dir,
            input_specs=self.input_specs,
            uid=None if self.mapped else self.uid,
            map_to=[self.uid, self.gid] if self.mapped and self.uid is not None and self.gid is not None else [],
            exposed=exposed_paths() if "mount" in self.isolation else [],
            # the judge reads a trusted candidate's folder back (its Triton helpers); no other's
            private_work=not self.trusted and not self.options.keep_work_dir,
            memory_bytes=memory,
            seed_cache=self.seed_cache,
            output_dtypes=self.output_dtypes,
            prewarm=self.options.prewarm,
            reusable=self.trusted,
            isolation=sorted(self.isolation),
            shared_files=shared,
            readable=([self.seed_cache] if self.seed_cache else []) + _hidden_import_path(),
            output_bytes=self.options.output_bytes,
            file_bytes=self.options.file_bytes,
            host_shm_writable=self.options.host_shm_writable,
            processes=self.options.processes,
            pids_cgroup=self._pids.procs if self._pids is not None else "",
        )
        self.process = ctx.Process(target=main, args=(child, msgspec.msgpack.encode(setup), arena), daemon=True)
        self.started_wall = time.time()  # before the fork: the child stamps its own steps after it
        with _environ(_candidate_environment(self.device)), _neutral_main():
            self.process.start()
        child.close()
        self.conn = parent
        self._frames = _Frames(parent.fileno(), self.options.max_message_bytes)
        self.started_at = time.monotonic()
        return self

    def wait_ready(self) -> Ready | Outcome:
        if self.ready is not None:
            return self.ready
        remaining = self.options.start_timeout_s - (time.monotonic() - self.started_at)
        msg = self._receive(max(remaining, 0.0), "importing and compiling")
        if isinstance(msg, Ready):
            self.ready = msg
            return msg
        if isinstance(msg, Failed):
            outcome = Outcome(kind=msg.kind, error=msg.error, log_tail=self.log_tail())
            if self.trusted and msg.kind in _CLEAN_FAILURES:
                # a trusted candidate that did not import or compile leaves its process able to
                # take the next one (it waits for it); this candidate's answer is final
                self.outcome, self._clean_failure = outcome, True
                return outcome
            return self._stop(outcome)
        if isinstance(msg, Outcome):
            return msg
        return self._stop(Outcome(kind="protocol", error=f"unexpected {type(msg).__name__} before ready"))

    def call(self, trial: int, inputs: list[Any], slots: list[Any]) -> Done | Outcome:
        """Run the kernel on views of the judge's block (given as (offset, shape, dtype))."""
        if self.outcome is not None:
            return self.outcome
        try:
            self.conn.send(("call", trial, inputs, slots))
        except (OSError, ValueError) as exc:
            return self._dead(f"sending inputs: {exc}")
        msg = self._receive(self.options.call_timeout_s, "running a check")
        if isinstance(msg, Done) and msg.trial == trial:
            return msg
        if isinstance(msg, Outcome):
            return msg
        return self._stop(Outcome(kind="protocol", error=f"unexpected {type(msg).__name__} for a check"))

    def time(
        self, shape: str, sets: list[list[Any]], sample_slots: list[list[Any]], spec: dict[str, Any]
    ) -> tuple[Timing, list[Bracket]] | Outcome:
        """A timing run in the candidate's process (CUDA: `timing.time_cuda`), each measured
        block bracketed by the judge's own clock: from its word to go (`Ask`) to the block's
        samples arriving (`Block`). Returns the worker's report and those brackets."""
        if self.outcome is not None:
            return self.outcome
        try:
            self.conn.send(("time", shape, sets, sample_slots, spec))
        except (OSError, ValueError) as exc:
            return self._dead(f"sending inputs: {exc}")
        deadline = time.monotonic() + self.options.time_timeout_s
        brackets: list[Bracket] = []
        asked: tuple[float, int] | None = None  # (the judge's clock at its word to go, calls)
        while True:
            msg = self._receive(max(deadline - time.monotonic(), 0.0), "timing")
            if isinstance(msg, Ask) and asked is None and msg.calls > 0:
                asked = (time.perf_counter(), msg.calls)
                try:
                    self.conn.send(("go",))
                except (OSError, ValueError) as exc:
                    return self._dead(f"letting a timed block go: {exc}")
            elif isinstance(msg, Block) and asked is not None and len(msg.samples_ms) == asked[1]:
                window = (time.perf_counter() - asked[0]) * 1e3
                brackets.append(Bracket(window_ms=window, samples_ms=list(msg.samples_ms)))
                asked = None
            elif isinstance(msg, Timing) and msg.shape == shape and (asked is None or not msg.ok):
                return msg, brackets  # (a failure may come mid-block: a CUDA error, say)
            elif isinstance(msg, Outcome):
                return msg
            else:
                return self._stop(Outcome(kind="protocol", error=f"unexpected {type(msg).__name__} for a timing"))

    def begin_timed_calls(self, sets: list[list[Any]], slots: list[list[Any]]) -> Outcome | None:
        """Name the input sets and output slots (views of the judge's block) that the timed
        calls after this refer to by index (`timed_call`)."""
        if self.outcome is not None:
            return self.outcome
        try:
            self.conn.send(("tbegin", sets, slots))
        except (OSError, ValueError) as exc:
            return self._dead(f"sending inputs: {exc}")
        return None

    def timed_call(self, n: int, which: int, slot: int) -> tuple[float, Done] | Outcome:
        """One call on input set `which`, its outputs copied into slot `slot`, timed by the
        judge: its own clock (ms) from before the message to after the answer (one pipe round
        trip included), and the answer."""
        if self.outcome is not None:
            return self.outcome
        t0 = time.perf_counter()
        try:
            self.conn.send(("tcall", n, which, slot))
        except (OSError, ValueError) as exc:
            return self._dead(f"sending a timed call: {exc}")
        msg = self._receive(self.options.call_timeout_s, "running a timed call")
        took = (time.perf_counter() - t0) * 1e3
        if isinstance(msg, Done) and msg.trial == n:
            return took, msg
        if isinstance(msg, Outcome):
            return msg
        return self._stop(Outcome(kind="protocol", error=f"unexpected {type(msg).__name__} for a timed call"))

    def look(self) -> Done | Outcome:
        """Ask the worker to look for tampering now (`_worker._look`)."""
        if self.outcome is not None:
            return self.outcome
        try:
            self.conn.send(("look",))
        except (OSError, ValueError) as exc:
            return self._dead(f"asking for a look: {exc}")
        msg = self._receive(self.options.call_timeout_s, "looking for tampering")
        if isinstance(msg, (Done, Outcome)):
            return msg
        return self._stop(Outcome(kind="protocol", error=f"unexpected {type(msg).__name__} for a look"))

    @property
    def reusable(self) -> bool:
        """Whether this process may serve another candidate: only one that ran trusted
        candidates (the user's template rendered), got ready and never failed; an untrusted
        candidate's process serves that candidate alone."""
        return (
            self.trusted
            and (self.ready is not None and self.outcome is None or self._clean_failure)
            and self.process is not None
            and self.process.is_alive()
        )

    def reuse(self, source: str, label: str) -> bool:
        """Hand this process the next trusted candidate: it imports and compiles it while
        the judge works with others, as a new sandbox would, without a new process and CUDA
        context (creating those is serialised in the driver: ~0.4 s each on the H200 under
        load). False if the process cannot take it; the caller starts a new sandbox then."""
        if not self.reusable:
            return False
        try:
            self.conn.send(("load", source))
        except (OSError, ValueError):
            return False
        self.source, self.label = source, label
        self.ready = None
        self.outcome, self._clean_failure = None, False
        self.uses += 1
        self.prioritise(0)
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        return True

    def prioritise(self, niceness: int = -5) -> bool:
        """Run the candidate's processes ahead of those still compiling, where this process
        may (root): its timing loop must not wait for a core. True if it was done."""
        if self.process is None or self.process.pid is None:
            return False
        try:
            os.setpriority(os.PRIO_PGRP, self.process.pid, niceness)
            return True
        except (OSError, PermissionError):
            return False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop every process of the candidate while the judge reads what it wrote (the
        keeper's group, and the candidate's process through its pidfd: it may have left the
        group)."""
        self._signal(signal.SIGSTOP)
        self._signal_inner(signal.SIGSTOP)
        try:
            yield
        finally:
            self._signal_inner(signal.SIGCONT)
            self._signal(signal.SIGCONT)

    def _signal_inner(self, sig: int) -> None:
        if self._inner_fd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._inner_fd, sig)

    def close(self) -> None:
        """Kill the candidate's processes and remove its files. Nothing is left to save in
        there, and waiting for a CUDA context to tear down would stall the judge."""
        if self.process is not None:
            self._kill()
            if self._ipc_slot is not None:  # released by the judge once the processes are gone
                with _HOLDERS_LOCK:
                    _DEAD_HOLDERS.append((self.process, self._inner_fd, *self._ipc_slot))
                self._ipc_slot, self._inner_fd = None, None
            else:
                _reap(self.process)
            self.process = None
        if self._pids is not None:  # removed once its tasks are gone
            _reap(group=self._pids)
            self._pids = None  # closed once it is gone (its descriptor with it): done with here
        if self._inner_fd is not None:
            os.close(self._inner_fd)
            self._inner_fd = None
        if self.conn is not None:
            self.conn.close()
        remove = None if self.options.keep_work_dir else self.work_dir
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)
        if self._uid_lock is not None and self.uid is not None:
            if self.mapped and "pid" in self.isolation and remove:
                # its PID namespace ends every process it started: the folder goes now (an
                # untrusted candidate's is empty here, its files were on its scratch file system)
                remove_tree(remove)
                remove = None
            # processes that left the group are found by their user, off the judge's path
            _release_uid(self.uid, self._uid_lock, remove)
            self._uid_lock = None
        elif remove:
            remove_tree(remove)  # never raises; what cannot go is quarantined and logged

    def __enter__(self) -> Sandbox:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------
    def answered(self) -> bool:
        """Whether the candidate's process has said something the judge must read (ready, a
        failure) or is gone; without waiting. The keeper's first message (the candidate's
        pid) is taken here, and does not count."""
        if self.ready is not None or self.outcome is not None or self.conn is None or self._pending is not None:
            return True
        if self.inner_pid is None and (self.conn.poll(0) or self._frames.partial):
            try:
                data = self._frames.read(time.monotonic())  # what has arrived, without waiting
                if data is None:
                    return False  # half a message: the rest comes, or `_receive`'s deadline passes
                msg = _decoder.decode(data)
            except (EOFError, OSError, _BadFrame, msgspec.DecodeError):
                return True  # the judge finds out what went wrong when it reads
            if not (isinstance(msg, Sandboxed) and self._adopt(msg.pid)):
                self._pending = msg
                return True
        return self.conn.poll(0)

    def _receive(self, timeout: float, doing: str) -> WorkerMessage | Outcome:
        if self._pending is not None:
            msg, self._pending = self._pending, None
            if isinstance(msg, Sandboxed):  # a second one, or one for a process not the keeper's
                return self._stop(Outcome(kind="protocol", error=f"unexpected sandboxed message (pid {msg.pid})"))
            return msg
        deadline = time.monotonic() + timeout
        while True:
            try:
                # the whole message under the deadline: a candidate that sends a length and
                # part of a message, then stops, times out like one that sends nothing
                data = self._frames.read(deadline)
            except (EOFError, OSError):
                return self._dead(doing)
            except _BadFrame as exc:
                return self._stop(Outcome(kind="protocol", error=str(exc)))
            if data is None:
                return self._stop(
                    Outcome(kind="timeout", error=f"no answer after {timeout:.0f} s {doing}", log_tail=self.log_tail())
                )
            try:
                msg = _decoder.decode(data)
            except msgspec.DecodeError:
                return self._stop(Outcome(kind="protocol", error="the candidate's process sent a malformed message"))
            if not isinstance(msg, Sandboxed):
                return msg
            if not self._adopt(msg.pid):
                return self._stop(Outcome(kind="protocol", error=f"unexpected sandboxed message (pid {msg.pid})"))

    def _adopt(self, pid: int) -> bool:
        """Take the keeper's word for its child's pid: only once, before anything else, and
        only for a child of the keeper."""
        if self.inner_pid is not None or self.ready is not None or self.process is None:
            return False
        # its parent is the keeper: the judge's process, or that process's child (a keeper
        # started from a fresh interpreter forks once more to shed its threads)
        parent = _parent_of(pid)
        if parent is None and not os.path.exists(f"/proc/{pid}"):
            # gone already, reaped by the keeper (a candidate that failed at once, before the
            # judge read this): nothing to signal; its own message follows
            self.inner_pid = pid
            return True
        if self.process.pid not in (parent, _parent_of(parent) if parent else None):
            return False
        self.inner_pid, self._inner_fd = pid, _pidfd(pid)
        if "pid" not in self.isolation and "user" in self.isolation:
            # no PID namespace to end with it: its processes are found by their user namespace
            with contextlib.suppress(OSError):
                self._userns = os.stat(f"/proc/{pid}/ns/user").st_ino
        return True

    def _dead(self, doing: str) -> Outcome:
        self.process.join(5.0)
        code = self.process.exitcode
        if code is None:
            return self._stop(Outcome(kind="protocol", error=f"channel closed while {doing}", log_tail=self.log_tail()))
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            kind, error = "crash", f"killed by {name} while {doing}"
        else:
            kind, error = "exit", f"exited with code {code} while {doing}"
        return self._stop(Outcome(kind=kind, error=error, log_tail=self.log_tail()))

    def _stop(self, outcome: Outcome) -> Outcome:
        self.outcome, self._clean_failure = outcome, False
        self._kill()
        return outcome

    def _signal(self, sig: int) -> None:
        if self.process is None or self.process.pid is None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.process.pid, sig)

    def _kill(self) -> None:
        self._signal(signal.SIGKILL)
        if self._inner_fd is not None:  # it may have left the group; pid 1's death ends its namespace
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._inner_fd, signal.SIGKILL)
        if self.uid is not None:
            _kill_user(self.uid)
        if self._userns is not None:
            _kill_namespace(self._userns)

    def log_tail(self, limit: int = 1200) -> str:
        """The end of what the candidate printed, without walls of PTX."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("//", "."))]
        tail = "\n".join(lines[-15:])
        return tail[-limit:]
