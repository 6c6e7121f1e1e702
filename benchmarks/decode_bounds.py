"""Decode steps against the weight-bandwidth bound (issue 29), from a recorded A/B.

For each decode point of an SGLang A/B report (`sglang_e2e.json` or the `ab` of
`sglang_long.json`) and each engine: the median decode step (wall clock), the bytes that
step must read (`decode_roofline.decode_bytes`, beside this script: weights touched,
experts expected under uniform routing, KV cache) and the time the H200's copy bandwidth needs for them,
and the fraction of that bound the engine reached. Nothing is measured here: it reads what
a device call recorded.

    python benchmarks/decode_bounds.py benchmarks/results/sglang_e2e.json \\
        --config benchmarks/results/sglang_model_config.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:  # its sibling decode_roofline, imported from a test
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_roofline import bound_ms, decode_bytes  # noqa: E402


def rows(ab: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for variant, points in ab.get("samples", {}).items():
        for point in ab["plan"]["decode_points"]:
            runs = [r["median_decode_latency"] for r in points.get(point, []) if "median_decode_latency" in r]
            if not runs:
                continue
            b, i, o = (int(x[1:]) for x in point.split("_"))
            need = decode_bytes(config, batch=b, context=i + o // 2)  # the cache midway through the timed steps
            step = 1e3 * statistics.median(runs)
            bound = bound_ms(need["total"])
            out.append(
                {"variant": variant, "point": point, "step_ms": step, "bytes": need, "bound_ms": bound,
                 "fraction": bound / step}
            )  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", help="sglang_e2e.json, or sglang_long.json (its 'ab')")
    ap.add_argument("--config", required=True, help="the model's config.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    doc = json.loads(Path(args.report).read_text())
    ab = doc.get("ab", doc)
    got = rows(ab, json.loads(Path(args.config).read_text()))
    if args.json:
        json.dump(got, sys.stdout, indent=1)
        return
    print("| engine | point | decode step ms (median) | bytes read per step (MB) | bound ms at 4.3 TB/s | fraction |")
    print("|---|---|---|---|---|---|")
    for r in got:
        print(
            f"| {r['variant']} | {r['point']} | {r['step_ms']:.3f} | {r['bytes']['total'] / 1e6:.0f} | "
            f"{r['bound_ms']:.3f} | {r['fraction']:.2f} |"
        )


if __name__ == "__main__":
    main()
