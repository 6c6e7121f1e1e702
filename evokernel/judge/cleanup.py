"""Remove a candidate's folder, whatever it made there, without ever raising.

A candidate owns its folder and may leave anything in it: a chain of folders 20,000 deep
(`shutil.rmtree` recurses once per level and raises RecursionError, its `ignore_errors`
notwithstanding; the paths pass PATH_MAX), folders without permissions, symbolic links to
the judge's files. `remove_tree` walks the tree without recursion, by file descriptors and
names relative to them (no path is ever longer than one name), never follows a link, and
gives itself the permissions a folder lacks. What still cannot be removed is moved into
`evokernel-quarantine/` under the system's temporary folder, and said (a warning on the
`evokernel.judge` logger): the judge goes on either way.

>>> import os, tempfile
>>> top = tempfile.mkdtemp()
>>> fd = os.open(top, os.O_RDONLY)
>>> for _ in range(3000):  # deeper than Python's recursion limit
...     os.mkdir("d", dir_fd=fd)
...     inner = os.open("d", os.O_RDONLY, dir_fd=fd)
...     os.close(fd)
...     fd = inner
>>> os.symlink("/etc", "link", dir_fd=fd)
>>> os.chmod(fd, 0)
>>> os.close(fd)
>>> remove_tree(top) is None, os.path.exists(top), os.path.isdir("/etc")
(True, False, True)
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile
import uuid
from collections.abc import Callable

__all__ = ["remove_tree", "QUARANTINE"]

log = logging.getLogger("evokernel.judge")

#: Where a folder that cannot be removed is moved (created when first needed).
QUARANTINE = "evokernel-quarantine"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str | os.PathLike[str]) -> str | None:
    """Remove `path` (a folder, a file or a link; a link is removed, never followed) and all
    under it. Returns None when it is gone (or was never there); otherwise where it is now:
    in the quarantine folder, or at `path` if it could not even be moved there (both
    logged). Never raises, but for KeyboardInterrupt and the like."""
    path = os.fspath(path)
    head, name = os.path.split(os.path.abspath(path))
    try:
        parent = os.open(head, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        log.warning("cannot remove %s: %s", path, exc)
        return path
    try:
        try:
            _remove(parent, name)
            return None
        except FileNotFoundError:
            return None
        except Exception as exc:  # anything at all: the judge must go on
            why = f"{type(exc).__name__}: {exc}"
        return _quarantine(parent, name, path, why)
    finally:
        os.close(parent)


def _remove(parent: int, name: str) -> None:
    """Remove `name` in the folder `parent` (a descriptor) and everything under it. A stack
    of (name, identity, names left to visit) per level, one descriptor open at a time: the
    way back up is "..", checked against the identity recorded on the way down."""
    if not stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = _open_dir(parent, name)
    stack: list[tuple[str, tuple[int, int], list[str]]] = [(name, _identity(fd), _empty_files(fd))]
    try:
        while True:
            _, _, left = stack[-1]
            if left:
                child = left.pop()
                inner = _open_dir(fd, child)
                os.close(fd)
                fd = inner
                stack.append((child, _identity(fd), _empty_files(fd)))
                continue
            done, _, _ = stack.pop()
            if not stack:
                break
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            if _identity(fd) != stack[-1][1]:  # moved while we were below: stop, quarantine it
                raise OSError(errno.ESTALE, "the folder moved while it was being removed")
            _retry(fd, lambda: os.rmdir(done, dir_fd=fd))
    finally:
        os.close(fd)
    _retry(parent, lambda: os.rmdir(name, dir_fd=parent))


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_dir(parent: int, name: str) -> int:
    """Open the folder `name` (never a link), giving it the permissions it lacks if needed."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent)  # a folder (lstat said so): no link to follow
        return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _empty_files(fd: int) -> list[str]:
    """Remove every entry of the folder `fd` that is not a folder; returns the folders' names."""
    with contextlib.suppress(OSError):  # read and search it (no write: entries cannot go)
        mode = os.fstat(fd).st_mode
        if mode & 0o700 != 0o700:
            os.fchmod(fd, 0o700)
    folders = []
    with os.scandir(fd) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if is_dir:
            folders.append(name)
        else:
            _retry(fd, lambda name=name: os.unlink(name, dir_fd=fd))
    return folders


def _retry(fd: int, op: Callable[[], None]) -> None:
    """`op()`; on a permission error, once more after giving the folder `fd` its permissions."""
    try:
        op()
    except PermissionError:
        os.fchmod(fd, 0o700)
        op()


def _quarantine(parent: int, name: str, path: str, why: str) -> str:
    """Move what could not be removed aside, into the quarantine folder; say so."""
    where = os.path.join(tempfile.gettempdir(), QUARANTINE)
    target = f"{name}-{uuid.uuid4().hex[:8]}"
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        os.rename(name, os.path.join(where, target), src_dir_fd=parent)
    except OSError as exc:
        log.warning("cannot remove %s (%s), nor move it to %s (%s): left in place", path, why, where, exc)
        return path
    moved = os.path.join(where, target)
    log.warning("cannot remove %s (%s): moved to %s", path, why, moved)
    return moved
