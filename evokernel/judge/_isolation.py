"""Linux namespaces, capabilities and a seccomp filter for one candidate's process tree.

Why this and not bubblewrap or nsjail: both exec a program, and a candidate must not start
a fresh interpreter (importing torch and triton costs seconds; the fork server exists so
that a candidate costs a fork). Neither is installed on every machine the judge runs on
(the H200 hosts have neither and cannot install them), while every Linux kernel the judge
supports has the system calls. So the fork server's child sets the sandbox up itself, in a
few system calls made through ctypes (no dependency, Python 3.10+; `os.unshare` is 3.12+):

- `enter_namespaces` (in the process the judge forked, while it is single-threaded): a new
  user namespace (its uid 0 is the judge's own uid outside: a Python under a private /root
  stays readable), and PID, mount, network and IPC namespaces owned by it. Its first child
  is pid 1 of the new PID namespace: when it dies the kernel kills every process in the
  namespace, whatever setsid, setpgid or double fork they did; nothing outside the
  namespace (the judge, the fork server, other candidates) can be seen or signalled.
  Without a user namespace (`user` switched off) the judge must be root.
- `confine` (in that child, pid 1): every mount read-only and private, then writable only
  the candidate's own folder, a private /tmp and /dev/shm (tmpfs, capped), the one
  reference-counter file of the judge's CUDA block; /proc of its own PID namespace. Then
  resource limits, every capability dropped (bounding set, ambient, securebits locked),
  no_new_privs, and a seccomp filter that refuses ptrace, process_vm_readv/writev, kcmp,
  pidfd_getfd, bpf, perf events, keyrings, module loading, mounts and namespace changes.

A seccomp filter is a dozen BPF instructions: built here (`_filter`) for x86-64 and
aarch64, as libseccomp is not everywhere and pyseccomp would be a compiled dependency.

Each protection has a name (`PROTECTIONS`); `probe()` tries them all in a throwaway
process tree and says which hold on this machine, so the judge can say which are off.

>>> sorted(PROTECTIONS)
['caps', 'ipc', 'limits', 'mount', 'net', 'pid', 'seccomp', 'shm', 'user']
"""

# One module on purpose, though over 400 lines: the system-call layer of the sandbox (namespaces, mounts, capabilities,
# seccomp BPF) is ordered, privileged set-up that must run in one sequence in the candidate's pid 1; its pieces are
# only meaningful together.

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import resource
import struct
import tempfile
from collections.abc import Iterable

import msgspec

__all__ = ["PROTECTIONS", "Plan", "Report", "probe", "enter_namespaces", "die_with_parent", "confine"]

#: Every protection the sandbox knows, and what it stops.
PROTECTIONS: dict[str, str] = {
    "user": "a user namespace: no capability over anything outside, no ptrace or /proc/<pid>/mem of the judge",
    "pid": "a PID namespace: the judge and every other process invisible and unsignalled; the tree dies with it",
    "mount": "a read-only file system except the candidate's own folder and a private /tmp",
    "shm": "a private /dev/shm (else the host's, read-write: CUDA may need it)",
    "net": "no network",
    "ipc": "no System V IPC or message queues shared with the host",
    "caps": "every capability dropped, no_new_privs",
    "seccomp": "ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, bpf, mounts, namespaces refused "
    "(and, without a PID namespace, every signal but to itself)",
    "limits": "file size, core dumps and (where the judge is not root: the kernel exempts uid 0) process count limited",
}

_CLONE = {"user": 0x10000000, "pid": 0x20000000, "mount": 0x00020000, "net": 0x40000000, "ipc": 0x08000000}
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_SECUREBITS = 1, 24, 28
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, _PR_SET_SECCOMP = 38, 47, 4, 22
_SECBITS_LOCKED_NOROOT = 0x2F  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED and their locks

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """What to set up for one candidate: the protections wanted, its writable folder, the
    files it must still reach read-write (the judge's CUDA block's counter), its limits."""

    protections: frozenset[str] = frozenset(PROTECTIONS)
    work_dir: str = ""
    shared_files: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # folders hidden by the private /tmp that it may read (a Triton cache seed)
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE: no file the candidate writes grows past this
    processes: int = 512  # RLIMIT_NPROC
    tmp_bytes: int = 1 << 30  # the private /tmp and /dev/shm, each


class Report(msgspec.Struct, frozen=True):
    """Which protections hold (`on`) and why each other one is off (`off`: name -> reason)."""

    on: frozenset[str]
    off: dict[str, str]

    def describe(self) -> str:
        if not self.off:
            return "sandbox: every protection on (" + ", ".join(sorted(self.on)) + ")"
        return "sandbox: " + "; ".join(f"{k} off ({v})" for k, v in sorted(self.off.items()))


class SetupError(OSError):
    """A protection could not be set up: which one, and the system's reason."""

    def __init__(self, protection: str, what: str, err: int) -> None:
        super().__init__(err, f"{protection}: {what}: {os.strerror(err)}")
        self.protection = protection


def _check(ret: int, protection: str, what: str) -> int:
    if ret < 0:
        raise SetupError(protection, what, ctypes.get_errno())
    return ret


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), "mount", f"mount {target}"
    )


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_NR = {  # the few system call numbers called or refused here, per architecture
    "x86_64": {
        "mount_setattr": 442,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kcmp": 312,
        "pidfd_getfd": 438,
        "bpf": 321,
        "perf_event_open": 298,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "setns": 308,
        "unshare": 272,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "reboot": 169,
        "swapon": 167,
        "swapoff": 168,
        "userfaultfd": 323,
        "acct": 163,
        "syslog": 103,
        "open_by_handle_at": 304,
        "process_madvise": 440,
        "iopl": 172,
        "ioperm": 173,
    },
    "aarch64": {
        "mount_setattr": 442,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "kcmp": 272,
        "pidfd_getfd": 438,
        "bpf": 280,
        "perf_event_open": 241,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "setns": 268,
        "unshare": 97,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "reboot": 142,
        "swapon": 224,
        "swapoff": 225,
        "userfaultfd": 282,
        "acct": 89,
        "syslog": 116,
        "open_by_handle_at": 265,
        "process_madvise": 440,
    },
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_ARCH = platform.machine()
#: the system calls a candidate is refused (EPERM) once confined
REFUSED = tuple(n for n in _NR.get(_ARCH, {}) if n != "mount_setattr")


def _mount_setattr(path: str, *, set_: int = 0, clear: int = 0, recursive: bool = True) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    nr = _NR.get(_ARCH, {}).get("mount_setattr")
    if nr is None:
        raise SetupError("mount", "mount_setattr", errno.ENOSYS)
    _check(
        _libc.syscall(
            ctypes.c_long(nr),
            ctypes.c_int(_AT_FDCWD),
            os.fsencode(path),
            ctypes.c_uint(_AT_RECURSIVE if recursive else 0),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        "mount",
        f"mount_setattr {path}",
    )


def _prctl(option: int, arg: int = 0, protection: str = "caps") -> int:
    return _check(
        _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)),
        protection,
        f"prctl {option}",
    )


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# -- the process the judge forked -----------------------------------------------------------
def enter_namespaces(protections: Iterable[str]) -> None:
    """Unshare the namespaces among `protections` (the caller must be single-threaded: a
    user namespace demands it). The PID namespace applies to the caller's next child."""
    wanted = set(protections)
    uid, gid = os.geteuid(), os.getegid()
    flags = 0
    for name, flag in _CLONE.items():
        if name in wanted:
            flags |= flag
    if not flags:
        return
    _check(_libc.unshare(ctypes.c_int(flags)), "+".join(n for n in _CLONE if n in wanted), "unshare")
    if "user" in wanted:  # its root is the caller's own user outside: the only mapping an unprivileged caller may make
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")


# -- pid 1 of the new namespace, before the candidate's code ----------------------------------
def die_with_parent() -> None:
    """SIGKILL this process when the process that forked it dies (whatever the candidate
    then does to its process group); its death, pid 1's, ends the whole namespace."""
    _prctl(_PR_SET_PDEATHSIG, 9, "pid")


def confine(plan: Plan) -> None:
    """Narrow this process (and all it will start) to `plan`. Raises SetupError naming the
    protection that failed."""
    on = plan.protections
    if "mount" in on:
        _confine_mounts(plan, own_proc="pid" in on)
    if plan.work_dir:
        os.chdir(plan.work_dir)
    if "limits" in on:
        resource.setrlimit(resource.RLIMIT_FSIZE, (plan.file_bytes, plan.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (plan.processes, plan.processes))
    if "caps" in on:
        _drop_capabilities()
    if "seccomp" in on:
        # without a PID namespace the judge is in sight: no signal but to itself
        _install_filter(REFUSED, own_pid=None if "pid" in on else os.getpid())


def _confine_mounts(plan: Plan, own_proc: bool) -> None:
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here reaches the host
    # what stays writable (the candidate's folder; the judge's CUDA block's reference counter
    # in /dev/shm), held before the private tmpfs hide them, bound back on top afterwards
    keep = [(p, True) for p in ([plan.work_dir] if plan.work_dir else []) + list(plan.shared_files)]
    keep += [(p, False) for p in plan.readable]
    held = [(path, os.open(path, os.O_PATH), writable) for path, writable in keep if os.path.exists(path)]
    try:
        _mount_setattr("/", set_=_MOUNT_ATTR_RDONLY)
        if "shm" not in plan.protections and os.path.isdir("/dev/shm"):
            _mount_setattr("/dev/shm", clear=_MOUNT_ATTR_RDONLY)
        for place in ("/tmp", "/dev/shm") if "shm" in plan.protections else ("/tmp",):
            if os.path.isdir(place):
                _mount("tmpfs", place, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={plan.tmp_bytes},mode=1777")
        for path, fd, writable in held:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, exist_ok=True)
            elif not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
            if writable:
                _mount_setattr(path, clear=_MOUNT_ATTR_RDONLY)
            else:
                _mount_setattr(path, set_=_MOUNT_ATTR_RDONLY)
    finally:
        for _, fd, _ in held:
            os.close(fd)
    if own_proc:
        try:
            _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        except SetupError:
            # a host that hides parts of its /proc (a container) refuses a new one: an empty
            # /proc then, never the host's (it would list the judge)
            _mount("tmpfs", "/proc", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY, "size=4k")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    _prctl(_PR_SET_SECUREBITS, _SECBITS_LOCKED_NOROOT)  # uid 0 never regains them through execve
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    for cap in range(64):
        if (
            _libc.prctl(
                ctypes.c_int(_PR_CAPBSET_DROP),
                ctypes.c_ulong(cap),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
            )
            < 0
        ):
            if ctypes.get_errno() == errno.EINVAL:  # past the last capability this kernel knows
                break
            raise SetupError("caps", f"drop capability {cap}", ctypes.get_errno())
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "caps", "capset")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


# -- seccomp -----------------------------------------------------------------------------------
class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_SIGNALS = {  # calls that signal a process named by their first argument
    "x86_64": {
        "kill": 62,
        "tkill": 200,
        "tgkill": 234,
        "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297,
        "pidfd_open": 434,
        "pidfd_send_signal": 424,
    },
    "aarch64": {
        "kill": 129,
        "tkill": 130,
        "tgkill": 131,
        "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240,
        "pidfd_open": 434,
        "pidfd_send_signal": 424,
    },
}


def _filter(refused: Iterable[str], arch: str = _ARCH, own_pid: int | None = None) -> bytes:
    """A classic-BPF seccomp program: foreign architectures killed, x32 calls and `refused`
    answered EPERM, everything else allowed. With `own_pid` (no PID namespace to hide the
    judge), signals too are refused unless their first argument is `own_pid` (a process may
    still signal itself), and pidfds are refused."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | errno.EPERM
    numbers = {_NR[arch][n] for n in refused}
    signals: set[int] = set()
    if own_pid is not None:
        table = _SIGNALS[arch]
        numbers |= {table["pidfd_open"], table["pidfd_send_signal"]}
        signals = {nr for name, nr in table.items() if not name.startswith("pidfd")}
    # (code, true target, false target, k): targets are labels or None (the next instruction)
    ins: list[tuple[int, str | None, str | None, int]] = [
        (ld_abs, None, None, 4),
        (jeq, None, "kill", _AUDIT_ARCH[arch]),
        (ld_abs, None, None, 0),
    ]
    if arch == "x86_64":
        ins.append((jge, "deny", None, 0x40000000))  # the x32 ABI: refused whole
    ins += [(jeq, "deny", None, nr) for nr in sorted(numbers)]
    ins += [(jeq, "signal", None, nr) for nr in sorted(signals)]
    ins.append((ret, None, None, allow))
    labels = {}
    if signals:
        labels["signal"] = len(ins)
        ins += [(ld_abs, None, None, 16), (jeq, "allow", "deny", own_pid or 0)]  # args[0], low half
    labels["allow"] = len(ins)
    ins.append((ret, None, None, allow))
    labels["kill"] = len(ins)
    ins.append((ret, None, None, kill))
    labels["deny"] = len(ins)
    ins.append((ret, None, None, eperm))

    def offset(i: int, label: str | None) -> int:
        return 0 if label is None else labels[label] - i - 1

    return b"".join(struct.pack("HBBI", code, offset(i, t), offset(i, f), k) for i, (code, t, f, k) in enumerate(ins))


def _install_filter(refused: Iterable[str], own_pid: int | None = None) -> None:
    if _ARCH not in _NR:
        raise SetupError("seccomp", f"no system call table for {_ARCH}", errno.ENOSYS)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "seccomp")
    program = _filter(refused, own_pid=own_pid)
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p).value)
    _check(
        _libc.prctl(
            ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0)
        ),
        "seccomp",
        "install the filter",
    )


# -- which protections hold here ----------------------------------------------------------------
def probe(wanted: Iterable[str] = tuple(PROTECTIONS)) -> Report:
    """Set every protection in `wanted` up in a throwaway process tree and report which hold.

    Forks (the caller may be multi-threaded: the child only makes system calls and exits).
    A protection that fails is dropped and the rest tried again, so one missing feature
    (a host that forbids user namespaces) does not hide the others."""
    on = set(wanted) & set(PROTECTIONS)
    off: dict[str, str] = {n: "switched off" for n in set(PROTECTIONS) - on}
    if "shm" in on and "mount" not in on:
        on.discard("shm")
        off["shm"] = "needs the mount namespace"
    while True:
        failed = _try(frozenset(on))
        if failed is None:
            return Report(frozenset(on), off)
        name, reason = failed
        if name not in on:  # a failure this loop cannot attribute: everything off
            return Report(frozenset(), {**off, **{n: reason for n in on}})
        on.discard(name)
        off[name] = reason
        if name == "mount" and "shm" in on:
            on.discard("shm")
            off["shm"] = "needs the mount namespace"
        if name == "user" and os.geteuid() != 0:  # the other namespaces need it when not root
            for n in ("pid", "mount", "net", "ipc"):
                if n in on:
                    on.discard(n)
                    off[n] = "needs a user namespace (the judge is not root)"


def _try(protections: frozenset[str]) -> tuple[str, str] | None:
    """Run enter_namespaces + confine in a grandchild; None if all held, else (name, reason)."""
    import warnings

    work = tempfile.mkdtemp(prefix="evokernel-probe-")
    r, w = os.pipe()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork in a threaded judge: only syscalls follow
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(r)
            code = 0
            try:
                enter_namespaces(protections)
                inner = os.fork()
                if inner == 0:
                    try:
                        if "pid" in protections:
                            die_with_parent()
                        confine(Plan(protections=protections, work_dir=work))
                        if "pid" in protections and os.getpid() != 1:
                            raise SetupError("pid", "not pid 1 of its namespace", errno.EINVAL)
                        os.write(w, b"ok")
                    except SetupError as exc:
                        os.write(w, f"{exc.protection}\0{exc.strerror}".encode())
                    except BaseException as exc:
                        os.write(w, f"?\0{type(exc).__name__}: {exc}".encode())
                    os._exit(0)
                os.waitpid(inner, 0)
            except SetupError as exc:
                first = exc.protection.split("+")[0]
                os.write(w, f"{first}\0{exc.strerror}".encode())
            except BaseException as exc:
                os.write(w, f"?\0{type(exc).__name__}: {exc}".encode())
            os._exit(code)
        os.close(w)
        w = -1
        data = b""
        while chunk := os.read(r, 4096):
            data += chunk
        os.waitpid(pid, 0)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
        os.rmdir(work) if os.path.isdir(work) else None
    if data == b"ok":
        return None
    name, _, reason = data.decode(errors="replace").partition("\0")
    return name, reason or "the probe died"
