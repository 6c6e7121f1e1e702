"""`evokernel lessons DB`: the knowledge base's lessons (patterns, caveats, summaries)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from evokernel.cli._common import existing_store
from evokernel.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    ls = sub.add_parser(
        "lessons", help="print the knowledge base: lessons of earlier runs (patterns, caveats, summaries)"
    )
    ls.add_argument("db", help="the search database: an SQLite file or a postgresql:// URL")
    ls.add_argument("--op", default=None, help="the problem's family (FAMILY) or name")
    ls.add_argument("--gpu", default=None, help="GPU name as recorded")
    ls.add_argument(
        "--summarize",
        nargs="?",
        const="claude-sonnet-5",
        default=None,
        metavar="MODEL",
        help="ask an LLM (Anthropic API, ANTHROPIC_API_KEY) for a prose summary of the lessons of "
        "--op on --gpu, and store it",
    )
    ls.add_argument("--json", action="store_true", help="print JSON on stdout")


def run(args: argparse.Namespace) -> int:
    store = existing_store(args.db)
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
