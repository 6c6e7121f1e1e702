"""One search, several GPUs: an evaluator that judges a generation on one Ray actor per GPU.

A search evaluates on one GPU unless its evaluator is wrapped. `RayEvaluator(factory)` starts
one Ray actor per GPU of the cluster (`num_gpus=1`: Ray sets each actor's
CUDA_VISIBLE_DEVICES to its own GPU, so the evaluator built inside sees it as "cuda"); each
actor builds and keeps its own evaluator from `factory` (a picklable zero-argument callable:
a `KernelEvaluator` with its sandboxes and parallel compiles, per GPU). A batch of genomes is
cut into chunks that go to whichever actor is free; results stream back one at a time (Ray
streaming generators) and leave in genome order, so the search loop cannot tell a Ray run
from a serial one.

Failures stay values. An actor that dies (killed, out of memory, its node lost) is restarted
by Ray; the genome it was judging becomes a `crash` result naming the actor and its GPU, and
the rest of its chunk goes to the next free actor. An actor whose evaluator breaks (its
`evaluate` raises: a GPU whose CUDA context is gone, a library that fails there) leaves the
pool and its unjudged genomes go to the others; the search stops, as it would in process, only
when no actor is left, and then only after handing over every result judged before the first
genome no actor could judge (the results other actors finished further on are counted in the
error's message, not delivered: the search takes results in genome order).

The bar a kernel evaluator races slow candidates against (`best`: the best median per shape)
is kept by the driver, merged from every actor's updates and sent with each chunk. The
evaluator's capabilities pass through when the wrapped one has them: `fingerprint` (every
actor must report the same one: the same GPU model and toolchain), `transfer_key`,
`environment` (with the Ray cluster's address, GPU count and the actors' nodes), `sandbox`,
`restored` (sent to every actor), and `remeasure`, which goes to one actor only: elites are
re-measured side by side on one GPU, never compared across GPUs.

What an evaluator counts is counted per actor: a replay with noise draws its noise by how
often it measured a genome, so a noisy replay on Ray is not the serial run (without noise it
is, result for result).

Ray is imported only here, when a `RayEvaluator` is built; without it the error says
`pip install 'evokernel[ray]'`.

    from functools import partial
    from evokernel import Budget, Search
    from evokernel.evaluators import KernelEvaluator
    from evokernel.runtime import RayEvaluator

    factory = partial(KernelEvaluator, "examples/problems/matmul_bf16.py", render)  # built on each GPU
    with RayEvaluator(factory) as evaluator:  # every GPU of a local cluster
        report = Search(space, evaluator).run(Budget(evaluations=2000))
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from evokernel.core.errors import ConfigError, EvaluatorError
from evokernel.core.evaluator import Evaluator
from evokernel.core.genome import Genome, canonical_json
from evokernel.core.result import Result, Status

__all__ = ["RayEvaluator", "import_ray", "INSTALL"]

Factory = Callable[[], Evaluator]

logger = logging.getLogger(__name__)

INSTALL = "pip install 'evokernel[ray]'"

# the capabilities that pass through when the wrapped evaluator has them (evokernel.core.evaluator)
_PASSED = ("remeasure", "transfer_key", "sandbox", "restored")

# an actor found dead (not restarting) by this many chunks in a row leaves the pool
_UNSTARTED_LIMIT = 3
# a restarting actor refuses calls (ActorUnavailableError); it is sent none for this long, doubled
# each time in a row, up to _BACKOFF_MAX_S
_BACKOFF_S = 0.25
_BACKOFF_MAX_S = 8.0


def import_ray() -> Any:
    """The `ray` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            f"running on several GPUs needs Ray, which is not installed here ({exc}): {INSTALL}"
        ) from None
    return ray


def _join(ray: Any, address: str, kwargs: dict[str, Any], timeout_s: float) -> None:
    """`ray.init(address=...)` within `timeout_s`, or a ConfigError in one line: Ray itself
    retries an address where nothing answers for ever, warning every few seconds, and raises
    a traceback's worth for a cluster that refuses us."""
    import socket
    import threading

    where = f"the Ray cluster at {address}"
    if address != "auto":  # is anything listening there? (refused at once, else within the bound)
        host, _, port = address.split("://")[-1].rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
                pass
        except ValueError:
            raise ConfigError(f"--ray {address}: not an address (HOST:PORT, ray://HOST:PORT or auto)") from None
        except OSError as exc:
            raise ConfigError(f"cannot reach {where}: {exc.strerror or exc} (is the cluster up?)") from None
    done: dict[str, Any] = {}

    def init() -> None:
        try:
            ray.init(address=address, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - said by the caller
            done["raised"] = exc
        done["ended"] = True

    thread = threading.Thread(target=init, name="ray-init", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "ended" not in done:
        raise ConfigError(
            f"could not join {where} within {timeout_s:.0f} s: not a Ray cluster's address, or the cluster "
            "refuses us (its RAY_AUTH_TOKEN differs from ours?)"
        )
    exc = done.get("raised")
    if exc is not None:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConfigError(f"could not join {where}: {type(exc).__name__}: {why}") from None


class _Worker:
    """One GPU's evaluator, in a Ray actor's process (Ray maps CUDA_VISIBLE_DEVICES to its GPU)."""

    def __init__(self, factory: Factory) -> None:
        self.evaluator = factory()

    def info(self) -> dict[str, Any]:
        """Where this actor runs, what its evaluator can do, and its fingerprint."""
        import socket

        import ray

        ev = self.evaluator
        return {
            "node": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "gpus": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "name": getattr(ev, "name", type(ev).__name__),
            # how many candidates it compiles at once (a KernelEvaluator's workers): a chunk of
            # at least this many keeps its pipeline full
            "pipeline": workers if isinstance(workers := getattr(ev, "workers", None), int) else 1,
            "capabilities": [c for c in (*_PASSED, "environment") if callable(getattr(ev, c, None))],
            "fingerprint": ev.fingerprint(),
        }

    def call(self, method: str, *args: Any) -> Any:
        """A capability of the wrapped evaluator (`remeasure`, `transfer_key`, ...)."""
        out = getattr(self.evaluator, method)(*args)
        return list(out) if method == "remeasure" else out

    def evaluate(self, genomes: Sequence[Genome], best: dict[str, float]) -> Iterator[Any]:
        """Streamed (Ray `num_returns="streaming"`): None once the chunk has begun, then
        `(result, best updates)` per genome, in order. `best` is the driver's merged bar."""
        found = getattr(self.evaluator, "best", None)
        own: dict[str, float] = found if isinstance(found, dict) else {}
        for shape, ms in best.items():
            own[shape] = min(own.get(shape, math.inf), ms)
        sent = dict(own)
        yield None
        for result in self.evaluator.evaluate(genomes):
            delta = {k: v for k, v in own.items() if v < sent.get(k, math.inf)}
            sent.update(delta)
            yield result, delta


@dataclass
class _Actor:
    """An actor of the pool and what the driver knows of it."""

    index: int
    handle: Any
    info: dict[str, Any]
    unstarted: int = 0  # chunks in a row that failed before they began
    live: bool = True
    broken: str = ""  # why its evaluator raised (it left the pool)
    resting_until: float = 0.0  # restarting: sent nothing before this (time.monotonic())

    def where(self) -> str:
        gpus = ",".join(self.info.get("gpus", [])) or "?"
        return f"Ray actor {self.index} (GPU {gpus} on {self.info.get('host') or self.info.get('ip')})"


@dataclass
class _Flight:
    """A chunk being judged by an actor: genome indices, how many results came back."""

    actor: _Actor
    indices: list[int]
    got: int = 0
    started: bool = False


class RayEvaluator:
    """The evaluator `factory` builds, one per GPU of a Ray cluster, as one evaluator.

    factory: a picklable zero-argument callable returning an evaluator, called in each actor
    (and again when Ray restarts one). gpus: how many actors (one GPU each; default every GPU
    of the cluster). address: a Ray cluster to join (`ray.init(address=...)`, "auto" for the
    one this machine belongs to); default: a local cluster, started here unless one is
    running already. chunk: genomes sent to an actor at a time (default: about two chunks
    per actor, so that a free actor takes over from a slow one, but no fewer genomes than the
    wrapped evaluator compiles at once, its `workers`, where the batch has enough). max_restarts: Ray's restarts of a dead actor (-1:
    always). init: more keyword arguments for `ray.init` (e.g. `num_gpus` for a local
    cluster). start_timeout_s: how long the actors may take to start and build their
    evaluators. connect_timeout_s: how long joining the cluster at `address` may take; past
    it, or when Ray refuses (nothing listening, an auth-token mismatch), a ConfigError says
    so in one line.

    Building one starts the actors (the capabilities it offers are the wrapped evaluator's,
    which only the actors know); `close()` (or a `with` block) ends them, and the local
    cluster if it started one.
    """

    name: str
    best: dict[str, float]
    # capabilities, set on the instance only when the wrapped evaluator has them (the
    # evaluator protocols are checked with isinstance, which looks for the attribute)
    remeasure: Callable[[Sequence[Genome]], list[Result]]
    transfer_key: Callable[[], dict[str, Any] | None]
    sandbox: Callable[[], Any]
    restored: Callable[[Sequence[Genome]], None]

    def __init__(
        self,
        factory: Factory,
        *,
        gpus: int | None = None,
        address: str | None = None,
        chunk: int | None = None,
        max_restarts: int = -1,
        init: dict[str, Any] | None = None,
        start_timeout_s: float = 600.0,
        connect_timeout_s: float = 20.0,
    ) -> None:
        if gpus is not None and gpus < 1:
            raise ConfigError(f"gpus must be at least 1 (or None: every GPU of the cluster), got {gpus}")
        if chunk is not None and chunk < 1:
            raise ConfigError(f"chunk must be at least 1, got {chunk}")
        self._ray = ray = import_ray()
        self.factory = factory
        self.chunk = chunk
        self.best = {}
        self._started_ray = False
        self._actors: list[_Actor] = []
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, **(init or {})}
            if address in (None, "", "local"):
                ray.init(address=address or None, **kwargs)
            else:
                _join(ray, address, kwargs, connect_timeout_s)
            self._started_ray = True
        try:
            self._start(gpus, max_restarts, start_timeout_s)
        except BaseException:
            self.close()
            raise

    # -- the pool ------------------------------------------------------------------------
    def _start(self, gpus: int | None, max_restarts: int, timeout_s: float) -> None:
        ray = self._ray
        have = int(ray.cluster_resources().get("GPU", 0))
        self.address = ray.get_runtime_context().gcs_address
        if have < 1:
            raise ConfigError(f"the Ray cluster at {self.address} has no GPU: nothing to evaluate on")
        if gpus is not None and gpus > have:
            raise ConfigError(f"asked for {gpus} GPUs; the Ray cluster at {self.address} has {have}")
        n = gpus or have
        remote = ray.remote(num_gpus=1, max_restarts=max_restarts, max_task_retries=0)(_Worker)
        handles = [remote.remote(self.factory) for _ in range(n)]
        self._actors = [_Actor(i, h, {}) for i, h in enumerate(handles)]
        try:
            infos = ray.get([h.info.remote() for h in handles], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"{n} Ray actors did not start within {timeout_s:.0f} s (cluster {self.address})"
            ) from None
        except ray.exceptions.RayError as exc:
            raise ConfigError(f"the evaluator factory failed in a Ray actor: {_cause(exc)}") from None
        for actor, info in zip(self._actors, infos):
            actor.info = info
        self._fingerprint = _agreed_fingerprint(self._actors)
        first = infos[0]
        self.name = f"ray:{first['name']}"
        for capability in _PASSED:
            if capability in first["capabilities"]:
                setattr(self, capability, getattr(self, f"_{capability}"))
        self._inner_environment = "environment" in first["capabilities"]

    @property
    def actors(self) -> list[Any]:
        """The actors' handles, one per GPU (for tools and tests: `ray.kill(evaluator.actors[0])`)."""
        return [a.handle for a in self._actors]

    def _live(self) -> list[_Actor]:
        return [a for a in self._actors if a.live]

    def close(self) -> None:
        """End the actors, and the local Ray cluster if this evaluator started it."""
        ray = self._ray
        for actor in self._actors:
            try:
                ray.kill(actor.handle, no_restart=True)
            except Exception:  # already gone
                pass
        self._actors = []
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the protocol ----------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """The wrapped evaluator's, which every actor reported alike: a Ray run's results are
        the serial run's, cached under the same fingerprint."""
        return dict(self._fingerprint)

    def environment(self) -> dict[str, Any]:
        """The wrapped evaluator's environment (one actor's), and the Ray cluster's: its
        address, the GPUs used, where each actor runs."""
        inner: dict[str, Any] = {}
        if self._inner_environment:
            inner = dict(self._on_one_actor("environment", ()))
        actors = [{"gpus": a.info["gpus"], "host": a.info["host"], "node": a.info["node"]} for a in self._actors]
        return {**inner, "ray": {"address": self.address, "gpus": len(self._actors), "actors": actors}}

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        """Results in genome order, as the actors' streams deliver them."""
        ray = self._ray
        genomes = list(genomes)
        n = len(genomes)
        if not n:
            return
        size = self.chunk or self._chunk_size(n)
        todo: deque[list[int]] = deque(list(range(i, min(n, i + size))) for i in range(0, n, size))
        flights: dict[Any, _Flight] = {}
        done: dict[int, Result] = {}
        next_out = 0
        try:
            while next_out < n:
                busy = {id(f.actor) for f in flights.values()}
                now = time.monotonic()
                for actor in self._live():
                    if todo and id(actor) not in busy and actor.resting_until <= now:
                        indices = todo.popleft()
                        stream = actor.handle.evaluate.options(num_returns="streaming").remote(
                            [genomes[i] for i in indices], dict(self.best)
                        )
                        flights[stream] = _Flight(actor, indices)
                live = self._live()
                if not live:
                    broken = [f"{a.where()}: {a.broken}" for a in self._actors if a.broken]
                    raise EvaluatorError(
                        f"every Ray actor is gone ({len(self._actors)} started); none can judge"
                        + (f"; the evaluator failed on {'; '.join(broken)}" if broken else "")
                    )
                # waits for a stream, or for a restarting actor to be sent its chunk
                wake = min((a.resting_until for a in live if a.resting_until > now), default=None)
                timeout = None if wake is None or not todo else max(0.0, wake - now)
                if not flights:
                    time.sleep(timeout or 0.0)
                    continue
                ready, _ = ray.wait(list(flights), num_returns=1, timeout=timeout)
                for stream in ready:
                    self._receive(stream, flights, todo, done)
                while next_out in done:
                    yield done.pop(next_out)
                    next_out += 1
        except EvaluatorError as exc:
            # the results judged before the first genome none could judge are the search's:
            # hand them over, then stop it
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1
            if done:
                exc.args = (f"{exc.args[0] if exc.args else exc} ({len(done)} results judged after it are dropped)",)
            raise
        finally:
            for stream in flights:
                try:
                    ray.cancel(stream)
                except Exception:  # finished meanwhile, or its actor is gone
                    pass

    def _chunk_size(self, n: int) -> int:
        """Genomes per chunk: about two chunks per actor (a free actor takes over from a slow
        one), but enough to fill an actor's compile pipeline where the batch allows."""
        actors = max(1, len(self._live()))
        pipeline = max((int(a.info.get("pipeline", 1)) for a in self._live()), default=1)
        return max(1, min(math.ceil(n / actors), max(math.ceil(n / (2 * actors)), pipeline)))

    def _receive(
        self, stream: Any, flights: dict[Any, _Flight], todo: deque[list[int]], done: dict[int, Result]
    ) -> None:
        """Take the next item of a stream that is ready: a result, its end, or its actor's death."""
        ray = self._ray
        flight = flights[stream]
        try:
            item = ray.get(next(stream))
        except StopIteration:
            del flights[stream]
            if flight.got < len(flight.indices):
                raise EvaluatorError(
                    f"{flight.actor.where()} returned {flight.got} results for {len(flight.indices)} genomes"
                ) from None
            return
        except ray.exceptions.RayActorError as exc:
            del flights[stream]
            self._died(flight, exc, todo, done)
            return
        except ray.exceptions.RayTaskError as exc:
            del flights[stream]
            self._broke(flight, exc, todo)
            return
        if item is None:
            flight.started = True
            flight.actor.unstarted = 0
            return
        if flight.got >= len(flight.indices):
            raise EvaluatorError(f"{flight.actor.where()} returned more results than the {len(flight.indices)} genomes")
        result, delta = item
        for shape, ms in delta.items():
            self.best[shape] = min(self.best.get(shape, math.inf), ms)
        done[flight.indices[flight.got]] = result
        flight.got += 1

    def _died(self, flight: _Flight, exc: BaseException, todo: deque[list[int]], done: dict[int, Result]) -> None:
        """An actor died mid-chunk: the genome it was judging is a crash, the rest go back to
        the queue (Ray restarts the actor). One that is restarting is sent nothing for a while;
        one that is dead for good leaves the pool."""
        actor = flight.actor
        rest = flight.indices[flight.got :]
        if flight.started and rest:
            lost, rest = rest[0], rest[1:]
            done[lost] = Result.failed(
                Status.CRASH, f"{actor.where()} died while judging this candidate (Ray restarts it): {_cause(exc)}"
            )
        else:
            actor.unstarted += 1
            if not isinstance(exc, self._ray.exceptions.ActorUnavailableError):  # dead, not restarting
                actor.live = actor.unstarted < _UNSTARTED_LIMIT
        # restarting, most likely: a call sent to it now would fail at once
        actor.resting_until = time.monotonic() + min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** max(0, actor.unstarted - 1))
        if rest:
            todo.appendleft(rest)

    def _broke(self, flight: _Flight, exc: BaseException, todo: deque[list[int]]) -> None:
        """An actor's evaluator raised: the actor leaves the pool (what broke there, its GPU
        or its libraries, would break the next chunk too) and its unjudged genomes, the one it
        raised on first, go back to the queue for the others."""
        self._retire(flight.actor, exc)
        rest = flight.indices[flight.got :]
        if rest:
            todo.appendleft(rest)

    def _retire(self, actor: _Actor, exc: BaseException, method: str = "") -> None:
        """The actor leaves the pool: its evaluator raised (in `method`, where not `evaluate`)."""
        actor.live, actor.broken = False, _cause(exc)
        during = f" in {method}" if method else ""
        logger.warning("%s leaves the pool: its evaluator failed%s: %s", actor.where(), during, actor.broken)

    # -- capabilities (bound on the instance when the wrapped evaluator has them) -------
    def _on_one_actor(self, method: str, args: tuple[Any, ...]) -> Any:
        """`method` on the first live actor that answers (another if one dies). Where the
        wrapped evaluator's `remeasure` raises, that actor leaves the pool as it would in
        `evaluate` and the next one re-measures; any other method raising is the evaluator's
        error (the same on every actor)."""
        ray = self._ray
        last: BaseException | None = None
        broken: list[str] = []
        for actor in self._live():
            try:
                return ray.get(actor.handle.call.remote(method, *args))
            except ray.exceptions.RayActorError as exc:
                last = exc
            except ray.exceptions.RayTaskError as exc:
                if method != "remeasure":
                    raise EvaluatorError(
                        f"the evaluator on {actor.where()} failed in {method}: {_cause(exc)}"
                    ) from None
                self._retire(actor, exc, method)
                broken.append(f"{actor.where()}: {actor.broken}")
        if broken:
            raise EvaluatorError(f"the evaluator failed in {method} on {'; '.join(broken)}; no Ray actor is left")
        raise EvaluatorError(f"no Ray actor could answer {method}: {_cause(last) if last else 'none is left'}")

    def _remeasure(self, genomes: Sequence[Genome]) -> list[Result]:
        """On one actor, side by side on its one GPU (another actor if that one dies)."""
        try:
            return list(self._on_one_actor("remeasure", (list(genomes),)))
        except EvaluatorError as exc:
            if "no Ray actor could answer" not in str(exc):
                raise
            return [Result.failed(Status.CRASH, str(exc)) for _ in genomes]

    def _transfer_key(self) -> dict[str, Any] | None:
        """The wrapped evaluator's (asked once: it is part of the run's identity, read often)."""
        if not hasattr(self, "_key"):
            self._key: dict[str, Any] | None = self._on_one_actor("transfer_key", ())
        return self._key

    def _sandbox(self) -> Any:
        return self._on_one_actor("sandbox", ())

    def _restored(self, genomes: Sequence[Genome]) -> None:
        """Every actor's evaluator learns of results read back from the store (the replay's
        noise draws), whichever of them measures the genome next."""
        ray = self._ray
        refs = [a.handle.call.remote("restored", list(genomes)) for a in self._live()]
        for ref in refs:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                pass  # restarted: a fresh evaluator, as a fresh process would be


def _agreed_fingerprint(actors: list[_Actor]) -> dict[str, Any]:
    """The one fingerprint every actor reported; a ConfigError naming the actors that differ."""
    groups: dict[bytes, list[_Actor]] = {}
    for actor in actors:
        groups.setdefault(canonical_json(actor.info["fingerprint"]), []).append(actor)
    if len(groups) == 1:
        return dict(actors[0].info["fingerprint"])
    prints = [members[0].info["fingerprint"] for members in groups.values()]
    keys = sorted({k for fp in prints for k in fp if any(fp.get(k) != other.get(k) for other in prints)})
    lines = []
    for members, fp in zip(groups.values(), prints):
        shown = ", ".join(f"{k}={fp.get(k)!r}" for k in keys)
        lines.append(f"{', '.join(a.where() for a in members)}: {shown}")
    raise ConfigError(
        "the Ray actors' evaluators differ (a search's results must all come from one kind of GPU and toolchain): "
        + "; ".join(lines)
    )


def _cause(exc: BaseException) -> str:
    """What went wrong, in one line, without Ray's traceback: the original exception where Ray
    kept it, else the last line of a traceback Ray quotes (an actor's failed constructor), else
    the message's first line."""
    import re

    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        text = str(cause).strip()
        return f"{type(cause).__name__}: {text.splitlines()[0] if text else ''}"
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", lines[-1]):
        return lines[-1]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
