"""A pids cgroup per candidate: a cap on its processes and threads that holds whoever it is.

`RLIMIT_NPROC` counts the processes of a host user, and the kernel never applies it to the
host's root: a CUDA candidate (its root is the judge's user outside, root where the judge is
root) could fork without end. A cgroup's `pids.max` caps every task in the group, whatever
its user. The judge (root) makes one group per candidate under its own cgroup (cgroup v2,
or v1's pids hierarchy), the candidate's keeper joins it before it enters the namespaces,
and everything it starts stays in it; the group is removed once its tasks are gone.

Where there is no pids controller to use (not root, no cgroup file system, a v2 cgroup
whose controllers cannot be delegated), `PidsGroup.create` returns None with the reason in
`unavailable()`, and RLIMIT_NPROC alone limits candidates that are not root outside.
"""

from __future__ import annotations

import contextlib
import itertools
import os

__all__ = ["PidsGroup", "unavailable"]

_ROOT = "/sys/fs/cgroup"
_COUNTER = itertools.count()
_BASE: list[str | None] = []  # the folder groups are made in, once found ([] : not looked yet)
_WHY: list[str] = [""]


def _own_path(controller: str | None) -> str:
    """This process's cgroup path in the v2 hierarchy (None) or in v1's `controller` one."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if (controller is None and names == "") or (controller and controller in names.split(",")):
                return path
    return "/"


def _find_base() -> str | None:
    if os.geteuid() != 0:
        _WHY[0] = "the judge is not root"
        return None
    v2 = os.path.join(_ROOT, "cgroup.controllers")
    try:
        if os.path.isfile(v2):
            with open(v2) as f:
                if "pids" not in f.read().split():
                    _WHY[0] = "cgroup v2 without the pids controller"
                    return None
            base = os.path.normpath(_ROOT + _own_path(None))
            with open(os.path.join(base, "cgroup.subtree_control")) as f:
                enabled = f.read().split()
            if "pids" not in enabled:
                # fails where this cgroup holds processes itself and is not the root one
                with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                    f.write("+pids")
            return base
        v1 = os.path.join(_ROOT, "pids")
        if os.path.isfile(os.path.join(v1, "cgroup.procs")):
            return os.path.normpath(v1 + _own_path("pids"))
    except OSError as exc:
        _WHY[0] = f"the pids controller cannot be used here ({exc.strerror or exc})"
        return None
    _WHY[0] = "no cgroup file system with a pids controller"
    return None


def unavailable() -> str | None:
    """Why candidates get no pids cgroup here, or None where they do."""
    if not _BASE:
        _BASE.append(_find_base())
        if _BASE[0]:
            _sweep_stale(_BASE[0])
            if not _joinable(_BASE[0]):
                _BASE[0] = None
    return None if _BASE[0] else _WHY[0]


def _joinable(base: str) -> bool:
    """Whether a process can join a group made here (a forked child tries, then exits): a
    keeper that could not would fail its candidate, so a host where joining fails gets no
    groups at all rather than no verdicts."""
    import warnings

    path = os.path.join(base, f"evokernel-{os.getpid()}-probe")
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        _WHY[0] = f"cannot make a cgroup ({exc.strerror or exc})"
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork in a threaded judge: only a write follows
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                join(os.path.join(path, "cgroup.procs"))
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            _WHY[0] = "a process cannot join a cgroup made here"
            return False
        return True
    finally:
        for _ in range(100):  # the child has exited; its group empties at once
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                import time

                time.sleep(0.01)


def _sweep_stale(base: str) -> None:
    """Remove the empty groups a judge that is gone (killed before it could) left behind."""
    for name in os.listdir(base):
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "evokernel" or not parts[1].isdigit():
            continue
        if os.path.exists(f"/proc/{parts[1]}"):
            continue  # its judge is alive: its own to remove
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(base, name))  # fails while tasks are left in it


class PidsGroup:
    """One candidate's group: `procs` is the file its keeper writes its pid into."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.procs = os.path.join(path, "cgroup.procs")

    @classmethod
    def create(cls, limit: int) -> PidsGroup | None:
        """A new group capped at `limit` tasks (processes and threads), or None (`unavailable`)."""
        if unavailable():
            return None
        path = os.path.join(_BASE[0] or "", f"evokernel-{os.getpid()}-{next(_COUNTER)}")
        try:
            os.mkdir(path, 0o755)
        except OSError as exc:
            _WHY[0] = f"cannot make a cgroup ({exc.strerror or exc})"
            _BASE[0] = None
            return None
        try:
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(limit))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            _WHY[0] = f"cannot set pids.max ({exc.strerror or exc})"
            _BASE[0] = None
            return None
        return cls(path)

    def tasks(self) -> int:
        """How many tasks are in the group now (0 once it is removed)."""
        try:
            with open(os.path.join(self.path, "pids.current")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return 0

    def remove(self) -> bool:
        """Remove the group; False while tasks are left in it (try again later)."""
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


def join(procs: str) -> None:
    """Put the calling process (and so everything it starts) into the group whose
    `cgroup.procs` file is `procs`; raises OSError."""
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
