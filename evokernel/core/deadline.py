"""A deadline for code the caller cannot interrupt otherwise (a user's reference or search file
that hangs): SIGALRM on the main thread, nested within any timer already set (pytest-timeout's,
another deadline's), which is put back, minus the time spent, on the way out.

>>> import time
>>> with deadline(5.0, lambda: TimeoutError("late")):
...     time.sleep(0.01)
>>> try:
...     with deadline(0.05, lambda: TimeoutError("late")):
...         time.sleep(2)
... except TimeoutError as exc:
...     print(exc)
late
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["deadline"]


@contextlib.contextmanager
def deadline(seconds: float | None, error: Callable[[], BaseException]) -> Iterator[None]:
    """Raise `error()` in the body once `seconds` pass. Off the main thread (no signal can
    reach it), for no `seconds`, or where an earlier timer already fires first, the body runs
    unbounded by this one."""
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer, _ = signal.getitimer(signal.ITIMER_REAL)
    if 0 < outer <= seconds:
        yield  # the timer already set fires first
        return

    def expired(signum: int, frame: Any) -> None:
        raise error()

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:  # the outer timer, less the time spent in here (at least a moment)
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 0.001))
