"""The `evokernel` command: search, replay, show, plugins.

User errors (a missing or malformed file, an unknown strategy, a zero budget) print one
line on stderr and exit 2; an evaluator that breaks exits 1; nothing prints a traceback.
Output into a pipe whose reader went away (`| head`) stops quietly with exit 141, as a
command killed by SIGPIPE; a search under way finishes and is stored as if nothing happened.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from evokernel.core.errors import ConfigError, EvaluatorError, EvokernelError
from evokernel.engine.search import Budget, Observer, Search, SearchReport

__all__ = ["main"]

USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        self.exit(USER_ERROR, f"evokernel: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = _nonneg_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


# the strategies evokernel ships (evokernel.engine.strategies), named in --strategy's help without
# loading every plugin to build the parser; tests check it against strategy_names()
_BUILTIN_STRATEGIES = ("default", "evolution", "local", "optuna-tpe", "optuna-cmaes", "optuna-gp", "optuna-nsga2",
                       "optuna-qmc", "optuna-random", "random")


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evokernel", description="Evolutionary search for faster GPU kernels.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(sp: argparse.ArgumentParser, *, db_default: str | None) -> None:
        sp.add_argument("--budget", type=_positive_int, default=100, help="evaluations (default 100)")
        sp.add_argument("--wall-time", type=_positive_float, default=None, help="seconds (default: none)")
        sp.add_argument("--seed", type=int, default=0,
                        help="seed of every random choice (default 0); the same seed and options re-run "
                             "(or resume) the same run")
        sp.add_argument("--strategy", default=None, metavar="NAME",
                        help=f"search strategy: {', '.join(_BUILTIN_STRATEGIES)}, or one a plugin registers "
                             "(evokernel plugins); default: default")
        sp.add_argument("--noise", type=_nonneg_float, default=None,
                        help="replay only: sigma of multiplicative noise per evaluation (0.05 ~ 5%%)")
        sp.add_argument("--patience", type=_positive_int, default=None,
                        help="stop after this many generations without a better elite")
        sp.add_argument("--population", type=_positive_int, default=None,
                        help="individuals kept per generation, and elites carried over (default: the strategy's)")
        sp.add_argument("--db", default=db_default,
                        help=f"SQLite database (default: {db_default or 'in memory'})")
        sp.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        sp.add_argument("--quiet", action="store_true", help="no progress display")

    s = sub.add_parser("search", help="run (or resume) a search and print its elites")
    s.add_argument("target", help="a search file (.py defining `space` and `evaluator`), a landscape "
                                  "CSV, or the name of a shipped landscape")
    s.add_argument("--name", default=None, help="run name (default: the space's name)")
    s.add_argument("--llm", nargs="?", const="claude-sonnet-5", default=None, metavar="MODEL",
                   help="add the LLM rewrite operator (Anthropic; needs ANTHROPIC_API_KEY; default model "
                        "claude-sonnet-5); off, with one line saying why, when it cannot run")
    s.add_argument("--llm-dollars", type=_positive_float, default=None,
                   help="stop LLM calls once they cost this much (the search goes on)")
    s.add_argument("--require-sandbox", action="store_true",
                   help="refuse to judge candidates unless every sandbox protection holds on this machine")
    common(s, db_default="evokernel.db")

    r = sub.add_parser("replay", help="run a strategy against a recorded landscape")
    r.add_argument("landscape", help="landscape CSV, or the name of a shipped landscape")
    common(r, db_default=None)

    sh = sub.add_parser("show", help="print the runs, elites and history in a database")
    sh.add_argument("db", help="the search database (SQLite), e.g. evokernel.db")
    sh.add_argument("--run", default=None, help="run id (or prefix); default: the latest run")
    sh.add_argument("--json", action="store_true", help="print JSON on stdout")

    c = sub.add_parser("check", help="check (and time) one candidate against a problem, in a sandbox")
    c.add_argument("problem", help="problem module (.py): make_inputs, reference, SHAPES")
    c.add_argument("candidate", help="candidate module (.py) defining kernel(*inputs)")
    c.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda when a GPU is present, else cpu (Triton through its interpreter)")
    c.add_argument("--no-time", action="store_true", help="check correctness only")
    c.add_argument("--seeds", type=_positive_int, default=1, help="checks per tuning shape before timing")
    c.add_argument("--timeout", type=_positive_float, default=None, help="seconds per step (import, call, timing)")
    c.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    c.add_argument("--require-sandbox", action="store_true",
                   help="exit 2 unless every sandbox protection (namespaces, seccomp, limits) holds here")
    c.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter of the problem (its Params), as text: e.g. --param m=64,128; repeatable; "
                        "overrides the problem's environment variable")

    sw = sub.add_parser("sweep", help="measure every valid point of a search file's space into a landscape CSV")
    sw.add_argument("target", help="a search file (.py defining `space` and `evaluator`)")
    sw.add_argument("--out", required=True, help="landscape CSV to write (appended to: a re-run resumes)")
    sw.add_argument("--limit", type=_positive_int, default=None, help="at most this many new points")
    sw.add_argument("--wall-time", type=_positive_float, default=None, help="stop after this many seconds")
    sw.add_argument("--seed", type=int, default=0, help="order of the points (shuffled by this seed)")
    sw.add_argument("--quiet", action="store_true", help="no progress display")

    kd = sub.add_parser("kernels", help="query the kernel database: accepted kernels with their own source")
    kd.add_argument("db", help="the search database (SQLite)")
    kd.add_argument("--op", default=None, help="the problem's family (FAMILY) or name")
    kd.add_argument("--gpu", default=None, help="GPU name as recorded")
    kd.add_argument("--shape", default=None, help="e.g. M=64,N=4096: kernels tested on that shape")
    kd.add_argument("--source", default=None, metavar="GENOME", help="print this kernel's source and diff")
    kd.add_argument("--json", action="store_true", help="print JSON on stdout")

    pr = sub.add_parser("profile", help="profile a model: GPU time per kernel, op and module, ranked by roofline "
                                        "headroom and gaps (evokernel.model.profile)")
    pr.add_argument("target", nargs="?", default=None,
                    help="a .py defining `model` (nn.Module or factory) and `example_inputs` (tuple or factory)")
    pr.add_argument("--trace", default=None, help="read a saved Chrome trace (.json or .json.gz) instead")
    pr.add_argument("--sglang", default=None, metavar="MODEL",
                    help="profile an SGLang engine serving MODEL (a model folder; needs sglang installed): one "
                         "one_batch run of --batch-size/--input-len/--output-len under torch.profiler")
    pr.add_argument("--batch-size", type=_positive_int, default=1, help="with --sglang (default 1)")
    pr.add_argument("--input-len", type=_positive_int, default=512, help="with --sglang (default 512)")
    pr.add_argument("--output-len", type=_positive_int, default=8, help="with --sglang (default 8)")
    pr.add_argument("--package", default=None, help="with --sglang: an `evokernel export sglang-plugin` folder to apply")
    pr.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="with --sglang: one more SGLang server argument (repeatable), e.g. "
                         "--server-arg=--attention-backend=triton")
    pr.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when a GPU is present")
    pr.add_argument("--iters", type=_positive_int, default=10, help="profiled calls (default 10)")
    pr.add_argument("--warmup", type=int, default=3, help="calls before profiling (default 3)")
    pr.add_argument("--save-trace", default=None, metavar="PATH", help="keep the Chrome trace here")
    pr.add_argument("--db", default="evokernel.db", help="store the profile here (default: evokernel.db)")
    pr.add_argument("--top", type=_positive_int, default=20, help="rows to print (default 20)")
    pr.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    ls = sub.add_parser("lessons", help="print the knowledge base: lessons of earlier runs (patterns, caveats, summaries)")
    ls.add_argument("db", help="the search database (SQLite)")
    ls.add_argument("--op", default=None, help="the problem's family (FAMILY) or name")
    ls.add_argument("--gpu", default=None, help="GPU name as recorded")
    ls.add_argument("--summarize", nargs="?", const="claude-sonnet-5", default=None, metavar="MODEL",
                    help="ask an LLM (Anthropic API, ANTHROPIC_API_KEY) for a prose summary of the lessons of "
                         "--op on --gpu, and store it")
    ls.add_argument("--json", action="store_true", help="print JSON on stdout")

    ex = sub.add_parser("export", help="write a database's winners where a serving engine reads them")
    ex.add_argument("format", choices=["sglang-moe", "sglang-plugin"],
                    help="sglang-moe: fused-MoE configs as SGLang's tuned-config files (SGLANG_MOE_CONFIG_DIR); "
                         "sglang-plugin: a package for evokernel's SGLang plugin (EVOKERNEL_SGLANG_PACKAGE): those "
                         "configs plus evokernel's fused-MoE kernel at its tuned configs")
    ex.add_argument("db", help="the search database (SQLite)")
    ex.add_argument("--out", required=True, help="folder to write (files in it are merged, not replaced)")
    ex.add_argument("--device-name", default=None, help="GPU name for the file names (default: what the run recorded)")
    ex.add_argument("--triton-version", default=None, help="Triton version for the folder (default: the run's)")

    sub.add_parser("plugins", help="list registered mutators, evaluators, search spaces, strategies")
    sub.add_parser("landscapes", help="list the landscapes shipped with evokernel")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        return {
            "search": _cmd_search,
            "replay": _cmd_replay,
            "show": _cmd_show,
            "plugins": _cmd_plugins,
            "check": _cmd_check,
            "landscapes": _cmd_landscapes,
            "sweep": _cmd_sweep,
            "export": _cmd_export,
            "kernels": _cmd_kernels,
            "lessons": _cmd_lessons,
            "profile": _cmd_profile,
        }[args.command](args)
    except EvaluatorError as exc:
        print(f"evokernel: evaluator failed: {exc} (results so far are stored; re-run to resume)",
              file=sys.stderr)
        return 1
    except EvokernelError as exc:
        print(f"evokernel: error: {exc}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("evokernel: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`): stop writing, quietly
        _silence(sys.stdout)
        _silence(sys.stderr)
        return 128 + 13  # as a command killed by SIGPIPE, which is what the shell expects


def _silence(stream: Any) -> None:
    """Point a stream's file descriptor at /dev/null (its reader is gone), so neither later
    writes nor the flush at exit raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _on_broken_pipe(console: Any, *, stop: bool) -> Any:
    """Rich exits the process (SystemExit 1) when its pipe closes; instead, a display on
    stderr goes quiet and the search goes on (a closed pipe never changes a run), and the
    report on stdout stops with a BrokenPipeError that `main` turns into a quiet exit."""
    def broken() -> None:
        console.quiet = True
        _silence(console.file)
        if stop:
            raise BrokenPipeError(32, "Broken pipe")

    console.on_broken_pipe = broken
    return console


# -- targets -----------------------------------------------------------------------------
def _load_module(path: Path) -> ModuleType:
    from evokernel.judge.problem import load_module

    try:
        return load_module(path, prefix="_evokernel_target")
    except EvokernelError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except Exception as exc:
        raise ConfigError(f"{path}: {type(exc).__name__}: {exc}") from None


def _target(args: argparse.Namespace, target: str) -> dict[str, Any]:
    """What to search: space, evaluator, and optionally descriptor, mutators, options, name,
    seeds (known-good points the first generation starts from)."""
    from evokernel.core.evaluator import Evaluator
    from evokernel.engine.landscape import Landscape, builtin_names, resolve_landscape
    from evokernel.core.space import SearchSpace

    path = Path(target)
    if path.suffix == ".py":
        if not path.is_file():
            raise ConfigError(f"no such search file: {target}")
        if args.noise is not None:
            raise ConfigError("--noise applies to landscape replays; set noise in the search file instead")
        mod = _load_module(path)
        space, evaluator = getattr(mod, "space", None), getattr(mod, "evaluator", None)
        if not isinstance(space, SearchSpace):
            raise ConfigError(f"{target}: defines no `space` (an evokernel SearchSpace)")
        if not isinstance(evaluator, Evaluator):
            raise ConfigError(f"{target}: defines no `evaluator` (with name, fingerprint() and evaluate())")
        return {
            "space": space,
            "evaluator": evaluator,
            "descriptor": getattr(mod, "descriptor", None),
            "mutators": getattr(mod, "mutators", None),
            "options": getattr(mod, "options", None),
            "name": getattr(mod, "name", None),
            "seeds": getattr(mod, "seeds", None) or (),
        }
    if path.suffix not in ("", ".csv"):
        raise ConfigError(f"{target}: expected a .py search file or a .csv landscape")
    csv = resolve_landscape(target)
    if not os.path.exists(csv):
        shipped = ", ".join(builtin_names())
        raise ConfigError(f"no such file or shipped landscape: {target} (shipped: {shipped})")
    from evokernel.evaluators import ReplayEvaluator

    landscape = Landscape.load(csv)
    evaluator = ReplayEvaluator(landscape, noise=args.noise or 0.0, seed=args.seed)
    return {"space": landscape.space, "evaluator": evaluator, "name": landscape.name}


def _make_search(args: argparse.Namespace, what: dict[str, Any], store: Any, observers: list[Observer]) -> Search:
    options = what.get("options")
    if args.population is not None or args.patience is not None:
        from dataclasses import replace

        from evokernel.engine.strategies import get_strategy

        base = options or get_strategy(args.strategy or "default").options
        options = replace(
            base,
            population=args.population or base.population,
            elitism=args.population or base.elitism,
            patience=args.patience if args.patience is not None else base.patience,
        )
    mutators = what.get("mutators")
    if mutators is not None and args.strategy is not None:
        raise ConfigError("the search file sets its own mutators; drop --strategy")
    knowledge = None
    if getattr(what["evaluator"], "problem", None) is not None:
        from evokernel.store.knowledge import KnowledgeRecorder

        knowledge = KnowledgeRecorder.from_evaluator(store, what["evaluator"])  # lessons and kernels, in the store
        observers = [*observers, knowledge]
    llm = _llm_operator(args, what, store, knowledge)
    if llm is not None:
        from evokernel.engine.strategies import get_strategy

        base = list(mutators) if mutators is not None else get_strategy(args.strategy or "default").mutators(
            what["space"])
        mutators = base + [llm]
        args.strategy = None
    return Search(
        what["space"],
        what["evaluator"],
        mutators,
        strategy=None if mutators is not None else (args.strategy or "default"),
        options=options,
        store=store,
        descriptor=what.get("descriptor"),
        name=getattr(args, "name", None) or what.get("name"),
        observers=observers,
        seeds=what.get("seeds") or (),
    )


def _llm_operator(args: argparse.Namespace, what: dict[str, Any], store: Any = None, knowledge: Any = None) -> Any:
    """The LLM rewrite operator for `--llm`, or None (with one line on stderr if it is off)."""
    model = getattr(args, "llm", None)
    if not model:
        return None
    evaluator = what["evaluator"]
    problem, render = getattr(evaluator, "problem", None), getattr(evaluator, "render", None)
    if problem is None or render is None:
        raise ConfigError("--llm rewrites kernel sources: it needs a search file whose evaluator judges a problem "
                          "(a KernelEvaluator), not a landscape replay")
    try:
        from evokernel.mutators.llm import AnthropicProvider, LLMRewrite
    except ImportError as exc:  # pragma: no cover - the module itself has no hard dependency
        print(f"evokernel: LLM operator off: {exc}", file=sys.stderr)
        return None
    lessons = None
    if knowledge is not None:
        from evokernel.store.knowledge import lessons_for

        where = knowledge.where
        lessons = lambda p, g: lessons_for(store, op=where["op"], gpu=where["gpu"],  # noqa: E731
                                            toolchain=where["toolchain"])
    op = LLMRewrite(problem, provider=AnthropicProvider(model), render=render, lessons=lessons)
    off = op.available()
    if off is not None:
        print(f"evokernel: LLM operator off: {off}; searching without it", file=sys.stderr)
        return None
    if knowledge is not None:  # the run ends with a prose summary of its op's lessons
        knowledge.summarizer = op.provider
    return op


def _budget(args: argparse.Namespace) -> Budget:
    return Budget(evaluations=args.budget, wall_s=args.wall_time, cost=getattr(args, "llm_dollars", None))


# -- progress ----------------------------------------------------------------------------
class _Progress(Observer):
    """A rich progress bar with the best latency so far and the time left (on a terminal); off a
    terminal (a log, CI), a line per generation and, whenever `every_s` seconds pass without
    one, a line saying where the search is, so a slow generation (or a slow evaluation) is
    never minutes of silence."""

    every_s = 15.0

    def __init__(self, total: int | None) -> None:
        import threading

        from rich.console import Console

        self.console = _on_broken_pipe(Console(stderr=True), stop=False)
        self.total = total
        self.bar: Any = None
        self.task: Any = None
        self.t0 = self.last = time.monotonic()
        self.generation = 0  # the generation being evaluated
        self.evaluations = 0
        self.best = "-"
        self._stop = threading.Event()
        self._beat: Any = None

    def on_start(self, run_id: str, budget: Budget, resumed: bool) -> None:
        verb = "resuming" if resumed else "starting"
        self.console.print(f"[bold]evokernel[/]: {verb} run {run_id}", highlight=False)
        self.t0 = self.last = time.monotonic()
        if self.console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.bar = Progress(
                TextColumn("[bold]search"), BarColumn(), MofNCompleteColumn(),
                TextColumn("best {task.fields[best]}"), TimeElapsedColumn(), TextColumn("left"),
                TimeRemainingColumn(), console=self.console, transient=False,
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
                self.console.print(f"search: {self.evaluations}{of} evaluations (generation {self.generation}), "
                                   f"best {self.best}, {time.monotonic() - self.t0:.0f} s elapsed", highlight=False)
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
                f"{summary['failed']} failed, best {best}", highlight=False,
            )
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


def _run(search: Search, args: argparse.Namespace, progress: _Progress | None) -> SearchReport:
    try:
        return search.run(_budget(args), seed=args.seed)
    finally:
        if progress is not None:
            progress.close()


# -- commands ----------------------------------------------------------------------------
def _say_sandbox(report: Any) -> None:
    """One line on stderr when candidates run with a protection off."""
    if report.off:
        print(f"evokernel: {report.describe()}", file=sys.stderr)


def _cmd_search(args: argparse.Namespace) -> int:
    from evokernel.store import open_store

    if args.require_sandbox:  # read by every sandbox the search file's evaluator starts
        os.environ["EVOKERNEL_SANDBOX"] = "require"
    what = _target(args, args.target)
    sandbox = getattr(what["evaluator"], "sandbox", None)
    if callable(sandbox):
        _say_sandbox(sandbox())
    store = open_store(args.db)
    progress = None if (args.quiet or args.json) else _Progress(args.budget)
    search = _make_search(args, what, store, [progress] if progress else [])
    report = _run(search, args, progress)
    if args.json:
        print(json.dumps({**msgspec.to_builtins(report), "db": args.db}))
    else:
        _print_report(report, args.db)
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from evokernel.store import open_store

    what = _target(args, args.landscape)
    evaluator = what["evaluator"]
    store = open_store(args.db or ":memory:")
    progress = None if (args.quiet or args.json) else _Progress(args.budget)
    search = _make_search(args, what, store, [progress] if progress else [])
    t0 = time.monotonic()
    report = _run(search, args, progress)
    _, optimum = evaluator.landscape.optimum()
    genomes = {e.genome.id: e.genome for e in store.history(report.run_id)}
    # the recorded (noise-free) latency of what the search believed best after each evaluation
    trace = [evaluator.true_latency(genomes[gid]) if gid else None for gid in report.best_ids]
    best = report.best
    out = {
        "landscape": evaluator.landscape.name,
        "strategy": search.strategy,
        "seed": args.seed,
        "noise": evaluator.noise,
        "evaluations": report.evaluations,
        "best_latency_ms": evaluator.true_latency(best.genome) if best else None,
        "optimum_latency_ms": optimum,
        "fraction_of_optimum": optimum / evaluator.true_latency(best.genome) if best else 0.0,
        "best_params": best.genome.params if best else None,
        "measured_best_ms": best.latency_ms if best else None,
        "trace": [None if t is None or math.isinf(t) else t for t in trace],
        "stop_reason": report.stop_reason,
        "statuses": report.statuses,
        "operators": report.operators,
        "wall_s": time.monotonic() - t0,
    }
    if args.json:
        print(json.dumps(out))
    else:
        _print_report(report, args.db)
        print(f"optimum of {out['landscape']}: {optimum:.6f} ms; found {out['best_latency_ms']:.6f} ms "
              f"({out['fraction_of_optimum']:.3f} of optimum) in {report.evaluations} evaluations")
    return 0


def _console() -> Any:
    """stdout console; off a terminal, wide enough that tables do not wrap."""
    from rich.console import Console

    return _on_broken_pipe(Console() if sys.stdout.isatty() else Console(width=200), stop=True)


def _generations_run(report: SearchReport) -> int:
    """How many generations ran: `report.generations` is the last one's number, counting the
    first population as generation 0 (a search that found nothing new to try numbered one more
    and stopped before evaluating it)."""
    return report.generations + (report.stop_reason != "space exhausted")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _print_report(report: SearchReport, db: str | None) -> None:
    from rich.table import Table

    console = _console()
    table = Table(title=f"elites of run {report.run_id} ({report.stop_reason})")
    for col in ("#", "niche", "latency ms", "noise", "n", "genome", "params"):
        table.add_column(col, justify="right" if col in ("#", "latency ms", "noise", "n") else "left")
    for i, e in enumerate(report.elites, 1):
        table.add_row(str(i), e.niche, f"{e.latency_ms:.6f}", f"{100 * e.noise:.1f}%", str(len(e.samples)),
                      e.genome.id, e.genome.short())
    console.print(table)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items()))
    where = f"; stored in {db}" if db else ""
    console.print(
        f"{report.evaluations} evaluations ({report.measured} measured, {report.resumed_hits} resumed, "
        f"{report.reused} reused from earlier runs) in {_plural(_generations_run(report), 'generation')}: "
        f"{statuses}{where}",
        highlight=False,
    )


def _cmd_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from evokernel.store import SQLiteStore

    if not os.path.exists(args.db):
        raise ConfigError(f"no such database: {args.db}")
    store = SQLiteStore(args.db, create=False)
    runs = store.runs()
    if not runs:
        raise ConfigError(f"{args.db} holds no runs")
    run = store.run(args.run) if args.run else runs[-1]
    for r in runs:
        r.status = _shown_status(store, r)
    elites = store.elites(run_id=run.id)
    history = store.history(run.id)
    gens = [p for kind, p, _ in store.events(run.id) if kind == "generation"]
    if args.json:
        print(json.dumps({
            "runs": [msgspec.to_builtins(r) for r in runs],
            "run": run.id,
            "elites": msgspec.to_builtins(elites),
            "generations": gens,
            "counts": store.count(run.id),
        }))
        return 0
    console = _console()
    t = Table(title=f"runs in {args.db}")
    for col in ("run", "name", "status", "evaluations", "best ms", "gpu", "started"):
        t.add_column(col)
    for r in runs:
        best = r.summary.get("best_ms")
        if best is None:  # a run that did not finish (or an older one): its archive's best
            best = min((el.latency_ms for el in store.elites(run_id=r.id)), default=None)
        t.add_row(r.id, r.name, r.status, str(store.count(r.id)["evaluations"]),
                  f"{best:.6f}" if best else "-", _shown_gpu(r),
                  time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)))
    console.print(t)
    e = Table(title=f"elites of run {run.id}")
    for col in ("niche", "latency ms", "noise", "genome", "params"):
        e.add_column(col)
    for el in elites:
        e.add_row(el.niche, f"{el.latency_ms:.6f}", f"{100 * el.noise:.1f}%", el.genome.id, el.genome.short())
    console.print(e)
    h = Table(title=f"history of run {run.id}")
    for col in ("generation", "evaluations", "failed", "best ms"):
        h.add_column(col, justify="right")
    for g in gens:
        h.add_row(str(g["generation"]), str(g["evaluations"]), str(g["failed"]),
                  f"{g['best_ms']:.6f}" if g["best_ms"] else "-")
    console.print(h)
    statuses: dict[str, int] = {}
    for ev in history:
        if ev.kind == "eval":
            statuses[ev.result.status.value] = statuses.get(ev.result.status.value, 0) + 1
    c = store.count(run.id)
    console.print(
        f"{c['evaluations']} evaluations ({c['measured']} measurements, {c['cached']} reused), "
        f"{c['remeasurements']} re-measurements; "
        + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
        highlight=False,
    )
    return 0


def _shown_status(store: Any, run: Any) -> str:
    """A run marked running that no process holds was killed (kill -9, a lost machine)."""
    if run.status == "running" and not store.running_elsewhere(run.id):
        return "killed"
    return run.status


_GPU_NAME = re.compile(r"(?<![a-z0-9])(gb200|b200|b100|h200|h100|h20|h800|a100|a800|a10g|a10|l40s|l40|l4|"
                       r"mi355x|mi325x|mi300x|mi300a|mi250x|rtx\d{4}|t4|v100)(?![a-z0-9])", re.IGNORECASE)


def _shown_gpu(run: Any) -> str:
    """The GPU a run's results come from: for a replay, the landscape's (named in the run's
    name, as the shipped landscapes are), not the machine that replayed it."""
    evaluator = run.config.get("evaluator")
    if isinstance(evaluator, dict) and evaluator.get("evaluator") == "replay":
        m = _GPU_NAME.search(run.name)
        return f"{m.group(1).upper()} (replay)" if m else "replay"
    return str(run.environment.get("gpu") or "cpu")


def _param_text(items: list[str]) -> dict[str, str]:
    """`--param NAME=VALUE` arguments as {NAME: VALUE} (converted by the problem's Params)."""
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"--param {item!r}: expected NAME=VALUE")
        if name.strip() in out:
            raise ConfigError(f"--param {name.strip()} is given twice")
        out[name.strip()] = value
    return out


_CPU_TIMINGS = ("timed on the CPU (wall clock; Triton kernels run in its interpreter): these figures say nothing "
                "about GPU speed")


def _check_plan(problem: Any, device: str, *, cpu_sized: bool, timed: bool) -> str:
    """One line on what `check` is about to do, and on the CPU how long it may take."""
    def shapes(items: list[dict[str, Any]]) -> str:
        text = "; ".join(",".join(f"{k}={v}" for k, v in s.items()) for s in items[:3])
        return text + ("; ..." if len(items) > 3 else "")

    what = "correctness, then timing" if timed else "correctness only (--no-time)"
    held = f" and {len(problem.heldout)} held-out" if problem.heldout else ""
    n = len(problem.shapes)
    line = (f"check: {problem.name} on {'the CPU' if device == 'cpu' else device}: {what}, at "
            f"{n} {'CPU-sized ' if cpu_sized else ''}shape{'s' if n > 1 else ''} ({shapes(problem.shapes)}){held}")
    if device == "cpu" and not cpu_sized:
        try:
            work: float | None = max((problem.flops(s) or 0.0) for s in problem.shapes + problem.heldout)
        except Exception:  # the problem's own flops(); unknown work is not a reason to stop
            work = None
        if work is None or work == 0 or work > 1e9:
            # a GFLOP per call is about a second of a CPU core's time, and checks and timing make many calls
            line += ("; the problem declares no CPU_SHAPES, so its full sizes run on the CPU: this can take "
                     "minutes" + (" (--no-time skips timing)" if timed else ""))
    return line


def _cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 if the candidate is accepted, 1 if it is rejected, 2 for usage errors."""
    for path in (args.problem, args.candidate):
        if not Path(path).is_file():
            raise ConfigError(f"no such file: {path}")
    try:
        source = Path(args.candidate).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {args.candidate}: {exc}") from None
    from evokernel.judge.gate import GateOptions, Judge
    from evokernel.judge.problem import Problem
    from evokernel.judge.sandbox import SandboxOptions, isolation_report

    device = args.device
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA GPU is available here")
    problem = Problem.load(args.problem, param_text=_param_text(args.param) if args.param else None)
    full = problem
    if device == "cpu":
        problem = problem.on_cpu()
    if not args.json:  # what it is about to do: on the CPU, a full-size problem takes minutes
        print(_check_plan(problem, device, cpu_sized=problem is not full, timed=not args.no_time),
              file=sys.stderr, flush=True)
    limits = {} if args.timeout is None else {
        "start_timeout_s": args.timeout, "call_timeout_s": args.timeout, "time_timeout_s": args.timeout}
    sandbox = SandboxOptions(**limits, isolation="require" if args.require_sandbox else None)
    report = isolation_report(sandbox, device)  # SandboxUnavailable (exit 2) if required and not all there
    _say_sandbox(report)
    options = GateOptions(seeds=args.seeds, time=not args.no_time, sandbox=sandbox)
    try:
        judge = Judge(problem, device, options)
    except EvokernelError:
        raise
    except Exception as exc:  # the problem's own code failed: a usage error, not a verdict
        raise ConfigError(f"{args.problem}: {type(exc).__name__}: {exc}") from None
    verdict = judge.check(source, label=args.candidate)
    if args.json:
        extra = {"shapes": "cpu" if problem is not full else "full"}
        if device == "cpu" and verdict.timings:
            extra["note"] = _CPU_TIMINGS
        print(json.dumps({**msgspec.to_builtins(verdict), "device": device, **extra,
                          "sandbox": {"on": sorted(report.on), "off": report.off}}))
    elif verdict.accepted:
        figures = ", ".join(f"{t.shape}: {t.median_ms:.5f} ms" for t in verdict.timings)
        print(f"accepted{': ' + figures if figures else ''}")
        if device == "cpu" and verdict.timings:
            print(f"note: {_CPU_TIMINGS}", file=sys.stderr)
    else:
        print(f"rejected: {verdict.reason.splitlines()[0]}", file=sys.stderr)
    code = 0 if verdict.accepted else 1
    if device == "cuda":
        # torch warns at interpreter exit about CUDA memory still shared with candidate
        # processes the judge killed; leave before that noise reaches the verdict's stderr
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _cmd_plugins(args: argparse.Namespace) -> int:
    from rich.table import Table

    from evokernel.core.plugins import GROUPS, registered
    from evokernel.engine.strategies import strategy_names

    t = Table(title="registered plugins")
    for col in ("group", "name", "object", "from"):
        t.add_column(col)
    for group in GROUPS:
        for name, ep in sorted(registered(group).items()):
            dist = getattr(ep, "dist", None)
            t.add_row(group, name, ep.value, f"{dist.name} {dist.version}" if dist else "?")
    for name in strategy_names():
        if name not in registered("evokernel.strategies"):
            t.add_row("evokernel.strategies", name, "built in", "evokernel")
    _console().print(t)
    return 0


def _cmd_landscapes(args: argparse.Namespace) -> int:
    from evokernel.engine.landscape import Landscape, builtin, builtin_names

    for name in builtin_names():
        ls = Landscape.load(builtin(name))
        params, best = ls.optimum()
        print(f"{name}: {len(ls)} configurations, optimum {best:.6f} ms at "
              + " ".join(f"{k}={v}" for k, v in params.items()))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from evokernel.engine.sweep import sweep

    if not args.target.endswith(".py"):
        raise ConfigError(f"{args.target}: sweep takes a search file (.py defining `space` and `evaluator`)")
    args.noise = None
    what = _target(args, args.target)
    space, evaluator = what["space"], what["evaluator"]
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)  # one line per message, however long its path (no wrapping)
    count = {"n": 0, "failed": 0}

    def on_result(genome: Any, result: Any) -> None:
        count["n"] += 1
        count["failed"] += not result.is_ok
        if not args.quiet and (count["n"] % 25 == 0):
            console.print(f"sweep: {count['n']} measured ({count['failed']} failed)", highlight=False)

    report = sweep(space, evaluator, args.out, limit=args.limit, shuffle=args.seed, wall_s=args.wall_time,
                   on_result=on_result)
    left = report.points - report.already - report.measured
    console.print(f"sweep: {report.measured} measured ({report.failed} failed) in {report.wall_s:.0f} s; "
                  f"{report.already + report.measured} of {report.points} points in {report.path}"
                  + (f"; {left} left (re-run to continue)" if left > 0 else ""), highlight=False)
    return 0


def _cmd_kernels(args: argparse.Namespace) -> int:
    from evokernel.store.knowledge import kernels
    from evokernel.store import SQLiteStore

    if not os.path.exists(args.db):
        raise ConfigError(f"no such database: {args.db}")
    shape = None
    if args.shape:
        try:
            shape = {k.strip(): int(v) for k, v in (part.split("=") for part in args.shape.split(","))}
        except ValueError:
            raise ConfigError(f"--shape takes NAME=INT,NAME=INT..., got {args.shape!r}") from None
    rows = kernels(SQLiteStore(args.db, create=False), op=args.op, gpu=args.gpu, shape=shape)
    if args.source:
        row = next((r for r in rows if r["genome_id"].startswith(args.source)), None)
        if row is None:
            raise ConfigError(f"no kernel {args.source!r} in {args.db} (with these filters)")
        print(row["source"] if not args.json else json.dumps(row))
        if not args.json:
            print(row["diff"], file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        shapes = "; ".join(",".join(f"{k}={v}" for k, v in s.items()) for s in r["shapes"])
        print(f"{r['genome_id']}  {r['latency_ms']:.5f} ms  {r['op']}  {r['gpu']}  [{shapes}]  run {r['run_id']}")
    if not rows:
        print("no kernels", file=sys.stderr)
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from evokernel.judge.env import toolchain
    from evokernel.model.profile import load_target, parse_trace, profile_module
    from evokernel.store import SQLiteStore

    if sum(x is not None for x in (args.target, args.trace, args.sglang)) != 1:
        raise ConfigError("profile takes a target file, --trace TRACE.json or --sglang MODEL (one of them)")
    if args.sglang is not None:
        import importlib.util
        import tempfile

        from evokernel.evaluators.sglang import profile_engine

        if importlib.util.find_spec("sglang") is None:
            raise ConfigError("--sglang needs SGLang installed (pip install 'evokernel[sglang]')")
        argv = ["--model-path", args.sglang, *[a for arg in args.server_arg for a in arg.split("=", 1)]]
        trace = args.save_trace or os.path.join(tempfile.mkdtemp(prefix="evokernel-sglang-"), "trace.json")
        prof = profile_engine(argv, batch_size=args.batch_size, input_len=args.input_len, output_len=args.output_len,
                              package=args.package, trace_path=trace)
        name = prof.target
    elif args.trace is not None:
        if not os.path.isfile(args.trace):
            raise ConfigError(f"no such trace: {args.trace}")
        name = Path(args.trace).name.split(".")[0]
        prof = parse_trace(args.trace, target=name)
    else:
        model, inputs, name = load_target(args.target)
        try:
            prof = profile_module(model, inputs, device=args.device, warmup=args.warmup, iters=args.iters,
                                  target=name, trace_path=args.save_trace)
        except EvokernelError:
            raise
        except Exception as exc:  # the model itself failed
            raise ConfigError(f"{args.target}: running the model failed: {type(exc).__name__}: {exc}") from None
    record = prof.to_dict()
    record.update(name=name, toolchain={**toolchain(), "device_name": prof.device_name})
    with SQLiteStore(args.db) as store:
        profile_id = store.save_profile(record)
    if args.json:
        print(json.dumps({**prof.to_dict(top=args.top), "profile_id": profile_id, "db": args.db}))
        return 0
    console = _console()
    console.print(prof.table(top=args.top))
    for note in prof.notes:
        console.print(f"note: {note}", highlight=False)
    console.print(f"saved as profile {profile_id} in {args.db}", highlight=False)
    return 0


def _cmd_lessons(args: argparse.Namespace) -> int:
    from evokernel.store import SQLiteStore

    if not os.path.exists(args.db):
        raise ConfigError(f"no such database: {args.db}")
    store = SQLiteStore(args.db, create=False)
    if args.summarize:
        if not (args.op and args.gpu):
            raise ConfigError("--summarize needs --op and --gpu (the lessons of one operation on one GPU)")
        from evokernel.store.knowledge import summarize
        from evokernel.mutators.llm import AnthropicProvider

        provider = AnthropicProvider(args.summarize)
        off = provider.available()
        if off is not None:
            raise ConfigError(f"cannot summarize: {off}")
        if summarize(store, provider, op=args.op, gpu=args.gpu) is None:
            print("evokernel: no summary (no lessons, or the call failed: see the warning above)", file=sys.stderr)
    found = sorted(store.lessons(op=args.op, gpu=args.gpu), key=lambda le: -le.created)
    if args.json:
        import msgspec

        print(msgspec.json.encode(found).decode())
        return 0
    for le in found:
        print(f"[{le.kind}] {le.op} {le.gpu}: {le.text}")
    if not found:
        print("no lessons", file=sys.stderr)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from evokernel.integrations.sglang.export import sglang_moe, sglang_plugin_package
    from evokernel.store import SQLiteStore

    if not os.path.exists(args.db):
        raise ConfigError(f"no such database: {args.db}")
    write = sglang_plugin_package if args.format == "sglang-plugin" else sglang_moe
    report = write(SQLiteStore(args.db, create=False), args.out, device_name=args.device_name,
                   triton_version=args.triton_version)
    for line in report.skipped:
        print(f"skipped run {line}", file=sys.stderr)
    for line in getattr(report, "notes", ()):
        print(f"run {line}", file=sys.stderr)
    if not report.files:
        raise ConfigError(f"{args.db} holds no fused-MoE run that can be exported")
    for row in report.exported:
        print(f"M={row['M']}: {row['latency_ms']:.4f} ms (run {row['run']}) -> {row['file']}")
    for path in report.files:
        print(f"wrote {path}")
    if args.format == "sglang-plugin":
        print(f"serve with: EVOKERNEL_SGLANG_PACKAGE={Path(args.out).resolve()} (evokernel installed where SGLang "
              "runs; its plugin applies the package in every SGLang process)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
