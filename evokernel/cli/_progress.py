"""The progress display of a search: a rich bar on a terminal, lines in a log."""

from __future__ import annotations

import time
from typing import Any

from evokernel.cli._common import on_broken_pipe
from evokernel.engine.search import Budget, Observer, SearchReport


class SearchProgress(Observer):
    """A rich progress bar with the best latency so far and the time left (on a terminal); off a
    terminal (a log, CI), a line per generation and, whenever `every_s` seconds pass without
    one, a line saying where the search is, so a slow generation (or a slow evaluation) is
    never minutes of silence. After the search, the re-measurement of its finalists (which can
    take longer than the search) is shown as its own step: "re-measuring finalists k/n" and the
    candidate being measured."""

    every_s = 15.0

    def __init__(self, total: int | None) -> None:
        import threading

        from rich.console import Console

        self.console = on_broken_pipe(Console(stderr=True), stop=False)
        self.total = total
        self.bar: Any = None
        self.task: Any = None
        self.t0 = self.last = time.monotonic()
        self.generation = 0  # the generation being evaluated
        self.evaluations = 0
        self.best = "-"
        self.remeasuring: str | None = None  # "re-measuring finalists k/n: <candidate>" while it runs
        self.rtask: Any = None
        self._stop = threading.Event()
        self._beat: Any = None

    def on_start(self, run_id: str, budget: Budget, resumed: bool) -> None:
        verb = "resuming" if resumed else "starting"
        self.console.print(f"[bold]evokernel[/]: {verb} run {run_id}", highlight=False)
        self.t0 = self.last = time.monotonic()
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("best {task.fields[best]}"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self.task = self.bar.add_task("search", total=self.total, best="-")
            self.bar.start()
        elif self._beat is None:
            import threading

            self._beat = threading.Thread(target=self._heartbeat, name="evokernel-progress", daemon=True)
            self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):
            if time.monotonic() - self.last >= self.every_s:
                of = f"/{self.total}" if self.total else ""
                where = self.remeasuring or f"search: {self.evaluations}{of} evaluations (generation {self.generation})"
                self.console.print(
                    f"{where}, best {self.best}, {time.monotonic() - self.t0:.0f} s elapsed",
                    highlight=False,
                )
                self.last = time.monotonic()

    def on_evaluation(self, individual: Any, best: Any, evaluations: int) -> None:
        self.evaluations = evaluations
        self.best = f"{best.latency_ms:.5f} ms" if best else "-"
        if self.bar is not None:
            self.bar.update(self.task, completed=evaluations, best=self.best)

    def on_generation(self, generation: int, summary: dict[str, Any]) -> None:
        self.generation = generation + 1
        if self.bar is None:
            best = f"{summary['best_ms']:.5f} ms" if summary["best_ms"] else "-"
            self.console.print(
                f"generation {generation}: {summary['evaluations']} evaluations, "
                f"{summary['failed']} failed, best {best}",
                highlight=False,
            )
            self.last = time.monotonic()

    def on_remeasure(self, done: int, total: int, genomes: list[Any]) -> None:
        line = f"re-measuring finalists {done}/{total}"
        if len(genomes) == 1:
            line += f": {genomes[0].id} ({genomes[0].short()})"
        elif genomes:
            line += f": {len(genomes)} side by side"
        else:
            line = f"re-measured finalists {done}/{total}"
        self.remeasuring = line
        if self.bar is not None:
            if self.rtask is None:
                self.rtask = self.bar.add_task(line, total=total, best=self.best)
            self.bar.update(self.rtask, description=line, completed=done, total=total)
        else:
            self.console.print(line, highlight=False)
            self.last = time.monotonic()

    def on_finish(self, report: SearchReport) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
            self._beat = None
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
