"""`evokernel profile`: a model's GPU time per kernel, op and module, ranked by roofline headroom."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from evokernel.cli._common import device_arg, positive_int, stdout_console
from evokernel.core.errors import ConfigError, EvokernelError


def add_parser(sub: Any) -> None:
    pr = sub.add_parser(
        "profile",
        help="profile a model: GPU time per kernel, op and module, ranked by roofline "
        "headroom and gaps (evokernel.model.profile)",
    )
    pr.add_argument(
        "target",
        nargs="?",
        default=None,
        help="a .py defining `model` (nn.Module or factory) and `example_inputs` (tuple or factory)",
    )
    pr.add_argument("--trace", default=None, help="read a saved Chrome trace (.json or .json.gz) instead")
    pr.add_argument(
        "--sglang",
        default=None,
        metavar="MODEL",
        help="profile an SGLang engine serving MODEL (a model folder; needs sglang installed): one "
        "one_batch run of --batch-size/--input-len/--output-len under torch.profiler",
    )
    pr.add_argument("--batch-size", type=positive_int, default=1, help="with --sglang (default 1)")
    pr.add_argument("--input-len", type=positive_int, default=512, help="with --sglang (default 512)")
    pr.add_argument("--output-len", type=positive_int, default=8, help="with --sglang (default 8)")
    pr.add_argument(
        "--package", default=None, help="with --sglang: an `evokernel export sglang-plugin` folder to apply"
    )
    pr.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="with --sglang: one more SGLang server argument (repeatable), e.g. "
        "--server-arg=--attention-backend=triton",
    )
    pr.add_argument(
        "--device",
        type=device_arg,
        default=None,
        metavar="{cpu,cuda,cuda:N}",
        help="cpu, cuda (the current GPU) or cuda:N; default: cuda when a GPU is present",
    )
    pr.add_argument("--iters", type=positive_int, default=10, help="profiled calls (default 10)")
    pr.add_argument("--warmup", type=int, default=3, help="calls before profiling (default 3)")
    pr.add_argument("--save-trace", default=None, metavar="PATH", help="keep the Chrome trace here")
    pr.add_argument("--db", default="evokernel.db", help="store the profile here (default: evokernel.db)")
    pr.add_argument("--top", type=positive_int, default=20, help="rows to print (default 20)")
    pr.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    from evokernel.judge.env import toolchain
    from evokernel.model.profile import load_target, parse_trace, profile_module
    from evokernel.store import open_store

    if sum(x is not None for x in (args.target, args.trace, args.sglang)) != 1:
        raise ConfigError("profile takes a target file, --trace TRACE.json or --sglang MODEL (one of them)")
    if args.sglang is not None:
        import importlib.util
        import tempfile

        from evokernel.evaluators.sglang import profile_engine

        if importlib.util.find_spec("sglang") is None:
            raise ConfigError("--sglang needs SGLang installed (pip install 'evokernel-search[sglang]')")
        argv = ["--model-path", args.sglang, *[a for arg in args.server_arg for a in arg.split("=", 1)]]
        trace = args.save_trace or os.path.join(tempfile.mkdtemp(prefix="evokernel-sglang-"), "trace.json")
        prof = profile_engine(
            argv,
            batch_size=args.batch_size,
            input_len=args.input_len,
            output_len=args.output_len,
            package=args.package,
            trace_path=trace,
        )
        name = prof.target
    elif args.trace is not None:
        if not os.path.isfile(args.trace):
            raise ConfigError(f"no such trace: {args.trace}")
        name = Path(args.trace).name.split(".")[0]
        prof = parse_trace(args.trace, target=name)
    else:
        model, inputs, name = load_target(args.target)
        try:
            prof = profile_module(
                model,
                inputs,
                device=args.device,
                warmup=args.warmup,
                iters=args.iters,
                target=name,
                trace_path=args.save_trace,
            )
        except EvokernelError:
            raise
        except Exception as exc:  # the model itself failed
            raise ConfigError(f"{args.target}: running the model failed: {type(exc).__name__}: {exc}") from None
    record = prof.to_dict()
    # a model profiled here: the toolchain names the GPU it ran on (on a host of several)
    where = (args.device or "cuda") if args.target is not None and prof.device == "cuda" else None
    record.update(name=name, toolchain={**toolchain(where), "device_name": prof.device_name})
    store = open_store(args.db)
    try:
        profile_id = store.save_profile(record)
    finally:
        store.close()
    if args.json:
        print(json.dumps({**prof.to_dict(top=args.top), "profile_id": profile_id, "db": args.db}))
        return 0
    console = stdout_console()
    console.print(prof.table(top=args.top))
    for note in prof.notes:
        console.print(f"note: {note}", highlight=False)
    console.print(f"saved as profile {profile_id} in {args.db}", highlight=False)
    return 0
