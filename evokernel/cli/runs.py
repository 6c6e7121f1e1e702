"""`evokernel runs delete RUN` and `evokernel runs rename RUN NEW`: tidy the runs of a database.

RUN is a run's id, a prefix of one (as `evokernel show --run` takes), or a run's name when
one run has it. Both refuse, in one line, a run that another process is running (the run
lock its search holds says so); a run marked running that no process holds was killed and
may be deleted or renamed.
"""

from __future__ import annotations

import argparse
from typing import Any

from evokernel.cli._common import existing_store, plural
from evokernel.core.errors import ConfigError, StoreError

DESCRIPTION = """\
delete: remove a run and everything of it, in one transaction: its evaluations, the results
it measured, its elites, events, claims, lessons and kernel records, and the genomes nothing
else refers to then. Results that another run reused are kept (they are that run's history
too). A later search reuses nothing of a deleted run; a run that started from its elites
keeps its history, but re-running that run's command may no longer retrace it (it started
from what is gone): give it another --seed or --name then.

rename: give a run another name (what `evokernel show` lists). Its id stays, so the command
that started it still resumes it (under the new name). A name another run has is refused.

RUN is a run id, an id prefix, or the name of one run. A run still running in another
process is refused; stop it (or let it finish) first.
"""


def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "runs",
        help="delete or rename a run of a database",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = r.add_subparsers(dest="action", required=True, metavar="{delete,rename}", help="what to do")
    d = what.add_parser("delete", help="delete a run and everything of it, in one transaction")
    d.add_argument("run", help="run id, id prefix, or the name of one run")
    _db(d)
    n = what.add_parser("rename", help="give a run another name (its id stays)")
    n.add_argument("run", help="run id, id prefix, or the name of one run")
    n.add_argument("new_name", metavar="NEW", help="the new name (one no other run has)")
    _db(n)


def _db(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db", default="evokernel.db", help="the store: an SQLite file or a postgresql:// URL (default: evokernel.db)"
    )


def run(args: argparse.Namespace) -> int:
    store = existing_store(args.db)
    try:
        target = find_run(store, args.run)
        if args.action == "delete":
            gone = store.delete_run(target.id)
            parts = [plural(gone.get(t, 0), t[:-1]) for t in ("evaluations", "results", "elites", "events", "genomes")]
            print(f"deleted run {target.id} ({target.name}): {', '.join(parts)}")
        else:
            store.rename_run(target.id, args.new_name)
            print(f"renamed run {target.id}: {target.name} -> {args.new_name}")
    finally:
        store.close()
    return 0


def find_run(store: Any, text: str) -> Any:
    """The run `text` names: an id or unique id prefix, else the name of exactly one run."""
    try:
        return store.run(text)
    except StoreError as exc:
        named = [r for r in store.runs() if r.name == text]
        if len(named) == 1:
            return named[0]
        if named:
            ids = ", ".join(r.id for r in named)
            raise ConfigError(f"{len(named)} runs are named {text!r} ({ids}): give the id of one") from None
        raise ConfigError(f"{exc}, nor is any named so (evokernel show {store.path} lists them)") from None
