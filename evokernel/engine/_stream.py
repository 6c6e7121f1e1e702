"""An evaluator's results, one genome at a time, checked (a Result per genome, no fewer and
no more), and abandoned at the wall-time deadline: the one door through which the search
and the re-measurement of its elites read an evaluator."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sized
from typing import Any

from evokernel.core.errors import EvaluatorError
from evokernel.core.evaluator import Evaluator
from evokernel.core.genome import Genome
from evokernel.core.result import Result

__all__ = ["ResultStream", "TooManyResults"]


class TooManyResults(EvaluatorError):
    """An evaluator yielded more results than genomes: none of them can be trusted."""


class ResultStream:
    """The evaluator's results for `genomes`, one at a time, checked: a Result per genome,
    no fewer and no more; an evaluator that raises (even SystemExit) is an EvaluatorError.

    With a wall-time budget the evaluator runs in a daemon thread and `next()` waits at most
    until the deadline, then returns None: an evaluation that hangs is abandoned there (a
    Python thread cannot be killed; the run ends and so does the process)."""

    _END = object()

    def __init__(self, evaluator: Evaluator, genomes: list[Genome], deadline: float | None = None) -> None:
        self.name = evaluator.name
        self.evaluator = evaluator
        self.genomes = genomes
        self.deadline = deadline
        self.it: Iterator[Result] | None = None
        self.queue: Any = None
        self.stop = False
        if not genomes:
            self.it = iter(())
        elif self.deadline is None:
            self.it = self._checked()
        else:
            import queue
            import threading

            self.queue = queue.Queue()
            threading.Thread(target=self._pump, name=f"evokernel-evaluator-{self.name}", daemon=True).start()

    def _fail(self, exc: BaseException) -> EvaluatorError:
        if isinstance(exc, EvaluatorError):
            return exc
        return EvaluatorError(f"evaluator {self.name!r} failed: {type(exc).__name__}: {exc}")

    def _checked(self) -> Generator[Result, None, None]:
        try:
            got = self.evaluator.evaluate(self.genomes)
        except (Exception, SystemExit) as exc:
            raise self._fail(exc) from exc
        if isinstance(got, Sized) and len(got) != len(self.genomes):
            error = TooManyResults if len(got) > len(self.genomes) else EvaluatorError
            raise error(
                f"evaluator {self.name!r} returned {len(got)} results for {len(self.genomes)} genomes "
                f"({'more' if len(got) > len(self.genomes) else 'fewer'} results than genomes)"
            )
        try:
            for i, result in enumerate(got):
                if not isinstance(result, Result):
                    which = self.genomes[i].id if i < len(self.genomes) else f"#{i}"
                    raise EvaluatorError(
                        f"evaluator {self.name!r} returned {type(result).__name__} for genome {which}, "
                        "not a Result (a failed candidate is a Result with a failure status)"
                    )
                yield result
        except EvaluatorError:
            raise
        except (Exception, SystemExit) as exc:
            raise self._fail(exc) from exc

    def _pump(self) -> None:
        it = self._checked()
        try:
            for r in it:
                self.queue.put((True, r))
                if self.stop:
                    it.close()
                    return
            self.queue.put((True, self._END))
        except BaseException as exc:  # handed to the search's thread
            self.queue.put((False, exc))

    def _get(self) -> Any:
        """The next item, _END, or None at the deadline."""
        if self.queue is None:
            assert self.it is not None
            return next(self.it, self._END)
        import queue

        assert self.deadline is not None  # (a queue only where there is a deadline)
        try:
            ok, item = self.queue.get(timeout=max(0.0, self.deadline - time.monotonic()))
        except queue.Empty:
            return None
        if not ok:
            raise self._from_thread(item)
        return item

    def _from_thread(self, exc: BaseException) -> BaseException:
        """What the evaluator's thread raised, as the caller raises it: an interrupt as itself
        (the run's interrupt, as in the caller's thread), anything else as an EvaluatorError."""
        return exc if isinstance(exc, KeyboardInterrupt) else self._fail(exc)

    def next(self) -> Result | None:
        """The next result, or None when the wall-time budget ran out first."""
        item = self._get()
        if item is self._END:
            raise EvaluatorError(f"evaluator {self.name!r} returned fewer results than genomes")
        return item  # (a Result: `_checked` refuses anything else, None included, which means the deadline here)

    def expect_end(self) -> None:
        """After the last genome's result: one more is a broken evaluator (whose results
        cannot be matched to genomes)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return
        item = self._get()
        if item is not None and item is not self._END:
            raise TooManyResults(
                f"evaluator {self.name!r} returned more results than genomes ({len(self.genomes)} genomes)"
            )

    def close(self) -> None:
        self.stop = True
        if self.queue is None and self.it is not None:
            close = getattr(self.it, "close", None)
            if close is not None:
                close()
