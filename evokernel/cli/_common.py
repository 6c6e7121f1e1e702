"""What the subcommands share: argument types, the search target (a search file or a landscape),
consoles that go quiet when their reader goes away, and the sandbox line."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from pathlib import Path
from typing import Any

from evokernel.core.errors import ConfigError
from evokernel.engine.assemble import SearchSpec

USER_ERROR = 2


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        self.exit(USER_ERROR, f"evokernel: error: {message} (see {self.prog} --help)\n")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "at least 1")


def nonneg_int(text: str) -> int:
    return _int_at_least(text, 0, "a whole number >= 0")


def noise_sigma(text: str) -> float:
    """A --noise value: the sigma of a log-normal factor, in [0, 1] (1 already spreads a
    measurement over a factor of e either way; more says nothing a replay can use)."""
    value = nonneg_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (0.05 is about 5%), got {text}")
    return value


def nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = nonneg_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def device_arg(text: str) -> str:
    """A --device value: cpu, cuda or cuda:N (whether that GPU is there is checked later, with torch)."""
    from evokernel.judge.device import parse_device

    try:
        parse_device(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("device ")) from None
    return text.strip()


# the strategies evokernel ships (evokernel.engine.strategies), named in --strategy's help without
# loading every plugin to build the parser; tests check it against strategy_names()
BUILTIN_STRATEGIES = (
    "default",
    "evolution",
    "local",
    "optuna-tpe",
    "optuna-cmaes",
    "optuna-gp",
    "optuna-nsga2",
    "optuna-qmc",
    "optuna-random",
    "random",
    "model",
)


def add_run_options(sp: argparse.ArgumentParser, *, db_default: str | None) -> None:
    """The options `search` and `replay` share: budget, seed, strategy, store, output."""
    sp.add_argument("--budget", type=positive_int, default=100, help="evaluations (default 100)")
    sp.add_argument(
        "--wall-time",
        type=positive_float,
        default=None,
        help="seconds the search may take (default: none); loading the search file is bounded by it too, at no less than 30 s",
    )
    sp.add_argument(
        "--seed",
        type=nonneg_int,
        default=0,
        help="seed of every random choice (default 0); the same seed and options re-run (or resume) the same run",
    )
    sp.add_argument(
        "--strategy",
        default=None,
        metavar="NAME",
        help=f"search strategy: {', '.join(BUILTIN_STRATEGIES)}, or one a plugin registers "
        "(evokernel plugins); default: the kernel family's measured best: model for matmul and attention spaces, "
        "default for the rest",
    )
    sp.add_argument(
        "--mutator",
        action="append",
        default=None,
        metavar="NAME",
        help="search with this registered mutator instead of the strategy's (repeat for several): point, "
        "crossover, restart, local, optuna, cost-model, or one a plugin registers (evokernel plugins); "
        "not with --strategy, nor with a search file that sets its own `mutators`",
    )
    sp.add_argument(
        "--no-fallback",
        action="store_true",
        help="when no mutator proposes a genome the run has not seen (in 32 tries), the search takes a random "
        "unseen point instead (the fallback; the report counts these proposals); with this, it takes none: "
        "the generation ends with what it has, and one with nothing stops the run ('mutators had nothing new')",
    )
    sp.add_argument(
        "--noise",
        type=noise_sigma,
        default=None,
        help="replay only: sigma of multiplicative noise per evaluation, 0 to 1 (0.05 ~ 5%%)",
    )
    sp.add_argument(
        "--train-on-replayed",
        action="store_true",
        help="replay only: let the cost model learn from the landscape being replayed (by default it is held "
        "out: a model trained on it has seen the answer, and the run says nothing of how the search would do)",
    )
    sp.add_argument(
        "--patience",
        type=nonneg_int,
        default=None,
        metavar="N",
        help="stop when the best has not improved by more than 0.5%% for N generations (the run's stop reason: "
        "'no improvement in N generations'); default 8: the shipped landscapes' replays find their final "
        "best within a few generations, and 8 stale generations (64 evaluations at the default population) "
        "are more than a run still improving goes without a 0.5%% gain; 0: no early stop, the whole budget "
        "(a run stopped early keeps its id, so --patience 0 resumes it to spend the rest)",
    )
    sp.add_argument(
        "--fidelity",
        nargs="?",
        type=nonneg_float,
        const=0.10,
        default=None,
        metavar="MARGIN",
        help="judge every genome at the evaluator's cheap fidelity first (short timing, one shape) and "
        "promote only the best of each batch and those within MARGIN (default 0.10) of the best figure "
        "to the full judgement; the rest keep a calibrated estimate",
    )
    sp.add_argument(
        "--population",
        type=positive_int,
        default=None,
        help="individuals kept per generation, and elites carried over (default: the strategy's)",
    )
    sp.add_argument(
        "--db",
        default=db_default,
        help=f"the store: an SQLite file or a postgresql:// URL (default: {db_default or 'in memory'})",
    )
    sp.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    sp.add_argument("--quiet", action="store_true", help="no progress display")


def output_file(path: str, what: str) -> None:
    """Refuse, in one line, an output file that cannot be written where it is asked for: its
    folder must exist (nothing is created above it) and it must not be a folder itself."""
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        raise ConfigError(f"{what} {path} is a folder; give a file name")
    if not parent.is_dir():
        why = "is not a folder" if parent.exists() else "does not exist"
        raise ConfigError(f"cannot write {what} {path}: {parent} {why}")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"cannot write {what} {path}: {parent} is not writable")


def output_folder(path: str, what: str) -> None:
    """Refuse, in one line, an output folder that is a file, or whose parent does not exist
    (the folder itself is made; nothing above it)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what} {path} is a file, not a folder")
    if not p.exists():
        parent = p.parent
        if not parent.is_dir():
            why = "is not a folder" if parent.exists() else "does not exist"
            raise ConfigError(f"cannot make {what} {path}: {parent} {why}")
        try:
            p.mkdir()
        except OSError as exc:
            raise ConfigError(f"cannot make {what} {path}: {exc.strerror or exc}") from None
    if not os.access(p, os.W_OK):
        raise ConfigError(f"cannot write in {what} {path}: not writable")


def silence(stream: Any) -> None:
    """Point a stream's file descriptor at /dev/null (its reader is gone), so neither later
    writes nor the flush at exit raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def on_broken_pipe(console: Any, *, stop: bool) -> Any:
    """Rich exits the process (SystemExit 1) when its pipe closes; instead, a display on
    stderr goes quiet and the search goes on (a closed pipe never changes a run), and the
    report on stdout stops with a BrokenPipeError that `main` turns into a quiet exit."""

    def broken() -> None:
        console.quiet = True
        silence(console.file)
        if stop:
            raise BrokenPipeError(32, "Broken pipe")

    console.on_broken_pipe = broken
    return console


def stdout_console() -> Any:
    """stdout console; off a terminal, wide enough that tables do not wrap."""
    from rich.console import Console

    return on_broken_pipe(Console() if sys.stdout.isatty() else Console(width=200), stop=True)


def load_target(args: argparse.Namespace, target: str) -> SearchSpec:
    """What to search: a search file's spec (space, evaluator, and optionally descriptor,
    mutators, options, name, seeds), or a landscape replayed (a CSV or a shipped name)."""
    from evokernel.engine.landscape import Landscape, builtin_names, resolve_landscape

    path = Path(target)
    if path.suffix == ".py":
        if not path.is_file():
            raise ConfigError(f"no such search file: {target}")
        if args.noise is not None:
            raise ConfigError("--noise applies to landscape replays; set noise in the search file instead")
        wall = getattr(args, "wall_time", None)
        with _loading_deadline(max(wall, LOADING_FLOOR_S) if wall else None, target):
            return SearchSpec.from_file(target)
    if path.suffix not in ("", ".csv"):
        raise ConfigError(f"{target}: expected a .py search file or a .csv landscape")
    csv = resolve_landscape(target)
    if not os.path.exists(csv):
        shipped = ", ".join(builtin_names())
        raise ConfigError(f"no such file or shipped landscape: {target} (shipped: {shipped})")
    from evokernel.evaluators import ReplayEvaluator

    landscape = Landscape.load(csv)
    evaluator = ReplayEvaluator(landscape, noise=args.noise or 0.0, seed=args.seed)
    return SearchSpec(landscape.space, evaluator, name=landscape.name)


#: with --wall-time, loading the search file may take this long at least (importing torch and
#: Triton takes seconds on a loaded machine); a file that hangs at import ends by then
LOADING_FLOOR_S = 30.0


def _loading_deadline(seconds: float | None, target: str) -> contextlib.AbstractContextManager[None]:
    """`--wall-time` bounds loading the search file too, at no less than `LOADING_FLOOR_S` (a
    file that hangs at import held the command for good)."""
    from evokernel.core.deadline import deadline

    return deadline(
        seconds, lambda: ConfigError(f"still loading after {seconds:g} s (with --wall-time); nothing was searched")
    )


def say_sandbox(report: Any) -> None:
    """One line on stderr when candidates run with a protection off."""
    if report.off:
        print(f"evokernel: {report.describe()}", file=sys.stderr)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def existing_store(db: str) -> Any:
    """The store at `db` (a path, sqlite:///path, or a postgresql:// URL), which must exist:
    what `show`, `kernels`, `lessons` and `export` read."""
    from evokernel.store import open_store

    if "://" not in db and not os.path.exists(db):
        raise ConfigError(f"no such database: {db}")
    return open_store(db, create=False)


def chosen_run(store: Any, db: str, run_id: str | None) -> tuple[Any, list[Any]]:
    """The run `--run` names (an id or prefix), else the latest; and every run in the store."""
    runs = store.runs()
    if not runs:
        raise ConfigError(f"{db} holds no runs")
    return (store.run(run_id) if run_id else runs[-1]), runs
