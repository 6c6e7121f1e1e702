"""Linux namespaces, capabilities and a seccomp filter for one candidate's process tree.

Why this and not bubblewrap or nsjail: both exec a program, and a candidate must not start
a fresh interpreter (importing torch and triton costs seconds; the fork server exists so
that a candidate costs a fork). Neither is installed on every machine the judge runs on
(the H200 hosts have neither and cannot install them), while every Linux kernel the judge
supports has the system calls. So the fork server's child sets the sandbox up itself, in a
few system calls made through ctypes (no dependency, Python 3.10+; `os.unshare` is 3.12+):

- `enter_namespaces` (in the process the judge forked, while it is single-threaded): a new
  user namespace, and PID, mount, network, IPC and UTS namespaces owned by it. Where the
  judge is root, the user namespace's root stands outside for an unprivileged uid of the
  candidate's own (`Identity`: the mapping is written by a child still in the host's
  namespaces, as newuidmap does), else for the judge's own uid. Before it changes user, it
  opens the allowlist its root will be built from (`hold`). Its first child is pid 1 of the
  new PID namespace: when it dies the kernel kills every process in the namespace, whatever
  setsid, setpgid or double fork they did; nothing outside the namespace (the judge, the fork
  server, other candidates) can be seen or signalled. Without a user namespace (`user`
  switched off) the judge must be root.
- `confine` (in that child, pid 1): a new root file system (`_build_root`: a tmpfs with the
  allowlist bound read-only at its own paths, the device nodes it needs, one capped scratch
  file system for /tmp and its own folder, /proc of its own PID namespace (its kernel-settings parts read-only); then
  pivot_root, the host's tree detached), resource limits, every capability dropped
  (bounding set, ambient, securebits locked), no_new_privs, and a seccomp filter that
  refuses ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, bpf, perf events, keyrings,
  module loading, mounts and namespace changes (unshare, setns, clone with a namespace flag,
  clone3).

A seccomp filter is a dozen BPF instructions: built here (`_filter`) for x86-64 and
aarch64, as libseccomp is not everywhere and pyseccomp would be a compiled dependency.

Each protection has a name (`PROTECTIONS`); `probe()` tries them all in a throwaway
process tree and says which hold on this machine, so the judge can say which are off.

>>> sorted(PROTECTIONS)
['caps', 'ipc', 'limits', 'mount', 'net', 'pid', 'seccomp', 'shm', 'user', 'uts']
"""

# One module on purpose, though over 400 lines: the system-call layer of the sandbox (namespaces, mounts, capabilities,
# seccomp BPF) is ordered, privileged set-up that must run in one sequence in the candidate's pid 1; its pieces are
# only meaningful together.

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import platform
import resource
import stat
import struct
import tempfile
from collections.abc import Iterable

import msgspec

__all__ = [
    "PROTECTIONS",
    "Plan",
    "Identity",
    "Held",
    "Report",
    "probe",
    "hold",
    "enter_namespaces",
    "die_with_parent",
    "confine",
    "default_exposed",
    "default_devices",
]

#: Every protection the sandbox knows, and what it stops.
PROTECTIONS: dict[str, str] = {
    "user": "a user namespace: no capability over anything outside, no ptrace or /proc/<pid>/mem of the judge",
    "pid": "a PID namespace: the judge and every other process invisible and unsignalled; the tree dies with it",
    "mount": "a file system built from an allowlist (the interpreter, its packages, the system's libraries, "
    "the device nodes it needs), read-only but for the candidate's own folder and a private, capped /tmp; "
    "/proc of its own (/proc/sys and the other kernel-settings parts read-only); no host socket, no judge temp folder",
    "shm": "a private /dev/shm (else the host's, read-write: CUDA may need it)",
    "net": "no network",
    "ipc": "no System V IPC or message queues shared with the host",
    "uts": "a host name of its own (the host's cannot be changed)",
    "caps": "every capability dropped, no_new_privs",
    "seccomp": "ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, bpf, mounts, namespaces (unshare, setns, "
    "clone with a namespace flag, clone3) refused (and, without a PID namespace, every signal but to itself)",
    "limits": "file size, core dumps and process count limited (per candidate, where the judge is root: its own host uid "
    "and a pids cgroup of its own, evokernel.judge._cgroup)",
}

_CLONE = {
    "user": 0x10000000,
    "pid": 0x20000000,
    "mount": 0x00020000,
    "net": 0x40000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
}
#: clone(2) flags that make a namespace (NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET)
_CLONE_NAMESPACES = 0x7E020000
_MNT_DETACH = 2
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
    host paths its file system is built from (`exposed`, read-only), the device nodes it
    may open (`devices`), the files it must still reach read-write (the judge's CUDA
    block's counter), its limits."""

    protections: frozenset[str] = frozenset(PROTECTIONS)
    work_dir: str = ""
    shared_files: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # more folders it may read (a Triton cache seed): bound read-only
    # the allowlist its root is built from (bound read-only at the same paths); empty: the
    # interpreter, its packages and the system's libraries (`default_exposed`)
    exposed: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # device nodes bound read-write (empty: `default_devices`)
    # the candidate's folder on the private scratch file system (capped with /tmp), not the
    # host's folder (which the judge reads back only for trusted candidates: their Triton cache)
    private_work: bool = False
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE: no file the candidate writes grows past this
    processes: int = 512  # RLIMIT_NPROC (counted for its own host uid: `Identity`)
    tmp_bytes: int = 1 << 30  # the scratch file system: /tmp and (private_work) its folder, together
    shm_bytes: int = 64 << 20  # a private /dev/shm
    host_shm_writable: bool = True  # the host's /dev/shm ("shm" off: CUDA), else read-only but shared_files


class Identity(msgspec.Struct, frozen=True):
    """The host user and group the candidate's root stands for, where the judge is root:
    an unprivileged uid of its own (no host file owned by root is its to write, /proc/sys
    included; its process count is limited as no root's is)."""

    uid: int
    gid: int


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
        "clone": 56,
        "clone3": 435,
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
        "clone": 220,
        "clone3": 435,
    },
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_ARCH = platform.machine()
#: the system calls a candidate is refused (EPERM) once confined
#: (clone is refused only with a namespace flag, clone3 answered ENOSYS: its flags are behind a
#: pointer a filter cannot read, and the C library then falls back to clone)
REFUSED = tuple(n for n in _NR.get(_ARCH, {}) if n not in ("mount_setattr", "clone", "clone3"))


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
def enter_namespaces(
    protections: Iterable[str], identity: Identity | None = None, plan: Plan | None = None
) -> Held | None:
    """Unshare the namespaces among `protections` (the caller must be single-threaded: a
    user namespace demands it). The PID namespace applies to the caller's next child.

    The new user namespace's root is `identity` outside (where the caller is root: a child
    forked before the unshare, still root in the host's namespace, writes the mapping, as
    newuidmap would), else the caller's own user (the only mapping an unprivileged caller
    may make). With a `plan`, returns its allowlist held open (`hold`): opened in the new
    mount namespace (a bind mount takes only its own namespace's mounts) while this process
    is still the user it was (so a Python under a private /root is still in reach)."""
    wanted = set(protections)
    flags = 0
    for name, flag in _CLONE.items():
        if name in wanted:
            flags |= flag
    if not flags:
        return None
    held = None
    if "user" in wanted and identity is not None and os.geteuid() == 0:
        return _unshare_as(flags, identity, "+".join(n for n in _CLONE if n in wanted), plan)
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(ctypes.c_int(flags)), "+".join(n for n in _CLONE if n in wanted), "unshare")
    if "user" in wanted:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    if plan is not None:
        held = hold(plan)
    return held


def _unshare_as(flags: int, identity: Identity, names: str, plan: Plan | None) -> Held | None:
    """unshare(flags) with the new user namespace's root mapped to `identity`: the mapping
    is written from outside, by a child that stays in the host's namespaces as root."""
    os.setgroups([])  # no host group travels in (none is mapped, but each would still count outside)
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    parent = os.getpid()
    child = os.fork()
    if child == 0:  # pragma: no cover - the writer
        os.close(ready_w)
        os.close(done_r)
        code = 1
        try:
            if os.read(ready_r, 1) == b"1":
                _write(f"/proc/{parent}/setgroups", "deny")
                _write(f"/proc/{parent}/uid_map", f"0 {identity.uid} 1")
                _write(f"/proc/{parent}/gid_map", f"0 {identity.gid} 1")
                code = 0
        except OSError as exc:
            os.write(done_w, str(exc.errno or errno.EPERM).encode())
        os._exit(code)
    os.close(ready_r)
    os.close(done_w)
    try:
        err = 0 if _libc.unshare(ctypes.c_int(flags)) == 0 else ctypes.get_errno()
        os.write(ready_w, b"1" if not err else b"0")
        os.close(ready_w)
        ready_w = -1
        said = os.read(done_r, 32)
        _, status = os.waitpid(child, 0)
    finally:
        if ready_w >= 0:
            os.close(ready_w)
        os.close(done_r)
    if err:
        raise SetupError(names, "unshare", err)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SetupError("user", f"map the namespace's root to uid {identity.uid}", int(said or errno.EPERM))
    held = hold(plan) if plan is not None else None  # still the host's root, by ownership
    # the mapping does not change who this process is (still the host's root, unmapped in
    # here): become the namespace's root, that is `identity` outside
    try:
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    except OSError as exc:
        if held is not None:
            held.close()
        raise SetupError("user", f"become uid {identity.uid}", exc.errno or errno.EPERM) from exc
    return held


# -- the allowlist a candidate's root is built from --------------------------------------------
def default_exposed() -> tuple[str, ...]:
    """The host paths a candidate's file system is built from, besides its own folder: the
    system's programs and libraries (/usr, the merged-/usr links, /etc, /sys, /opt where the
    interpreter lives there), and this interpreter's prefixes (a Python or a virtual
    environment under a private /root stays reachable). Folders of the judge's own imports
    that live elsewhere are the caller's to add (`evokernel.judge.sandbox.exposed_paths`)."""
    import sys

    paths = ["/usr", "/etc", "/sys"]
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
        if os.path.isdir(top) and not os.path.islink(top):
            paths.append(top)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        paths.append(os.path.realpath(prefix))
        paths.append(os.path.abspath(prefix))
    paths += _compiler_prefixes()
    return tuple(dict.fromkeys(paths))


def _compiler_prefixes() -> list[str]:
    """Where the C compiler Triton builds its host helpers with lives, when outside /usr
    ($CC, else gcc, else clang on PATH: /opt/gcc on the GPU machines, a /nix/store tree):
    its prefix (the folder above its bin/), never / or a home."""
    import shutil

    found: list[str] = []
    for name in (os.environ.get("CC"), "gcc", "clang"):  # the order Triton picks in
        exe = shutil.which(name) if name else None
        if not exe:
            continue
        for path in (os.path.abspath(exe), os.path.realpath(exe)):
            if path.startswith("/nix/store/"):
                found.append("/nix/store")
                continue
            prefix = os.path.dirname(os.path.dirname(path))
            if prefix not in ("/", "/usr", "/root", "/home") and not prefix.startswith(("/home/", "/root/")):
                found.append(prefix)
        break
    return list(dict.fromkeys(found))


#: device nodes every candidate may open (CUDA's are added where they exist)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def default_devices() -> tuple[str, ...]:
    """/dev/null and the like, and the NVIDIA driver's nodes where there are any."""
    import glob

    nvidia = sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/nvidia-caps/*"))
    return tuple(p for p in (*_DEVICES, *nvidia) if os.path.exists(p) and not os.path.isdir(p))


class Held(msgspec.Struct):
    """The allowlist's paths, each opened (O_PATH) while the process could still reach it:
    once its root is another user, a path under a private folder (/root) is out of its
    reach, but a bind mount from the open descriptor is not. `close()` before any candidate
    code runs: a descriptor of a host folder would be a way out of the new root."""

    fds: dict[str, int]  # path -> descriptor
    links: dict[str, str]  # path -> symbolic link target (top-level links such as /lib -> usr/lib)

    def close(self) -> None:
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def hold(plan: Plan) -> Held:
    """Open every path the candidate's root is built from (call it before `enter_namespaces`
    where the candidate's root becomes another user)."""
    fds: dict[str, int] = {}
    links: dict[str, str] = {}
    if "mount" not in plan.protections:
        return Held(fds, links)
    wanted = list(plan.exposed or default_exposed()) + list(plan.readable)
    wanted += list(plan.devices or default_devices()) + list(plan.shared_files)
    if plan.work_dir and not plan.private_work:
        wanted.append(plan.work_dir)
    if "shm" not in plan.protections and os.path.isdir("/dev/shm"):
        wanted.append("/dev/shm")
    if "pid" not in plan.protections:
        wanted.append("/proc")
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
        if os.path.islink(top):
            links[top] = os.readlink(top)
    for path in wanted:
        path = os.path.abspath(path)
        if path in fds or path in links:
            continue
        if os.path.islink(path):
            links[path] = os.path.realpath(path)
            path = os.path.realpath(path)
            if path in fds:
                continue
        try:
            fds[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # not on this machine: nothing to bind
    return Held(fds, links)


# -- pid 1 of the new namespace, before the candidate's code ----------------------------------
def die_with_parent() -> None:
    """SIGKILL this process when the process that forked it dies (whatever the candidate
    then does to its process group); its death, pid 1's, ends the whole namespace."""
    _prctl(_PR_SET_PDEATHSIG, 9, "pid")


def confine(plan: Plan, held: Held | None = None) -> None:
    """Narrow this process (and all it will start) to `plan`. `held`: the allowlist opened
    before this process's root became another user (`hold`); opened here when not given.
    Raises SetupError naming the protection that failed."""
    on = plan.protections
    if "mount" in on:
        held = held if held is not None else hold(plan)
        try:
            _build_root(plan, held, own_proc="pid" in on)
        finally:
            held.close()
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


#: where the new root is assembled (a tmpfs mounted over it in the candidate's mount namespace
#: only; every path the root needs was opened before, so hiding the host's /tmp costs nothing)
_STAGE = "/tmp"


#: what of /etc stays out of a candidate's sight, whoever it is outside
_MASKED_FILES = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
)
_MASKED_DIRS = ("/etc/ssh", "/etc/sudoers.d", "/etc/ssl/private")
#: what of a candidate's own /proc stays read-only (as container runtimes keep it): the kernel's
#: settings, interrupts, buses, file systems and the SysRq trigger
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mount_point(target: str, directory: bool) -> None:
    if directory:
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))


def _bind(fd: int, target: str, writable: bool | None) -> None:
    """Bind what `fd` holds at `target`: read-only, read-write, or (None) as the host has it."""
    directory = os.path.isdir(f"/proc/self/fd/{fd}")
    _mount_point(target, directory)
    _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
    if writable:
        _mount_setattr(target, clear=_MOUNT_ATTR_RDONLY)
    elif writable is not None:
        _mount_setattr(target, set_=_MOUNT_ATTR_RDONLY)


def _build_root(plan: Plan, held: Held, own_proc: bool) -> None:
    """A new root file system from the allowlist (bubblewrap's way, in a few system calls):
    a tmpfs with the allowed host paths bound read-only at their own paths, the device
    nodes, a private capped scratch file system for /tmp and the candidate's folder, /proc
    of its own PID namespace (read-only), then pivot_root into it and the host's tree
    detached. What is not on the list (the judge's files and temp folders, the fork
    server's socket, every host Unix socket under /run, /var or /tmp, other users' homes)
    does not exist in there."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here reaches the host
    stage = _STAGE
    _mount("tmpfs", stage, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=16m,mode=0755")
    # scratch: /tmp (and the candidate's folder on it, below): one cap for both
    os.makedirs(stage + "/tmp", exist_ok=True)
    _mount("tmpfs", stage + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={plan.tmp_bytes},mode=1777")
    fds = held.fds
    shared = set(plan.shared_files)
    devices = set(plan.devices or default_devices())
    writable_dirs = {"/dev/shm"} if "shm" not in plan.protections else set()
    if plan.work_dir and not plan.private_work:
        writable_dirs.add(plan.work_dir)
    bound: list[str] = []
    # parents before children; a path inside a tree bound already is visible through it
    for path in sorted(fds, key=lambda p: (p.count("/"), p)):
        if path in devices or path in shared or path in writable_dirs or path == "/proc":
            continue
        if _inside(path, bound):
            continue
        _bind(fds[path], stage + path, writable=False)
        bound.append(path)
    for link, target in held.links.items():
        if not os.path.lexists(stage + link) and not _inside(link, bound):
            os.makedirs(os.path.dirname(stage + link), exist_ok=True)
            os.symlink(target, stage + link)
    # secrets of the host's under /etc (shadow files, SSH host keys, sudo's rules): masked, for a
    # candidate whose root is the host's root outside (a CUDA one, or a judge without user mapping)
    for secret in _MASKED_FILES:
        if os.path.isfile(stage + secret) and not os.path.islink(stage + secret):
            _mount("/dev/null", stage + secret, None, _MS_BIND)
    for secret in _MASKED_DIRS:
        if os.path.isdir(stage + secret) and not os.path.islink(stage + secret):
            _mount("tmpfs", stage + secret, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY, "size=4k,mode=0755")
    # a temp folder of the judge's (the fork server's socket is there) inside a bound tree: covered
    for hidden in {tempfile.gettempdir(), "/var/tmp", "/run", "/var/run"}:
        hidden = os.path.realpath(hidden)
        if hidden != "/tmp" and _inside(hidden, bound) and os.path.isdir(stage + hidden):
            _mount("tmpfs", stage + hidden, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY, "size=4k,mode=0755")
    # /dev: the allowed nodes, /dev/fd and the standard streams, a private or the host's /dev/shm
    os.makedirs(stage + "/dev", mode=0o755, exist_ok=True)
    for path in sorted(devices):
        if path in fds:
            _bind(fds[path], stage + path, writable=None)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, f"{stage}/dev/{name}")
    os.symlink("/proc/self/fd/2", f"{stage}/dev/stderr")
    if "shm" in plan.protections:
        os.makedirs(stage + "/dev/shm", exist_ok=True)
        _mount("tmpfs", stage + "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={plan.shm_bytes},mode=1777")
    elif "/dev/shm" in fds:
        _bind(fds["/dev/shm"], stage + "/dev/shm", writable=plan.host_shm_writable)
    # the candidate's folder: on the scratch file system, or the host's (a trusted candidate's)
    if plan.work_dir:
        if plan.private_work:
            if _inside(plan.work_dir, ["/tmp"]):
                os.makedirs(stage + plan.work_dir, mode=0o700, exist_ok=True)
            else:
                scratch = f"{stage}/tmp/.work"
                os.makedirs(scratch, mode=0o700, exist_ok=True)
                _mount_point(stage + plan.work_dir, directory=True)
                _mount(scratch, stage + plan.work_dir, None, _MS_BIND)
        elif plan.work_dir in fds:
            _bind(fds[plan.work_dir], stage + plan.work_dir, writable=True)
    for path in plan.shared_files:  # the judge's CUDA block's counter, where /dev/shm is private or read-only
        if path in fds and not (
            path.startswith("/dev/shm/") and "shm" not in plan.protections and plan.host_shm_writable
        ):
            _bind(fds[path], stage + path, writable=True)
    os.makedirs(stage + "/proc", exist_ok=True)
    if own_proc:
        try:
            # writable where it is the candidate's own (the NVIDIA driver's cuInit fails with
            # error 304 on a read-only /proc), read-only where it reaches the kernel's
            # settings or hardware (/proc/sys: core_pattern, drop_caches, the host's name)
            _mount("proc", stage + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
            for part in _PROC_READ_ONLY:
                if os.path.lexists(stage + "/proc/" + part):
                    fd = os.open(stage + "/proc/" + part, os.O_PATH | os.O_CLOEXEC)
                    try:
                        _bind(fd, stage + "/proc/" + part, writable=False)
                    finally:
                        os.close(fd)
        except SetupError:
            # a host that hides parts of its /proc (a container) refuses a new one: an empty
            # /proc then, never the host's (it would list the judge)
            _mount("tmpfs", stage + "/proc", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY, "size=4k")
    elif "/proc" in fds:
        _bind(fds["/proc"], stage + "/proc", writable=False)
    held.close()
    _close_directories()
    old = stage + "/.old-root"
    os.makedirs(old, exist_ok=True)
    _mount_setattr(stage, set_=_MOUNT_ATTR_RDONLY, recursive=False)  # the skeleton itself: read-only
    _pivot_root(stage, old)
    os.chdir("/")
    _check(_libc.umount2(b"/.old-root", ctypes.c_int(_MNT_DETACH)), "mount", "detach the host's tree")


def _close_directories() -> None:
    """Close every descriptor of a folder (or an O_PATH one) this process inherited: through
    one, openat(fd, "..") would lead out of the new root."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            if flags & os.O_PATH or stat.S_ISDIR(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            continue


def _pivot_root(new_root: str, put_old: str) -> None:
    nr = _NR.get(_ARCH, {}).get("pivot_root")
    if nr is None:
        raise SetupError("mount", "pivot_root", errno.ENOSYS)
    _check(_libc.syscall(ctypes.c_long(nr), os.fsencode(new_root), os.fsencode(put_old)), "mount", "pivot_root")


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
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | errno.EPERM
    enosys = 0x00050000 | errno.ENOSYS
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
    ins += [(jeq, "clone", None, _NR[arch]["clone"]), (jeq, "enosys", None, _NR[arch]["clone3"])]
    ins.append((ret, None, None, allow))
    labels = {"clone": len(ins)}
    ins += [(ld_abs, None, None, 16), (jset, "deny", "allow", _CLONE_NAMESPACES)]  # flags: args[0], low half
    labels["enosys"] = len(ins)
    ins.append((ret, None, None, enosys))
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
