"""Claim-or-wait: drivers sharing a store measure each genome once.

Before a run measures genomes that no stored result covers, it claims them in the store
(`evokernel.store.Claims`) for a lease. A genome another live driver holds is not measured
again: the run measures its own first, then waits for the other's result (polling the
store) and records it as reused. A claim whose lease ran out (its owner died or hangs) is
taken over and measured. With one driver every claim succeeds and the run is what it would
be without claims (deterministic for a seed). A claim of a driver that died is taken over at
once: its run's lock (which the OS or the database server drops with the process) is gone.

>>> from evokernel.store import SQLiteStore
>>> store = SQLiteStore(":memory:")
>>> claims = Claimer(store, "run-a", "fp")
>>> claims.claim(["g1", "g2"]), sorted(claims.held)  # none to leave to another driver
(set(), ['g1', 'g2'])
"""

from __future__ import annotations

import itertools
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from evokernel.core.evaluator import Evaluator
from evokernel.core.genome import Genome
from evokernel.engine._stream import ResultStream
from evokernel.store import Claims, Hit, Store

__all__ = ["Claimer", "RenewingStream", "LEASE_S", "POLL_S", "CLAIM_EVERY"]

#: How long a claim holds without renewal: a driver renews its claims while it measures
#: (every third of this), so only a hung owner's claim runs out (a dead one's run lock is gone)
LEASE_S = 120.0
#: How often a waiting driver looks for another's result
POLL_S = 0.05
#: Every how many looks it tries to take the claim over (a write, and a look at the holder's run lock)
CLAIM_EVERY = 10


class Claimer:
    """A run's claims in `store` (nothing, where the store does not keep claims).

    owner: host:pid:run, unique among the drivers sharing a store."""

    def __init__(self, store: Store, run_id: str, fingerprint: str, *, lease_s: float = LEASE_S) -> None:
        self.store = store if isinstance(store, Claims) else None
        self.run_id = run_id
        self.fingerprint = fingerprint
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{run_id}"
        self.lease_s = lease_s
        self.held: set[str] = set()
        self.renewed = 0.0

    def claim(self, genome_ids: list[str]) -> set[str]:
        """Claim the genomes; those NOT to measure now (another driver holds them, or their
        result was stored since they were looked up)."""
        if self.store is None or not genome_ids:
            return set()
        got = self.store.claim(self.run_id, genome_ids, self.fingerprint, self.owner, self.lease_s)
        self.held |= got
        self.renewed = time.monotonic()
        return set(genome_ids) - got

    def renew(self) -> None:
        """Extend the leases of the claims still held, at most every third of a lease."""
        if self.store is not None and self.held and time.monotonic() - self.renewed > self.lease_s / 3:
            self.claim(sorted(self.held))

    def release(self, genome_ids: list[str] | None = None) -> None:
        """Give up claims: these genomes' (their results are stored, or will not be), or all."""
        if self.store is None or not self.held:
            return
        ids = sorted(self.held if genome_ids is None else self.held & set(genome_ids))
        if ids:
            self.store.release(self.owner, ids)
            self.held -= set(ids)

    def wait(self, genome_id: str, lookup: Callable[[str], Hit | None], out_of_time: Callable[[], bool]) -> Hit | None:
        """The stored result another driver measured for the genome, once it is there; None
        when the genome is this run's to measure after all (the other's driver died, its claim
        ran out or was given up without a result, and this run holds it now) or the run is out
        of time."""
        for n in itertools.count():
            hit = lookup(genome_id)
            if hit is not None:
                return hit
            if n % CLAIM_EVERY == 0 and not self.claim([genome_id]):
                return None
            if out_of_time():
                return None
            time.sleep(POLL_S)
        raise AssertionError("unreachable")  # pragma: no cover


class RenewingStream(ResultStream):
    """The evaluator's results (a `ResultStream`), the claims of `claimer` renewed every third
    of a lease while a result is awaited, so one long evaluation does not let them run out
    (and another driver measure the genome again).

    Where claims are held and there is no deadline, the evaluator runs in a thread too, one
    result at a time on demand (as it would in the caller's thread: nothing is measured ahead)."""

    def __init__(self, evaluator: Evaluator, genomes: list[Genome], deadline: float | None, claimer: Claimer) -> None:
        super().__init__(evaluator, genomes, deadline)
        self.claimer = claimer
        self.asked: threading.Semaphore | None = None
        self.busy = False
        self.thread: threading.Thread | None = None
        if self.queue is None and genomes and claimer.store is not None and claimer.held:
            self.it = None
            self.queue = queue.Queue()
            self.asked = threading.Semaphore(0)
            self.thread = threading.Thread(target=self._on_demand, name=f"evokernel-evaluator-{self.name}", daemon=True)
            self.thread.start()

    def _on_demand(self) -> None:
        assert self.asked is not None
        it = self._checked()
        try:
            while True:
                self.asked.acquire()
                if self.stop:
                    return
                self.busy = True
                item = next(it, self._END)
                self.busy = False
                self.queue.put((True, item))
                if item is self._END:
                    return
        except BaseException as exc:  # handed to the search's thread
            self.queue.put((False, exc))
        finally:
            it.close()

    def _get(self) -> Any:
        if self.queue is None:
            return super()._get()
        if self.asked is not None:
            self.asked.release()
        every = self.claimer.lease_s / 3
        while True:
            left = None if self.deadline is None else self.deadline - time.monotonic()
            if left is not None and left <= every:
                wait = max(0.0, left)
            else:
                wait = every
            try:
                ok, item = self.queue.get(timeout=wait)
            except queue.Empty:
                if left is not None and left <= every:
                    return None  # the deadline
                self.claimer.renew()
                continue
            if not ok:
                raise self._from_thread(item)
            return item

    def close(self) -> None:
        super().close()
        if self.asked is not None and self.thread is not None:
            self.asked.release()
            if not self.busy:  # (one measuring is left to end: a thread cannot be stopped)
                self.thread.join(timeout=5.0)
