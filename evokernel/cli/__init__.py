"""The `evokernel` command: search, replay, show, runs, report, check, sweep, fan-out, kernels, profile,
lessons, export, promote, plugins, landscapes; one small module per subcommand (`evokernel.cli.search`, ...),
each with `add_parser(sub)` and `run(args)`. A search is built by `evokernel.engine.assemble`,
as the Python API builds it.

User errors (a missing or malformed file, an unknown strategy, a zero budget) print one
line on stderr and exit 2; an evaluator that breaks exits 1; nothing prints a traceback,
unless `--traceback` is given: an error raised by the user's own code (a search file, an
evaluator, a problem module) then prints its full traceback on stderr before the line. Without
it, such a line ends with a hint: "(run with --traceback to see where)".
Output into a pipe whose reader went away (`| head`) stops quietly with exit 141, as a
command killed by SIGPIPE; a search under way finishes and is stored as if nothing happened.
"""

from __future__ import annotations

import argparse
import functools
import sys
import traceback
from collections.abc import Sequence

from evokernel.cli import (
    check,
    export,
    fanout,
    kernels,
    landscapes,
    lessons,
    plugins,
    profile,
    promote,
    replay,
    report,
    runs,
    search,
    show,
    sweep,
)
from evokernel.cli._common import USER_ERROR, Parser, silence
from evokernel.cli._progress import SearchProgress as _Progress  # noqa: F401  (a name tests patch)
from evokernel.core.errors import EvaluatorError, EvokernelError

__all__ = ["main"]

#: subcommand -> its module, in the order `evokernel --help` lists them
COMMANDS = {
    "search": search,
    "replay": replay,
    "show": show,
    "runs": runs,
    "report": report,
    "check": check,
    "sweep": sweep,
    "fan-out": fanout,
    "kernels": kernels,
    "profile": profile,
    "lessons": lessons,
    "export": export,
    "promote": promote,
    "plugins": plugins,
    "landscapes": landscapes,
}


#: the commands that run the user's own code (search files, evaluators, problem modules), which
#: take --traceback after the command as well as before it
RUNS_USER_CODE = ("search", "replay", "check", "sweep", "fan-out", "profile")

TRACEBACK_HELP = (
    "on an error raised by your own code (a search file, an evaluator, a problem module), print its "
    "full traceback on stderr, with file names and line numbers (default: one line)"
)


def _build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="evokernel", description="Evolutionary search for faster GPU kernels.")
    p.add_argument("--version", action="version", version=f"evokernel {_version()}")
    p.add_argument("--traceback", action="store_true", help=TRACEBACK_HELP)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add_parser(sub)
    for name in RUNS_USER_CODE:  # (SUPPRESS: given before the command, it is not undone after it)
        sub.choices[name].add_argument(
            "--traceback", action="store_true", default=argparse.SUPPRESS, help=TRACEBACK_HELP
        )
    return p


def user_error(exc: BaseException) -> BaseException | None:
    """The exception raised in the user's own code behind an evokernel error (what it was raised
    from, or while handling), or None when evokernel, Python or a library said no by itself (a
    missing file, an unreadable database): its traceback passes through a file of the user's."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if not isinstance(cause, EvokernelError) and any(
            _users(frame.f_code.co_filename) for frame, _ in traceback.walk_tb(cause.__traceback__)
        ):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def _users(filename: str) -> bool:
    """Whether a file is the user's: not evokernel's own, nor Python's or an installed library's."""
    import os

    if filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    return not any(path.startswith(root) for root in _not_users())


@functools.cache
def _not_users() -> tuple[str, ...]:
    """Where evokernel's own modules (its subpackages included, which may live apart), Python's
    and installed libraries' are."""
    import importlib.util
    import os
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    for name in ("evokernel", "evokernel.mutators", "evokernel.evaluators", "evokernel.search_spaces"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            roots.update(spec.submodule_search_locations or ())
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)


def _say(exc: BaseException, line: str, args: argparse.Namespace) -> None:
    """The error's one line on stderr; with --traceback, the user's error's traceback before it,
    without it, a hint that there is one."""
    inner = user_error(exc)
    if getattr(args, "traceback", False):  # the user's error's, else evokernel's own (for a bug report)
        traceback.print_exception(inner or exc, file=sys.stderr)
    elif inner is not None:
        line += " (run with --traceback to see where)"
    print(line, file=sys.stderr)


def _version() -> str:
    """The installed distribution's version (the package's own where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    from evokernel.core.plugins import DISTRIBUTION

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        from evokernel import __version__

        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except EvaluatorError as exc:
        _say(exc, f"evokernel: evaluator failed: {exc} (results so far are stored; re-run to resume)", args)
        return 1
    except EvokernelError as exc:
        _say(exc, f"evokernel: error: {exc}", args)
        return USER_ERROR
    except KeyboardInterrupt:
        print("evokernel: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`): stop writing, quietly
        silence(sys.stdout)
        silence(sys.stderr)
        return 128 + 13  # as a command killed by SIGPIPE, which is what the shell expects


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
