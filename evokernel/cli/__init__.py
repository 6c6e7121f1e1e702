"""The `evokernel` command: search, replay, show, runs, report, check, sweep, fan-out, kernels, profile,
lessons, export, promote, plugins, landscapes; one small module per subcommand (`evokernel.cli.search`, ...),
each with `add_parser(sub)` and `run(args)`. A search is built by `evokernel.engine.assemble`,
as the Python API builds it.

User errors (a missing or malformed file, an unknown strategy, a zero budget) print one
line on stderr and exit 2; an evaluator that breaks exits 1; nothing prints a traceback.
Output into a pipe whose reader went away (`| head`) stops quietly with exit 141, as a
command killed by SIGPIPE; a search under way finishes and is stored as if nothing happened.
"""

from __future__ import annotations

import argparse
import sys
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


def _build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="evokernel", description="Evolutionary search for faster GPU kernels.")
    p.add_argument("--version", action="version", version=f"evokernel {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return p


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
        print(f"evokernel: evaluator failed: {exc} (results so far are stored; re-run to resume)", file=sys.stderr)
        return 1
    except EvokernelError as exc:
        print(f"evokernel: error: {exc}", file=sys.stderr)
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
