"""`evokernel export FORMAT DB --out DIR`: a database's winners where a serving engine reads them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evokernel.cli._common import existing_store
from evokernel.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    ex = sub.add_parser("export", help="write a database's winners where a serving engine reads them")
    ex.add_argument(
        "format",
        choices=["sglang-moe", "sglang-plugin"],
        help="sglang-moe: fused-MoE configs as SGLang's tuned-config files (SGLANG_MOE_CONFIG_DIR); "
        "sglang-plugin: a package for evokernel's SGLang plugin (EVOKERNEL_SGLANG_PACKAGE): those "
        "configs plus evokernel's fused-MoE kernel at its tuned configs and its split-KV decode attention "
        "at the configs of page-1 decode searches",
    )
    ex.add_argument("db", help="the search database: an SQLite file or a postgresql:// URL")
    ex.add_argument(
        "--out",
        required=True,
        help="folder to write (an existing package is merged into, not replaced: config files, kernel "
        "tables and the manifest keep what this export does not overwrite)",
    )
    ex.add_argument("--device-name", default=None, help="GPU name for the file names (default: what the run recorded)")
    ex.add_argument("--triton-version", default=None, help="Triton version for the folder (default: the run's)")


def run(args: argparse.Namespace) -> int:
    from evokernel.integrations.sglang.export import sglang_moe, sglang_plugin_package

    store = existing_store(args.db)
    write = sglang_plugin_package if args.format == "sglang-plugin" else sglang_moe
    report = write(store, args.out, device_name=args.device_name, triton_version=args.triton_version)
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
        print(
            f"serve with: EVOKERNEL_SGLANG_PACKAGE={Path(args.out).resolve()} (evokernel installed where SGLang "
            "runs; its plugin applies the package in every SGLang process)"
        )
    return 0
