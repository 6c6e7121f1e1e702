"""Whether a file descriptor has something to read, for descriptors of any number.

`select.select` refuses descriptors from 1024 up (FD_SETSIZE): a judge that holds many
candidate processes (their pipes, pidfds, logs) crosses that and every wait raised
"filedescriptor out of range in select()". `poll` has no such limit.

>>> r, w = __import__("os").pipe()
>>> readable(r, 0.0)
False
>>> __import__("os").write(w, b"x") and readable(r, 0.0)
True
"""

from __future__ import annotations

import select

__all__ = ["readable"]


def readable(fd: int, timeout_s: float) -> bool:
    """Whether `fd` is readable (data, end of file, an error, or a pidfd whose process
    exited) within `timeout_s` seconds (0: do not wait)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(max(0, int(timeout_s * 1000 + 0.999))))
