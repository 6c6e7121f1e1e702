"""`evokernel promote PACKAGE --model-path MODEL --out DIR`: the end-to-end stage of the
promotion cascade for an SGLang package (`evokernel.integrations.sglang.promote`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evokernel.cli._common import positive_int
from evokernel.core.errors import ConfigError


def _point(text: str) -> tuple[int, int]:
    try:
        b, c = text.split(":")
        got = (int(b), int(c))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected BATCH:CONTEXT (e.g. 1:32768), got {text!r}") from None
    if min(got) < 1:
        raise argparse.ArgumentTypeError(f"batch and context must be positive, got {text!r}")
    return got


def _ints(n: int, what: str) -> Any:
    """An argparse type: n positive integers separated by commas (`what` names them)."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            got = tuple(int(x) for x in text.split(","))
        except ValueError:
            got = ()
        if len(got) != n or min(got) < 1:
            raise argparse.ArgumentTypeError(f"expected {what}, {n} positive integers, got {text!r}")
        return got

    return parse


def add_parser(sub: Any) -> None:
    pr = sub.add_parser(
        "promote",
        help="A/B each change of an SGLang package inside SGLang (A/A control beside it) and write the "
        "package of the changes that are faster end to end; slower ones become dead ends in the store",
    )
    pr.add_argument("package", help="a folder written by `evokernel export sglang-plugin`")
    pr.add_argument("--model-path", required=True, help="the model SGLang serves")
    pr.add_argument("--out", required=True, help="folder for the promoted package (replaced)")
    pr.add_argument(
        "--point",
        type=_point,
        action="append",
        default=[],
        metavar="BATCH:CONTEXT",
        help="a decode point (repeatable; default 1:512 16:512 64:512 256:512)",
    )
    pr.add_argument("--output-len", type=positive_int, default=32, help="decode steps a run times (default 32)")
    pr.add_argument(
        "--heads",
        type=_ints(3, "HQ,HKV,D"),
        help="the served model's attention heads (query, KV, head dim): attention entries for other heads are kept "
        "as they are, not A/B'd on this model",
    )
    pr.add_argument(
        "--experts",
        type=_ints(2, "E,N"),
        help="the served model's experts and MoE intermediate size: MoE entries for another (E, N) are kept, not A/B'd",
    )
    pr.add_argument("--repeats", type=positive_int, default=5, help="interleaved rounds (default 5)")
    pr.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more SGLang server argument (repeatable), e.g. --server-arg=--attention-backend=triton",
    )
    pr.add_argument("--db", default="evokernel.db", help="the store whose knowledge base records dead ends")
    pr.add_argument("--work", default="evokernel-promote", help="folder for the variants' packages and engine logs")
    pr.add_argument("--json", action="store_true", help="print the decisions as one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from evokernel.evaluators.sglang import BASELINE, SGLangEvaluator
    from evokernel.integrations.sglang.plugin import PackageError
    from evokernel.integrations.sglang.promote import changes, overlapping, promote
    from evokernel.judge.env import toolchain
    from evokernel.store import open_store

    try:
        found = changes(args.package)
    except PackageError as exc:
        raise ConfigError(str(exc)) from None
    if clash := overlapping(args.package, args.out):  # before the A/B, not after it
        raise ConfigError(f"{clash}: name another --out")
    if not found:
        raise ConfigError(f"{args.package} makes no change to what SGLang runs: nothing to promote")
    if importlib.util.find_spec("sglang") is None:
        raise ConfigError(
            "promote runs SGLang engines: it needs SGLang installed (pip install 'evokernel-search[sglang]')"
        )
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("promote runs SGLang engines: it needs a CUDA GPU")
    work = Path(args.work)
    argv = ["--model-path", args.model_path, *[a for arg in args.server_arg for a in arg.split("=", 1)]]
    points = args.point or [(b, 512) for b in (1, 16, 64, 256)]
    ev = SGLangEvaluator(
        argv,
        decode_points=points,
        output_len=args.output_len,
        prefill_lens=(),
        repeats=args.repeats,
        log_dir=work / "logs",
    )
    store = open_store(args.db)
    result = promote(
        ev,
        args.package,
        args.out,
        work=work / "variants",
        store=store,
        gpu=torch.cuda.get_device_name(),
        toolchain=toolchain(),
        heads=args.heads,
        experts=args.experts,
    )
    if BASELINE in result.ab.get("errors", {}):
        raise ConfigError(
            f"SGLang did not start: {result.ab['errors'][BASELINE][:300]} (its log: {work / 'logs' / BASELINE}.log)"
        )
    doc = result.to_json()
    (work / "promotion.json").parent.mkdir(parents=True, exist_ok=True)
    (work / "promotion.json").write_text(json.dumps({**doc, "ab": result.ab}, indent=1))
    if args.json:
        print(json.dumps(doc))
        return 0
    for d in result.decisions:
        where = ", ".join(f"{p} {v['median']:.3f} {v['verdict']}" for p, v in d.points.items()) or "-"
        print(f"{d.verdict:10s} {d.change.op} {d.change.key} b{d.change.batch or 'all'}: {where}")
    print(
        f"wrote {result.package} (serve with EVOKERNEL_SGLANG_PACKAGE={Path(result.package).resolve()})"
        if result.package
        else "nothing promoted: serve SGLang as shipped",
        file=sys.stderr,
    )
    return 0
