"""The store's queries, once, over SQLAlchemy Core: what SQLite and PostgreSQL share.

`SQLStore` implements the whole Store protocol and its capabilities (claims included) on
one connection, one transaction per write. A back end (`SQLiteStore`, `PostgresStore`)
opens the connection, says how a write transaction begins and how a run is locked (an OS
lock on SQLite, an advisory lock on PostgreSQL: both dropped when the process dies), and
keeps its own checks and messages.
"""

# One module on purpose, though over 400 lines: the query implementation of the whole Store protocol over one schema
# (evokernel.store.schema); split by capability, its helpers (genome, result and evaluation rows) would be shared anyway.

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import sqlalchemy as sa

from evokernel.core.archive import Elite
from evokernel.core.errors import RunBusyError, StoreError
from evokernel.core.genome import Genome
from evokernel.core.redact import redact_failure
from evokernel.core.result import Result
from evokernel.store import _migrate
from evokernel.store import schema as s
from evokernel.store._base import Evaluation, Hit, RunInfo

__all__ = ["SQLStore"]


class RecordClash(StoreError, sa.exc.IntegrityError):
    """A write that clashes with what the run holds (a position or a genome recorded already):
    a StoreError that says so, and still the IntegrityError it was."""

    def __init__(self, cause: sa.exc.IntegrityError, message: str) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.statement, self.params, self.orig = cause.statement, cause.params, cause.orig

    def __str__(self) -> str:
        return self.message


class SQLStore:
    """A store on one SQLAlchemy connection. Subclasses set `path`, `_conn`, `_insert` (the
    dialect's INSERT, which has ON CONFLICT) and implement `_try_lock` / `_unlock`."""

    path: str
    _conn: sa.Connection
    _insert: Callable[[sa.Table], Any]

    def __init__(self) -> None:
        self._held: set[str] = set()  # runs this store is running (locked)

    # -- the connection ------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        """One write transaction; rolled back on any error."""
        with self._conn.begin():
            yield self._conn

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        """Reads, ended at once (no transaction left open to hold back other writers' changes)."""
        with self._conn.begin():
            yield self._conn

    def _retrying(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`method(self, *args, **kwargs)`, every public method's way in: a back end whose
        server can go away (PostgreSQL) retries it there."""
        return method(self, *args, **kwargs)

    def _rows(self, query: Any, *args: Any) -> list[Any]:
        with self._read() as c:
            return list(c.execute(query, *args))

    def _migrate(self, create: bool) -> None:
        """Upgrade the schema to HEAD in one write transaction under the back end's schema lock."""
        with self._tx() as c:
            self._lock_schema(c)
            now = _migrate.state(c)
            now.check(self.path)
            if now.current or (not now.tables and not create):
                return
            if not now.tables:
                _migrate.create(c)
            else:
                _migrate.upgrade(c)

    def _lock_schema(self, conn: sa.Connection) -> None:
        """Serialise schema upgrades (SQLite's write transaction already does)."""

    def close(self) -> None:
        self._conn.close()
        self._conn.engine.dispose()
        self._held.clear()

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- which runs are going on ---------------------------------------------------------
    def _try_lock(self, run_id: str) -> bool:
        """Take the lock of `run_id` without waiting; False if another process holds it."""
        raise NotImplementedError

    def _unlock(self, run_id: str) -> None:
        raise NotImplementedError

    def running_elsewhere(self, run_id: str) -> bool:
        """Whether another process is running `run_id` now (a run marked running that no
        process holds was killed)."""
        if run_id in self._held:
            return False
        if not self._try_lock(run_id):
            return True
        self._unlock(run_id)
        return False

    # -- runs --------------------------------------------------------------------------
    def begin_run(
        self,
        run_id: str,
        *,
        name: str,
        archive_key: str,
        fingerprint: str,
        config: dict[str, Any],
        environment: dict[str, Any],
    ) -> RunInfo:
        if run_id not in self._held:
            if not self._try_lock(run_id):
                rows = self._rows(sa.select(s.runs.c.environment).where(s.runs.c.id == run_id))
                pid = json.loads(rows[0][0]).get("pid") if rows else None
                raise RunBusyError(
                    f"run {run_id} is already running in another process{f' (pid {pid})' if pid else ''} on "
                    f"{self.path}; wait for it to finish (re-running then reads its results back), or change "
                    "--seed or --db"
                )
            self._held.add(run_id)
        now = time.time()
        with self._tx() as c:
            resumed = c.execute(sa.select(s.runs.c.seq).where(s.runs.c.id == run_id)).first() is not None
            if resumed:
                c.execute(
                    s.runs.update()
                    .where(s.runs.c.id == run_id)
                    .values(status="running", updated=now, config=_json(config), environment=_json(environment))
                )
            else:
                c.execute(
                    s.runs.insert().values(
                        id=run_id,
                        name=name,
                        archive_key=archive_key,
                        fingerprint=fingerprint,
                        config=_json(config),
                        environment=_json(environment),
                        status="running",
                        created=now,
                        updated=now,
                        summary="{}",
                    )
                )
        info = self._run(run_id)
        info.resumed = resumed
        return info

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        with self._tx() as c:
            c.execute(
                s.runs.update()
                .where(s.runs.c.id == run_id)
                .values(status=status, summary=_json(summary), updated=time.time())
            )
        if run_id in self._held:
            self._held.discard(run_id)
            self._unlock(run_id)

    def _run(self, run_id: str) -> RunInfo:
        rows = self._rows(_RUNS.where(s.runs.c.id == run_id))
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        return _run_info(rows[0])

    def runs(self) -> list[RunInfo]:
        return [_run_info(r) for r in self._rows(_RUNS.order_by(s.runs.c.seq))]

    def run(self, run_id: str) -> RunInfo:
        """A run by id or unique id prefix."""
        rows = self._rows(_RUNS.where(s.runs.c.id.startswith(run_id, autoescape=True)).limit(2))
        if len(rows) != 1:
            raise StoreError(f"{'no' if not rows else 'more than one'} run matches {run_id!r} in {self.path}")
        return _run_info(rows[0])

    def _refuse_running(self, run_id: str, doing: str) -> None:
        """RunBusyError, in one line, when a process (this one included) is running `run_id`."""
        if run_id in self._held:
            raise RunBusyError(f"cannot {doing} run {run_id}: this process is running it")
        rows = self._rows(sa.select(s.runs.c.environment).where(s.runs.c.id == run_id))
        pid = json.loads(rows[0][0]).get("pid") if rows else None
        raise RunBusyError(
            f"cannot {doing} run {run_id}: it is still running in another process{f' (pid {pid})' if pid else ''} "
            f"on {self.path}; wait for it to finish, or stop it first"
        )

    def delete_run(self, run_id: str) -> dict[str, int]:
        """Delete the run and everything of it, in one transaction: its evaluations, the results it
        measured (but those another run reused, which are that run's history too), its elites,
        events, claims, lessons and kernel records, and the genomes nothing else refers to then.
        A run another process is running is refused (RunBusyError); one marked running that no
        process holds (killed) is deleted. Returns how many rows went, by table."""
        self._run(run_id)  # StoreError if there is none
        if run_id in self._held or not self._try_lock(run_id):
            self._refuse_running(run_id, "delete")
        try:
            with self._tx() as c:
                return self._delete_run(c, run_id)
        finally:
            self._unlock(run_id)

    def _delete_run(self, c: sa.Connection, run_id: str) -> dict[str, int]:
        ev, r, g, el, k = s.evaluations, s.results, s.genomes, s.elites, s.kernels
        genome_ids = set(c.execute(sa.select(ev.c.genome_id).where(ev.c.run_id == run_id)).scalars())
        genome_ids |= set(c.execute(sa.select(el.c.genome_id).where(el.c.run_id == run_id)).scalars())
        genome_ids |= set(c.execute(sa.select(r.c.genome_id).where(r.c.run_id == run_id)).scalars())
        gone: dict[str, int] = {}
        for table in (s.claims, s.events, el, ev, s.lessons):
            gone[table.name] = c.execute(table.delete().where(table.c.run_id == run_id)).rowcount
        # results it measured that no evaluation (of another run, which reused them) refers to
        used = sa.select(ev.c.result_id)
        gone["results"] = c.execute(r.delete().where(r.c.run_id == run_id, r.c.id.not_in(used))).rowcount
        mine = [gid for gid, rec in c.execute(sa.select(k.c.genome_id, k.c.record)) if _kernel_run(rec) == run_id]
        gone["kernels"] = c.execute(k.delete().where(k.c.genome_id.in_(mine))).rowcount if mine else 0
        genome_ids |= set(mine)
        orphans = [
            gid
            for gid in sorted(genome_ids)
            if not any(
                c.execute(sa.select(t.c.genome_id).where(t.c.genome_id == gid).limit(1)).first() for t in (ev, r, el, k)
            )
        ]
        gone["genomes"] = c.execute(g.delete().where(g.c.id.in_(orphans))).rowcount if orphans else 0
        gone["runs"] = c.execute(s.runs.delete().where(s.runs.c.id == run_id)).rowcount
        return gone

    def rename_run(self, run_id: str, name: str) -> None:
        """Give the run another name (its id, and so what resumes it, stays). Refused (StoreError)
        for an empty name or one another run has, and (RunBusyError) while a process runs it."""
        if not name.strip():
            raise StoreError("a run's name cannot be empty")
        old = self._run(run_id)
        if old.name == name:
            raise StoreError(f"run {run_id} is already named {name!r}")
        if run_id in self._held or not self._try_lock(run_id):
            self._refuse_running(run_id, "rename")
        try:
            with self._tx() as c:
                taken = c.execute(
                    sa.select(s.runs.c.id).where(s.runs.c.name == name, s.runs.c.id != run_id).limit(1)
                ).first()
                if taken is not None:
                    raise StoreError(f"run {taken[0]} in {self.path} is named {name!r} already; choose another name")
                c.execute(s.runs.update().where(s.runs.c.id == run_id).values(name=name))
        finally:
            self._unlock(run_id)

    # -- results -----------------------------------------------------------------------
    def lookup(self, run_id: str, genome_id: str, fingerprint: str) -> Hit | None:
        ev, r = s.evaluations, s.results
        with self._read() as c:
            row = c.execute(
                sa.select(r.c.id, r.c.record)
                .join(ev, ev.c.result_id == r.c.id)
                .where(ev.c.run_id == run_id, ev.c.genome_id == genome_id, ev.c.kind == "eval")
            ).first()
            if row is not None:
                return Hit(result=Result.decode(row[1]), result_id=row[0], in_run=True)
            row = c.execute(
                sa.select(r.c.id, r.c.record)
                .where(r.c.genome_id == genome_id, r.c.fingerprint == fingerprint)
                .order_by(r.c.id)
                .limit(1)
            ).first()
        if row is not None:
            return Hit(result=Result.decode(row[1]), result_id=row[0], in_run=False)
        return None

    def record(
        self,
        run_id: str,
        seq: int,
        genome: Genome,
        fingerprint: str,
        result: Result,
        *,
        reuse: int | None = None,
    ) -> None:
        try:
            with self._tx() as c:
                self._put_genome(c, genome)
                result_id = reuse if reuse is not None else self._put_result(c, run_id, genome, fingerprint, result)
                self._put_evaluation(c, run_id, "eval", seq, genome, result_id, cached=reuse is not None)
        except sa.exc.IntegrityError as exc:
            raise RecordClash(
                exc,
                f"run {run_id!r} in {self.path}: cannot record genome {genome.id} at position {seq}, which holds "
                f"another evaluation (or the genome is recorded at another position): the run did not retrace "
                f"the stored one ({type(exc.orig).__name__}: {exc.orig})",
            ) from exc

    def forget_measured(self, run_id: str, genome_ids: list[str]) -> None:
        """Drop the run's evaluations of these genomes and the results measured for them: a
        batch whose results cannot be matched to its genomes (an evaluator that returned more
        results than genomes)."""
        ev = s.evaluations
        with self._tx() as c:
            for gid in genome_ids:
                this = (ev.c.run_id == run_id, ev.c.genome_id == gid, ev.c.kind == "eval")
                row = c.execute(sa.select(ev.c.result_id).where(*this, ev.c.cached == 0)).first()
                c.execute(ev.delete().where(*this))
                if row is not None:
                    c.execute(s.results.delete().where(s.results.c.id == row[0], s.results.c.run_id == run_id))

    def remeasurement(self, run_id: str, genome_id: str, rep: int) -> Result | None:
        ev, r = s.evaluations, s.results
        rows = self._rows(
            sa.select(r.c.record)
            .join(ev, ev.c.result_id == r.c.id)
            .where(ev.c.run_id == run_id, ev.c.genome_id == genome_id, ev.c.kind == "remeasure", ev.c.seq == rep)
        )
        return Result.decode(rows[0][0]) if rows else None

    def record_remeasurement(self, run_id: str, rep: int, genome: Genome, fingerprint: str, result: Result) -> None:
        try:
            with self._tx() as c:
                self._put_genome(c, genome)
                result_id = self._put_result(c, run_id, genome, fingerprint, result)
                self._put_evaluation(c, run_id, "remeasure", rep, genome, result_id, cached=False)
        except sa.exc.IntegrityError as exc:
            raise RecordClash(
                exc,
                f"run {run_id!r} in {self.path}: re-measurement {rep} of genome {genome.id} is recorded already "
                f"({type(exc.orig).__name__}: {exc.orig})",
            ) from exc

    def _put_genome(self, c: sa.Connection, genome: Genome) -> None:
        c.execute(
            self._insert(s.genomes)
            .values(
                id=genome.id,
                params=_json(genome.params),
                source=genome.source,
                lineage=msgspec.json.encode(genome.lineage).decode(),
                created=time.time(),
            )
            .on_conflict_do_nothing()
        )

    def _put_result(self, c: sa.Connection, run_id: str, genome: Genome, fingerprint: str, result: Result) -> int:
        if result.error:  # a failure's text as it may be kept: no file the candidate read, no flood
            result = msgspec.structs.replace(result, error=redact_failure(result.error))
        got = c.execute(
            s.results.insert().values(
                genome_id=genome.id,
                fingerprint=fingerprint,
                run_id=run_id,
                status=result.status.value,
                latency_ms=result.latency_ms,
                noise=result.noise,
                error=result.error,
                record=result.encode().decode(),
                created=time.time(),
            )
        )
        return _new_id(got)

    def _put_evaluation(
        self, c: sa.Connection, run_id: str, kind: str, seq: int, genome: Genome, result_id: int, *, cached: bool
    ) -> None:
        lin = genome.lineage
        c.execute(
            s.evaluations.insert().values(
                run_id=run_id,
                kind=kind,
                seq=seq,
                genome_id=genome.id,
                result_id=result_id,
                cached=int(cached),
                parents=_json(list(lin.parents)),
                operator=lin.operator,
                generation=lin.generation,
                created=time.time(),
            )
        )

    def history(self, run_id: str) -> list[Evaluation]:
        e, g, r = s.evaluations, s.genomes, s.results
        rows = self._rows(
            sa.select(
                e.c.kind,
                e.c.seq,
                e.c.cached,
                e.c.parents,
                e.c.operator,
                e.c.generation,
                e.c.created,
                g.c.params,
                g.c.source,
                r.c.record,
            )
            .join(g, g.c.id == e.c.genome_id)
            .join(r, r.c.id == e.c.result_id)
            .where(e.c.run_id == run_id)
            .order_by(e.c.kind, e.c.seq, e.c.created)
        )
        out = []
        for kind, seq, cached, parents, op, gen, created, params, source, record in rows:
            genome = Genome.of(
                json.loads(params), source, parents=tuple(json.loads(parents)), operator=op, generation=gen
            )
            out.append(
                Evaluation(
                    run_id=run_id,
                    seq=seq,
                    kind=kind,
                    genome=genome,
                    result=Result.decode(record),
                    cached=bool(cached),
                    created=created,
                )
            )
        return out

    def count(self, run_id: str | None = None) -> dict[str, int]:
        n = sa.func.count()
        ev, r = s.evaluations, s.results
        with self._read() as c:
            if run_id is None:
                return {
                    t.name: int(c.execute(sa.select(n).select_from(t)).scalar_one())
                    for t in (s.genomes, s.results, s.evaluations, s.runs)
                }
            evals = (ev.c.run_id == run_id, ev.c.kind == "eval")
            queries = {
                "evaluations": sa.select(n).select_from(ev).where(*evals),
                "distinct_genomes": sa.select(sa.func.count(sa.distinct(ev.c.genome_id))).where(*evals),
                "measured": sa.select(n).select_from(r).where(r.c.run_id == run_id),
                "cached": sa.select(n).select_from(ev).where(ev.c.run_id == run_id, ev.c.cached == 1),
                "remeasurements": sa.select(n).select_from(ev).where(ev.c.run_id == run_id, ev.c.kind == "remeasure"),
            }
            return {k: int(c.execute(q).scalar_one()) for k, q in queries.items()}

    # -- archive and events ------------------------------------------------------------
    def save_elites(self, run_id: str, archive_key: str, elites: list[Elite]) -> None:
        if not elites:
            return
        now = time.time()
        with self._tx() as c:
            for e in elites:
                self._put_genome(c, e.genome)
                row = dict(
                    run_id=run_id,
                    archive_key=archive_key,
                    niche=e.niche,
                    genome_id=e.genome.id,
                    latency_ms=e.latency_ms,
                    noise=e.noise,
                    updated=now,
                )
                c.execute(self._upsert(s.elites, row, ("run_id", "niche")))

    def drop_elite(self, run_id: str, niche: str) -> None:
        """Remove the run's elite of the niche (its genome failed its final re-measurement and
        no other genome of the niche passed)."""
        el = s.elites
        with self._tx() as c:
            c.execute(el.delete().where(el.c.run_id == run_id, el.c.niche == niche))

    def elites(
        self,
        *,
        run_id: str | None = None,
        archive_key: str | None = None,
        before_seq: int | None = None,
    ) -> list[Elite]:
        el, g, r = s.elites, s.genomes, s.runs
        q = (
            sa.select(el.c.niche, el.c.latency_ms, el.c.noise, el.c.run_id, g.c.params, g.c.source)
            .join(g, g.c.id == el.c.genome_id)
            .join(r, r.c.id == el.c.run_id)
        )
        if run_id is not None:
            q = q.where(el.c.run_id == run_id)
        if archive_key is not None:
            q = q.where(el.c.archive_key == archive_key)
        if before_seq is not None:
            q = q.where(r.c.seq < before_seq)
        best: dict[str, Elite] = {}
        for niche, lat, noise, rid, params, source in self._rows(q.order_by(r.c.seq)):
            if niche not in best or lat < best[niche].latency_ms:
                best[niche] = Elite(
                    niche=niche, genome=Genome.of(json.loads(params), source), latency_ms=lat, noise=noise, run_id=rid
                )
        return sorted(best.values(), key=lambda e: (e.latency_ms, e.genome.id))

    def log_event(self, run_id: str, kind: str, payload: dict[str, Any], *, key: str | None = None) -> None:
        with self._tx() as c:
            c.execute(
                self._insert(s.events)
                .values(run_id=run_id, kind=kind, key=key, payload=_json(payload), created=time.time())
                .on_conflict_do_nothing()
            )

    def events(self, run_id: str) -> list[tuple[str, dict[str, Any], float]]:
        ev = s.events
        rows = self._rows(
            sa.select(ev.c.kind, ev.c.payload, ev.c.created).where(ev.c.run_id == run_id).order_by(ev.c.id)
        )
        return [(k, json.loads(p), c) for k, p, c in rows]

    # -- claims: drivers sharing a store measure each genome once ---------------------------
    def claim(self, run_id: str, genome_ids: list[str], fingerprint: str, owner: str, lease_s: float) -> set[str]:
        """Claim the genomes for `owner` (of run `run_id`) until `lease_s` from now; the ids it holds now.

        A genome with a stored result under the fingerprint is not claimed (there is nothing
        to measure); one `owner` holds already has its lease renewed; one claimed by another
        owner is taken over when its lease has run out, or when its run is not running (its
        driver died: the run lock is gone) so that a killed driver holds nothing up."""
        if not genome_ids:
            return set()
        cl, r = s.claims, s.results
        now = time.time()
        row = {"fingerprint": fingerprint, "owner": owner, "run_id": run_id, "expires": now + lease_s, "created": now}
        with self._tx() as c:
            self._lock_claims(c)
            stored = set(
                c.execute(
                    sa.select(r.c.genome_id).where(r.c.fingerprint == fingerprint, r.c.genome_id.in_(genome_ids))
                ).scalars()
            )
            want = sorted(set(genome_ids) - stored)  # one order for every driver's row locks
            if not want:
                return set()
            c.execute(self._insert(cl).on_conflict_do_nothing(), [{**row, "genome_id": g} for g in want])
            these = (cl.c.fingerprint == fingerprint, cl.c.genome_id.in_(want))
            c.execute(
                cl.update()
                .where(*these, sa.or_(cl.c.owner == owner, cl.c.expires < now))
                .values(owner=owner, run_id=run_id, expires=now + lease_s)
            )
            holders = c.execute(sa.select(cl.c.genome_id, cl.c.owner, cl.c.run_id).where(*these)).all()
        others = {(o, rid) for _, o, rid in holders if o != owner}
        dead = [o for o, rid in others if rid in self._held or not self.running_elsewhere(rid)]
        if dead:
            with self._tx() as c:
                self._lock_claims(c)
                c.execute(
                    cl.update()
                    .where(*these, cl.c.owner.in_(dead))
                    .values(owner=owner, run_id=run_id, expires=now + lease_s)
                )
        return {g for g, o, _ in holders if o == owner or o in dead}

    def _lock_claims(self, conn: sa.Connection) -> None:
        """Serialise claim transactions where the back end does not already (SQLite's write
        transaction does)."""

    def release(self, owner: str, genome_ids: list[str] | None = None) -> None:
        """Drop `owner`'s claims (all of them, or those of these genomes)."""
        cl = s.claims
        q = cl.delete().where(cl.c.owner == owner)
        if genome_ids is not None:
            if not genome_ids:
                return
            q = q.where(cl.c.genome_id.in_(genome_ids))
        with self._tx() as c:
            self._lock_claims(c)
            c.execute(q)

    # -- knowledge base and kernel database (evokernel.store.knowledge) ---------------------------
    def save_lessons(self, lessons: list[Any]) -> None:
        if not lessons:
            return
        rows = [
            dict(
                id=le.id,
                kind=le.kind,
                op=le.op,
                gpu=le.gpu,
                toolchain=_json(le.toolchain),
                text=le.text,
                evidence=_json(le.evidence),
                run_id=le.run_id,
                created=le.created,
            )
            for le in lessons
        ]
        with self._tx() as c:
            for row in rows:
                c.execute(self._upsert(s.lessons, row, ("id",)))

    def lessons(self, *, op: str | None = None, gpu: str | None = None) -> list[Any]:
        from evokernel.store.knowledge import Lesson

        t = s.lessons
        q = sa.select(t.c.id, t.c.kind, t.c.op, t.c.gpu, t.c.toolchain, t.c.text, t.c.evidence, t.c.run_id, t.c.created)
        q = _filtered(q, t, op=op, gpu=gpu)
        return [
            Lesson(
                id=i, kind=k, op=o, gpu=g, toolchain=json.loads(tc), text=x, evidence=json.loads(e), run_id=r, created=c
            )
            for i, k, o, g, tc, x, e, r, c in self._rows(q.order_by(t.c.created, t.c.id))
        ]

    def save_kernel(self, record: dict[str, Any]) -> None:
        row = dict(
            genome_id=record["genome_id"],
            op=record["op"],
            gpu=record["gpu"],
            record=_json(record),
            latency_ms=record["latency_ms"],
            created=time.time(),
        )
        with self._tx() as c:
            c.execute(self._upsert(s.kernels, row, ("genome_id",)))

    def kernels(self, *, op: str | None = None, gpu: str | None = None) -> list[dict[str, Any]]:
        t = s.kernels
        q = _filtered(sa.select(t.c.record), t, op=op, gpu=gpu).order_by(t.c.latency_ms)
        return [json.loads(r) for (r,) in self._rows(q)]

    # -- workload profiles (evokernel.model.profile) ------------------------------------------------
    def save_profile(self, record: dict[str, Any]) -> int:
        """Store a profile (`Profile.to_dict()` plus `name` and `toolchain`); returns its id."""
        summary = {k: v for k, v in record.items() if k not in ("name", "device_name", "toolchain", "rows")}
        with self._tx() as c:
            got = c.execute(
                s.profiles.insert().values(
                    created=time.time(),
                    name=record["name"],
                    device=record.get("device_name") or record.get("device", ""),
                    toolchain=_json(record.get("toolchain", {})),
                    rows=_json(record["rows"]),
                    summary=_json(summary),
                )
            )
        return _new_id(got)

    def profiles(self, *, name: str | None = None) -> list[dict[str, Any]]:
        """Stored profiles, oldest first: id, created, name, device, toolchain, rows, summary."""
        t = s.profiles
        q = sa.select(t.c.id, t.c.created, t.c.name, t.c.device, t.c.toolchain, t.c.rows, t.c.summary)
        if name is not None:
            q = q.where(t.c.name == name)
        return [
            {
                "id": i,
                "created": c,
                "name": n,
                "device": d,
                "toolchain": json.loads(tc),
                "rows": json.loads(r),
                "summary": json.loads(sm),
            }
            for i, c, n, d, tc, r, sm in self._rows(q.order_by(t.c.id))
        ]

    # -- helpers -------------------------------------------------------------------------
    # -- views ---------------------------------------------------------------------------
    def results_frame(self, run: str | list[str] | None = None) -> Any:
        """Every stored evaluation of the runs as a pandas DataFrame (`evokernel.report`;
        a ConfigError naming the `report` extra when pandas is missing)."""
        from evokernel.report import results_frame

        return results_frame(self, run)

    def _upsert(self, table: sa.Table, row: dict[str, Any], keys: tuple[str, ...]) -> Any:
        """INSERT ... ON CONFLICT (keys) DO UPDATE: SQLite's INSERT OR REPLACE, in both dialects."""
        ins = self._insert(table).values(**row)
        return ins.on_conflict_do_update(
            index_elements=list(keys), set_={k: ins.excluded[k] for k in row if k not in keys}
        )


_RUNS = sa.select(
    s.runs.c.id, s.runs.c.seq, s.runs.c.name, s.runs.c.archive_key, s.runs.c.fingerprint, s.runs.c.config,
    s.runs.c.environment, s.runs.c.status, s.runs.c.created, s.runs.c.updated, s.runs.c.summary,
)  # fmt: skip


def _retried(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: SQLStore, *args: Any, **kwargs: Any) -> Any:
        return self._retrying(method, *args, **kwargs)

    return call


# every public method goes through `_retrying` (each is one transaction, or reads only)
for _name in (
    "running_elsewhere begin_run finish_run runs run delete_run rename_run lookup record forget_measured remeasurement "
    "record_remeasurement history count save_elites drop_elite elites log_event events claim release "
    "save_lessons lessons save_kernel kernels save_profile profiles results_frame"
).split():
    setattr(SQLStore, _name, _retried(getattr(SQLStore, _name)))


def _run_info(row: Any) -> RunInfo:
    rid, seq, name, key, fp, config, env, status, created, updated, summary = row
    return RunInfo(
        id=rid,
        seq=seq,
        name=name,
        archive_key=key,
        fingerprint=fp,
        config=json.loads(config),
        environment=json.loads(env),
        status=status,
        created=created,
        updated=updated,
        summary=json.loads(summary),
    )


def _kernel_run(record: str) -> str | None:
    """The run a kernel record (evokernel.store.knowledge) came from."""
    try:
        got = json.loads(record)
    except ValueError:
        return None
    return got.get("run_id") if isinstance(got, dict) else None


def _new_id(got: sa.CursorResult[Any]) -> int:
    """The id the database gave the row an INSERT just wrote."""
    key = got.inserted_primary_key
    assert key is not None
    return int(key[0])


def _filtered(q: Any, table: sa.Table, **equal: str | None) -> Any:
    for column, value in equal.items():
        if value is not None:
            q = q.where(table.c[column] == value)
    return q


def _json(obj: Any) -> str:
    return msgspec.json.encode(obj, order="sorted").decode()
