"""`evokernel export FORMAT DB --out DIR`: a database's winners where a serving engine reads them;
`evokernel export triton DB [--run RUN] [--top K] [--out FILE]`: a run's winners as `triton.Config`
entries for `@triton.autotune` (`triton-json`: the same as JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evokernel.cli._common import chosen_run, existing_store, positive_int
from evokernel.core.errors import ConfigError


def add_parser(sub: Any) -> None:
    ex = sub.add_parser(
        "export",
        help="write a database's winners where a serving engine or Triton's autotuner reads them",
        description="Write a database's winners where a serving engine reads them (sglang-moe, sglang-plugin), "
        "or one run's winners as Triton autotuner configs (triton, triton-json). triton writes a Python snippet, "
        "`import triton` and `configs = [triton.Config({...}, num_warps=..., num_stages=...), ...]`: the run's "
        "--top fastest elites, fastest first, each genome's meta-parameters (block sizes, group sizes: the "
        "kernel's tl.constexpr arguments) in the dict and num_warps / num_stages / num_ctas / maxnreg, where the "
        "genome has them, as keyword arguments (Triton's defaults where not), each with a comment giving its "
        "measured latency and the card it was measured on (for a replay, the landscape's); paste it above the "
        "kernel it was tuned for and pass `@triton.autotune(configs=configs, key=[...])`. triton-json writes a "
        'JSON list of {"kwargs", "num_warps", "num_stages" (null: Triton\'s default), "num_ctas" / "maxnreg" '
        '(where set), "latency_ms", "noise", "shape", "device", "run", "genome"}. A genome that cannot be a '
        "triton.Config (one carrying kernel source from an LLM rewrite, a parameter name no kernel argument "
        "can have, a non-integer num_warps) is refused with one line saying why.",
    )
    ex.add_argument(
        "format",
        choices=["sglang-moe", "sglang-plugin", "triton", "triton-json"],
        help="sglang-moe: fused-MoE configs as SGLang's tuned-config files (SGLANG_MOE_CONFIG_DIR); "
        "sglang-plugin: a package for evokernel's SGLang plugin (EVOKERNEL_SGLANG_PACKAGE): those "
        "configs plus evokernel's fused-MoE kernel at its tuned configs and its split-KV decode attention "
        "at the configs of page-1 decode searches; triton: one run's winners as a Python list of "
        "triton.Config for @triton.autotune; triton-json: the same as a JSON list",
    )
    ex.add_argument("db", help="the search database: an SQLite file or a postgresql:// URL")
    ex.add_argument(
        "--out",
        default=None,
        help="sglang formats (required): folder to write (an existing package is merged into, not replaced: "
        "config files, kernel tables and the manifest keep what this export does not overwrite); triton "
        "formats: the file to write (default: stdout)",
    )
    ex.add_argument("--run", default=None, help="triton formats: run id (or prefix); default: the latest run")
    ex.add_argument(
        "--top",
        type=positive_int,
        default=1,
        help="triton formats: how many of the run's fastest elites to export (default 1, the winner: the others "
        "were measured slower at this shape, and each config the autotuner holds is benchmarked at every new "
        "key; pass more when the kernel will run at shapes the search did not measure)",
    )
    ex.add_argument("--device-name", default=None, help="GPU name for the file names (default: what the run recorded)")
    ex.add_argument("--triton-version", default=None, help="Triton version for the folder (default: the run's)")


def run(args: argparse.Namespace) -> int:
    if args.format in ("triton", "triton-json"):
        return run_triton(args)
    from evokernel.integrations.sglang.export import sglang_moe, sglang_plugin_package

    if args.out is None:
        raise ConfigError(f"export {args.format} needs --out DIR")
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


def run_triton(args: argparse.Namespace) -> int:
    """`export triton` / `export triton-json`: one run's top elites as Triton autotuner configs."""
    from evokernel.cli.show import shown_gpu
    from evokernel.integrations.triton_configs import json_entries, python_snippet, run_configs

    store = existing_store(args.db)
    run, _ = chosen_run(store, args.db, args.run)
    configs = run_configs(store, run, top=args.top, device=shown_gpu(run))
    if args.format == "triton":
        text = python_snippet(configs, run)
    else:
        text = json.dumps(json_entries(configs), indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    Path(args.out).write_text(text)
    best = configs[0]
    print(
        f"wrote {args.out}: {len(configs)} config{'s' if len(configs) != 1 else ''} of run {run.id} "
        f"(best {best.latency_ms:.6f} ms)",
        file=sys.stderr,
    )
    return 0
