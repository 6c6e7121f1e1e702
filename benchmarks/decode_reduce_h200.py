"""The split-KV decode's two ways of combining its splits, side by side on the engine's footing.

    python benchmarks/decode_reduce_h200.py --out OUT [--package PACKAGE] [--points 1:32768 ...]

For each (batch, context) point of the long-context issue (qwen3-30b-a3b heads, page size 1 as
SGLang keeps its cache), the package's decode entry for that batch is replayed from CUDA graphs
(`evokernel.judge.footing.side_by_side(mode="graph")`, input sets rotated so that together they
are at least twice the L2, as an engine's layers each read their own cache) with its splits
combined

- by the separate reduce kernel (REDUCE=0, a second launch), and
- by the last program of each (sequence, KV head) group (REDUCE=1, one launch; since session 24
  it combines the group's query heads several a load where a [heads, splits, D] tile fits),

both beside SGLang's default split-KV parameters, interleaved, with per-round paired ratios.
Each variant's output is checked against the problem's fp32 reference first (a variant that
fails is reported, not timed). Writes decode_reduce.json and decode_reduce.md under --out,
row by row (a deadline keeps the script inside a device call).

With --refine DEST, a copy of the package goes to DEST with each entry that a variant beat at
the entry's own context replaced by that variant (`refine`): the micro stage of the promotion
cascade on the engine's footing, whose package the engine A/B then judges.

    python benchmarks/decode_reduce_h200.py --profile 1:32768 [--package PACKAGE]

under `ncu --profile-from-start off` (`device.sh decode-reduce` with NCU="1:32768 ..."): the
point's entry with the separate reduce kernel, plainly and with PDL, each warmed up and then
called once between cudaProfilerStart and cudaProfilerStop (what the split kernel waits on at
batch 1, where it reads 0.72 of the copy bandwidth).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

DECODE = ROOT / "examples" / "problems" / "attention_decode_bf16.py"
PACKAGE = ROOT / "benchmarks" / "results" / "sglang_long_s24" / "package"
POINTS = ["1:32768", "4:16384", "8:8192", "16:8192", "32:4096"]
L2_BYTES = 60 * 2**20
COPY_BW = 4.3e12  # the H200's measured device copy, bytes/s
HEADS = "Hq=32,Hkv=4,D=128"  # the model's decode table key


def variants(entry: dict[str, int], splits: int) -> dict[str, dict[str, int]]:
    """The entry as shipped and with the other reduction; where the entry's own tile cannot take
    the grouped combine (one warp: 128 keys and 4 warps; `splits` too many for its warps: 8
    warps), the same two there as well."""
    from evokernel.search_spaces.attention import template_decode as t

    base = {k: int(entry[k]) for k in (*t.PARAMS, *t.OPTIONAL) if k in entry}
    out = {
        "separate": dict(base, REDUCE=0, PDL=0),
        "separate_pdl": dict(base, REDUCE=0, PDL=1),
        # (PDL bit 2: the split kernel itself a dependent of the kernel before it, here the last call's)
        "separate_pdl3": dict(base, REDUCE=0, PDL=3),
        # (and bit 4: its lengths, indices and first tile's L2 prefetch before its wait)
        "separate_pdl7": dict(base, REDUCE=0, PDL=7),
        # (PREFETCH=2: each step asks L2 for the tile after next; at 2 stages one K/V buffer as the
        # winners hold without it (a third stage would add a second: 139 KB at BLOCK_N 128, one program an SM)
        "separate_l2": dict(base, REDUCE=0, PDL=0, PREFETCH=2, num_stages=min(2, base["num_stages"])),
        "separate_l2_pdl7": dict(base, REDUCE=0, PDL=7, PREFETCH=2, num_stages=min(2, base["num_stages"])),
        # (and where the entry runs more stages, the same at 2 without the hints: what the stages alone change)
        **({"separate_s2": dict(base, REDUCE=0, PDL=0, num_stages=2)} if base["num_stages"] > 2 else {}),
        "fused": dict(base, REDUCE=1, PDL=0),
        "fused_wait": dict(base, REDUCE=1, PDL=2),
        "fused_early": dict(base, REDUCE=1, PDL=6),
    }
    # (the number of splits halved and doubled: at b1-b8 the winners' 256 programs are two
    # programs on most SMs, one on a few; 128 are one wave of one an SM, 512 three or four an SM)
    for name, factor in (("separate_splits_half", 0.5), ("separate_splits_x2", 2)):
        if 1 < splits * factor <= 128:
            out[name] = dict(base, NUM_SPLITS=int(splits * factor), REDUCE=0, PDL=0)
    if base["num_warps"] < 4 or base["BLOCK_N"] < 64:
        wide = dict(base, BLOCK_N=128, num_warps=4, num_stages=2)
        out["separate_n128w4"] = dict(wide, REDUCE=0)
        out["fused_n128w4"] = dict(wide, REDUCE=1)
    elif not t.group_heads(splits, 8, base["num_warps"]) and t.group_heads(splits, 8, 8):
        out["separate_w8"] = dict(base, num_warps=8, REDUCE=0)
        out["fused_w8"] = dict(base, num_warps=8, REDUCE=1)
    return out


def refine(
    doc: dict[str, Any], entries: dict[str, dict[str, int]], min_gain: float = 0.01
) -> tuple[dict[str, dict[str, int]], list[dict[str, Any]]]:
    """The package's decode entries with each one replaced by the variant that beat it on this
    footing (graph replay, back to back: the engine's), and what changed. Only a point at the
    entry's own tuned context counts; a variant replaces the entry where its paired interval
    (both against the separate reduction) lies above the entry's and its median is at least
    `min_gain` faster. The A/B in the engine still decides whether the change ships."""
    from evokernel.search_spaces.attention import template_decode as t

    new = {k: dict(v) for k, v in entries.items()}
    changes: list[dict[str, Any]] = []
    for row in doc["rows"]:
        ratios = row.get("vs_separate") or {}
        batch, context = row["point"].split(":")
        entry = entries.get(batch)
        if not ratios or not entry or int(entry.get("context", 0)) != int(context):
            continue
        ways = variants(entry, int(row["splits"]))
        base = {k: int(entry.get(k, 0)) for k in (*t.PARAMS, *t.OPTIONAL)}
        current = next((k for k, v in ways.items() if v == base), None)
        if current not in ratios:
            continue
        sweep = row.get("attn_sweep") or {}
        if current == "separate" and sweep.get("params"):  # (its leaders were timed against the same entry)
            ratios = {
                **ratios,
                **{k: sweep["vs_separate"][k] for k in sweep["params"] if k in sweep.get("vs_separate", {})},
            }
            ways = {**ways, **sweep["params"]}
        ref = ratios[current]
        better = [
            k
            for k, r in ratios.items()
            if k in ways and k != current and k not in row.get("errors", {})
            and r["lo"] > ref["hi"] and r["median"] >= ref["median"] * (1 + min_gain)
        ]  # fmt: skip
        if better:
            best = max(better, key=lambda k: ratios[k]["median"])
            new[batch] = {**entry, **ways[best]}
            changes.append(
                {
                    "batch": int(batch),
                    "context": int(context),
                    "from": current,
                    "to": best,
                    "speedup": ratios[best]["median"] / ref["median"],
                    "params": ways[best],
                }  # fmt: skip
            )
    return new, changes


def write_refined(package: str, dest: Path, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A copy of `package` at `dest` with its decode entries refined (`refine`) from this run's
    rows; its manifest's provenance says which entries changed and by how much."""
    import shutil

    shutil.copytree(package, dest, dirs_exist_ok=True)
    table_path = dest / "kernels" / "decode_attention.json"
    table = json.loads(table_path.read_text())
    table[HEADS], changes = refine(doc, table[HEADS])
    table_path.write_text(json.dumps(table, indent=1))
    manifest_path = dest / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest.setdefault("provenance", {})["refined_on_graph_footing"] = {
        "from": str(package),
        "command": doc.get("command"),
        "changes": changes,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return changes


def fixed_cost(doc: dict[str, Any], variant: str = "separate", skip: tuple[str, ...] = ()) -> tuple[float, float]:
    """Least squares of the variant's graph-replayed time per call against the KV bytes it reads,
    over the rows (points in `skip` left out): (fixed us a call, streaming bytes/s). The split
    kernel's time is bytes / bandwidth plus what does not shrink with the context (the first
    dependent loads, launches, ramp and tail, the reduction)."""
    import numpy as np

    rows = [r for r in doc["rows"] if variant in r.get("ms", {}) and r["point"] not in skip]
    if len(rows) < 2:
        raise ValueError(f"need two points timed with {variant!r}, got {len(rows)}")
    x = np.array([r["bytes"] for r in rows])
    y = np.array([r["ms"][variant] * 1e-3 for r in rows])
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept * 1e6), float(1.0 / slope)


def fits(doc: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """`fixed_cost` per variant over the batch-1 rows and over the others (b4 ... b32), where
    two or more of a group's rows timed it: variant -> "b1" / "b4+" -> {"fixed_us", "stream_bw_fraction"}
    (bytes/s as a fraction of the copy bandwidth). What a variant (PDL, the reduction) changes
    is the fixed cost a call; these say by how much, per group."""
    groups = {"b1": lambda b: b == 1, "b4+": lambda b: b >= 4}
    out: dict[str, dict[str, dict[str, float]]] = {}
    names = sorted({k for r in doc["rows"] for k in r.get("ms", {})})
    for name in names:
        for group, takes in groups.items():
            skip = tuple(r["point"] for r in doc["rows"] if not takes(int(r["point"].split(":")[0])))
            rows = [r for r in doc["rows"] if name in r.get("ms", {}) and r["point"] not in skip]
            if len({r["bytes"] for r in rows}) < 2:
                continue
            fixed, bw = fixed_cost(doc, name, skip)
            out.setdefault(name, {})[group] = {
                "fixed_us": round(fixed, 2),
                "stream_bw_fraction": round(bw / doc.get("copy_bw_used", COPY_BW), 3),
            }
    return out


def _entries(package: str) -> dict[str, dict[str, int]]:
    """The package's decode entries for the model's heads, by batch size."""
    return json.loads((Path(package) / "kernels" / "decode_attention.json").read_text())[HEADS]


def _splits(entry: dict[str, int], batch: int, context: int) -> int:
    """The splits the entry runs at (NUM_SPLITS, or what "auto" resolves to on this GPU)."""
    import torch

    from evokernel.search_spaces.attention import template_decode as t

    return int(entry["NUM_SPLITS"]) or t.auto_splits(batch, 4, context, t.num_sms(torch.device("cuda")))


def _problem(spec: str) -> tuple[Any, dict[str, Any], int, int]:
    from evokernel.judge.problem import Problem

    batch, context = (int(x) for x in spec.split(":"))
    problem = Problem.load(DECODE, params={"model": "qwen3-30b-a3b", "batch": batch, "context": [context], "page": 1})
    return problem.module, problem.shapes[0], batch, context


def profile_once(spec: str, package: str) -> None:
    """The point's entry (separate reduce kernel, without and with PDL), warmed up, then each
    called once inside cudaProfilerStart / cudaProfilerStop."""
    import torch

    from evokernel.search_spaces.attention import template_decode as t

    mod, shape, batch, context = _problem(spec)
    entry = _entries(package)[str(batch)]
    ways = variants(entry, _splits(entry, batch, context))
    calls = {name: ways[name] for name in ("separate", "separate_pdl")}
    inputs = mod.make_inputs(shape, seed=1, device="cuda")
    for params in calls.values():
        for _ in range(3):
            t.decode(*inputs, **params)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for params in calls.values():
        t.decode(*inputs, **params)
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"profiled {spec}: {calls}", flush=True)


def timeline(params: dict[str, int], sets: list[tuple[Any, ...]], work: float, copy_bw: float) -> dict[str, float]:
    """Where a call's time goes, from the kernels' own per-program stamps (`decode(timeline=)`):
    the sets' calls captured back to back in one graph and replayed (the engine's footing), the
    last call's stamps read. In us: `call` (events over the replays, a call), `span` (first
    program's start to the last one's end, both kernels), `outside` (call - span: launch and
    the gap between calls), stage 1's `s1_span`, `start_spread` (its last program's start after
    its first's) and start quantiles, per-program `prog_med`/`prog_max` and its loop's
    `loop_med`, `per_sm_max` (stage-1 programs an SM ran), the reduce kernel's `gap` (its first
    start after stage 1's last end; negative with PDL) and `s2_span`, and `s1_bw` (KV bytes /
    stage 1's span, a fraction of the copy bandwidth)."""
    import torch

    from evokernel.search_spaces.attention import template_decode as t

    q, k = sets[0][0], sets[0][1]
    batch, heads, dim = q.shape
    splits = _splits(params, batch, sets[0][3].shape[1] * k.shape[1])  # (what "auto" reads: pages x the page)
    n1, n2 = t.timeline_rows(batch, heads, k.shape[2], dim, splits, int(params["REDUCE"]), t.num_sms(q.device))
    stamps = torch.zeros(n1 + n2, 4, dtype=torch.int64, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for x in sets:
            t.decode(*x, **params, timeline=stamps)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x in sets:
            t.decode(*x, **params, timeline=stamps)
    for _ in range(5):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    replays = 20
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    call = start.elapsed_time(end) * 1e3 / (replays * len(sets))
    rows = stamps.cpu().double()
    s1, s2 = rows[:n1], rows[n1:]
    t0 = float(rows[:, 0].min())
    starts = (s1[:, 0] - t0) * 1e-3
    per_sm = torch.bincount(s1[:, 3].long())
    out = {
        "call": call,
        "span": float(rows[:, 2].max() - t0) * 1e-3,
        "s1_span": float(s1[:, 2].max() - s1[:, 0].min()) * 1e-3,
        "start_spread": float(starts.max()),
        "start_p50": float(starts.median()),
        "start_p90": float(starts.quantile(0.9)),
        "prog_med": float((s1[:, 2] - s1[:, 0]).median()) * 1e-3,
        "prog_max": float((s1[:, 2] - s1[:, 0]).max()) * 1e-3,
        "loop_med": float((s1[:, 1] - s1[:, 0]).median()) * 1e-3,
        "per_sm_max": int(per_sm.max()),
        "sms_used": int((per_sm > 0).sum()),
        "programs": n1,
        "splits": splits,
    }
    out["outside"] = out["call"] - out["span"]
    out["s1_bw"] = work / (out["s1_span"] * 1e-6) / copy_bw
    if n2:
        out["gap"] = float(s2[:, 0].min() - s1[:, 2].max()) * 1e-3
        out["s2_span"] = float(s2[:, 2].max() - s2[:, 0].min()) * 1e-3
        out["s2_wait_end"] = float(s2[:, 1].min() - s1[:, 2].max()) * 1e-3
    del graph
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


@functools.cache
def _floor_kernel() -> Any:
    """A kernel that reads what the split kernel reads and nothing else (built on first use)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _read_floor(
        k_ptr, v_ptr, bt_ptr, lens_ptr, out_ptr, stride_kp, stride_kh, stride_bt, H_kv, SPLITS,
        BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, GATHER: tl.constexpr, PIPE: tl.constexpr = 0,
    ):  # fmt: skip
        # (SPLITS an argument, not a constant: a sweep over splits reuses each tile's compile.
        # PIPE: the rows in flight by hand, since Triton pipelines only loads that feed a dot:
        # 1 = the next tile's indices and rows loaded before this tile is summed; 2 = and the
        # indices a tile further ahead, so no row load waits on its index load in the loop)
        split = tl.program_id(0)
        kv_head = tl.program_id(1)
        b = tl.program_id(2)
        length = tl.load(lens_ptr + b)
        per_split = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
        lo = split * per_split
        hi = tl.minimum(length, lo + per_split)
        offs_d = tl.arange(0, HEAD_DIM)
        acc = tl.zeros([HEAD_DIM], tl.float32)  # (a [BLOCK_N, D] fp32 sum would spill at 128 x 128)
        if PIPE == 0:
            for n0 in tl.range(lo, hi, BLOCK_N):
                offs_n = n0 + tl.arange(0, BLOCK_N)
                nmask = offs_n < hi
                if GATHER:  # the sequence's slots through its indices, as the split kernel reads them
                    row = tl.load(bt_ptr + b * stride_bt + offs_n, mask=nmask, other=0).to(tl.int64)
                else:  # as many rows in slot order: the same bytes without the index loads
                    row = (b * stride_bt + offs_n).to(tl.int64)
                base = (row * stride_kp + kv_head * stride_kh)[:, None] + offs_d[None, :]
                k = tl.load(k_ptr + base, mask=nmask[:, None], other=0.0)
                v = tl.load(v_ptr + base, mask=nmask[:, None], other=0.0)
                acc += tl.sum(k.to(tl.float32) + v.to(tl.float32), 0)
        else:
            offs_n = lo + tl.arange(0, BLOCK_N)
            nmask = offs_n < hi
            row = tl.load(bt_ptr + b * stride_bt + offs_n, mask=nmask, other=0).to(tl.int64)
            if PIPE == 2:
                offs_a = offs_n + BLOCK_N
                row_a = tl.load(bt_ptr + b * stride_bt + offs_a, mask=offs_a < hi, other=0).to(tl.int64)
            base = (row * stride_kp + kv_head * stride_kh)[:, None] + offs_d[None, :]
            k_n = tl.load(k_ptr + base, mask=nmask[:, None], other=0.0)
            v_n = tl.load(v_ptr + base, mask=nmask[:, None], other=0.0)
            for n0 in tl.range(lo, hi, BLOCK_N):
                k = k_n
                v = v_n
                offs_f = n0 + BLOCK_N + tl.arange(0, BLOCK_N)
                fmask = offs_f < hi
                if PIPE == 2:
                    row = row_a
                    offs_a = offs_f + BLOCK_N
                    row_a = tl.load(bt_ptr + b * stride_bt + offs_a, mask=offs_a < hi, other=0).to(tl.int64)
                else:
                    row = tl.load(bt_ptr + b * stride_bt + offs_f, mask=fmask, other=0).to(tl.int64)
                base = (row * stride_kp + kv_head * stride_kh)[:, None] + offs_d[None, :]
                k_n = tl.load(k_ptr + base, mask=fmask[:, None], other=0.0)
                v_n = tl.load(v_ptr + base, mask=fmask[:, None], other=0.0)
                acc += tl.sum(k.to(tl.float32) + v.to(tl.float32), 0)
        tl.store(out_ptr + (b * H_kv + kv_head) * SPLITS + split, tl.sum(acc, 0))

    return _read_floor


def read_floor(inputs: tuple[Any, ...], entry: dict[str, int], splits: int, gather: bool, out: Any = None) -> Any:
    """The entry's grid, tile, warps and stages reading the point's K and V (each K/V row once,
    `gather`: through the block table's indices as the split kernel does; else the same number
    of rows in slot order) and summing them, one launch, no scores, no softmax, no reduction:
    what a kernel of this shape pays just to read the bytes on this footing. Returns the
    per-program sums ([B, H_kv, splits] fp32; page size 1 caches)."""
    import torch

    _, k, v, table, lens = inputs
    batch, kv_heads, dim = table.shape[0], k.shape[2], k.shape[3]
    assert k.shape[1] == 1, "the floor reads page-size-1 caches (the engine's)"
    if entry.get("PIPE", 0) and not gather:
        raise ValueError("PIPE reads through the indices: the slot-order floor is tile by tile")
    out = out if out is not None else torch.empty(batch, kv_heads, splits, device=k.device, dtype=torch.float32)
    _floor_kernel()[(splits, kv_heads, batch)](
        k, v, table, lens, out, k.stride(0), k.stride(2), table.stride(0), kv_heads, splits,
        BLOCK_N=int(entry["BLOCK_N"]), HEAD_DIM=dim, GATHER=int(gather), PIPE=int(entry.get("PIPE", 0)),
        num_warps=int(entry["num_warps"]), num_stages=int(entry["num_stages"]),
    )  # fmt: skip
    return out


def sweep_shapes(splits: int, head_dim: int = 128) -> list[dict[str, int]]:
    """The shapes a floor sweep reads in: splits halved, as the entry, doubled and quadrupled
    (at most 128, the split kernel's limit here), BLOCK_N 32/64/128 and 1-8 warps, each read
    tile by tile (PIPE 0: Triton pipelines no load that feeds no dot, so stages change nothing)
    and with one or two tiles' loads in flight by hand (PIPE 1, 2); leaving out tiles whose K
    and V buffers would hold more than 256 values a thread each (1 warp at 128 keys; with PIPE,
    two buffers: spills, not a shape a search keeps)."""
    out = []
    for s in sorted({max(1, splits // 2), splits, 2 * splits, 4 * splits}):
        if s > 128:
            continue
        for n in (32, 64, 128):
            for w in (1, 2, 4, 8):
                for pipe in (0, 1, 2):
                    if n * head_dim * (2 if pipe else 1) > 256 * 32 * w:
                        continue
                    out.append({"NUM_SPLITS": s, "BLOCK_N": n, "num_warps": w, "num_stages": 2, "PIPE": pipe})
    return out


def _shape_name(shape: dict[str, int]) -> str:
    return f"s{shape['NUM_SPLITS']} n{shape['BLOCK_N']} w{shape['num_warps']} p{shape.get('PIPE', 0)}"


def screen(
    sets: list[tuple[Any, ...]],
    shapes: list[dict[str, int]],
    call: Any,
    deadline: float,
    name: Any = None,
    check: Any = None,
    replays: int = 10,
) -> list[dict[str, Any]]:
    """Each of `shapes` run by `call(inputs, shape)` over the input sets, captured in one graph
    and replayed back to back (the engine's footing), ms a call by events; `check(shape)`
    first, where given (an error string rejects the shape: e.g. its output against the
    reference); a shape that fails to compile, run or check is listed with its error. Stops at
    `deadline` (time.monotonic()). Sorted fastest first. A screen, one shape after another:
    the leaders are then timed interleaved (`side_by_side`)."""
    import torch

    out: list[dict[str, Any]] = []
    for shape in shapes:
        if time.monotonic() > deadline:
            break
        rec: dict[str, Any] = {"shape": shape, "name": (name or _shape_name)(shape)}
        try:
            why = check(shape) if check else None
            if why:
                rec["error"] = why
                out.append(rec)
                continue
            for x in sets:  # compile and warm outside the capture
                call(x, shape)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for x in sets:
                    call(x, shape)
            graph.replay()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            rec["ms"] = start.elapsed_time(end) / (replays * len(sets))
            del graph
        except Exception as exc:  # a shape that does not build or run is a result of the sweep
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        out.append(rec)
    return sorted(out, key=lambda r: r.get("ms", math.inf))


def floor_sweep(sets: list[tuple[Any, ...]], shapes: list[dict[str, int]], deadline: float) -> list[dict[str, Any]]:
    """`screen` of the gather floor (`read_floor`, through the indices) over `shapes`."""
    return screen(sets, shapes, lambda x, sh: read_floor(x, sh, sh["NUM_SPLITS"], True), deadline)


def attn_shapes(splits: int) -> list[dict[str, int]]:
    """The attention's grids an attention sweep screens, after the floor sweep found the
    family's fastest reads in many light programs (H100, session 29: 1-2 warps at 32-64 keys,
    two to four times the entry's splits): splits as the entry, doubled and quadrupled (at most
    128), (BLOCK_N, warps) from (32, 1) to (128, 4), and three pipelines: 2 stages with the
    indices loaded in their step (the gather then gets one shared-memory buffer), and with the
    indices a step ahead (PREFETCH=1: num_stages - 1 buffers) at 2 and 3 stages. The separate
    reduce kernel, no PDL."""
    out = []
    for s in sorted({splits, 2 * splits, 4 * splits}):
        if s > 128:
            continue
        for n, w in ((32, 1), (32, 2), (64, 2), (64, 4), (128, 4)):
            for st, pf in ((2, 0), (2, 1), (3, 1)):
                out.append(
                    {"NUM_SPLITS": s, "BLOCK_N": n, "num_warps": w, "num_stages": st, "PREFETCH": pf, "REDUCE": 0}
                )
    return out


def _attn_name(shape: dict[str, int]) -> str:
    return (
        f"attn s{shape['NUM_SPLITS']} n{shape['BLOCK_N']} w{shape['num_warps']} st{shape['num_stages']}"
        f" pf{shape['PREFETCH']}"
    )


def _attn_error(inputs: tuple[Any, ...], params: dict[str, int], ref: Any) -> str | None:
    """The attention at `params` on `inputs` against the fp32 reference: why it fails, or None."""
    import torch

    from evokernel.search_spaces.attention import template_decode as t

    err = float((t.decode(*inputs, **params).float() - ref).abs().max())
    torch.cuda.synchronize()
    return None if math.isfinite(err) and err <= 2e-2 else f"max error {err:.3g} against the fp32 reference"


def _screened(got: list[dict[str, Any]], work: float, copy_bw: float) -> dict[str, Any]:
    """A sweep's record of its screen: shapes tried, those that failed and why, the ten fastest."""
    return {
        "shapes": len(got),
        "failed": {r["name"]: r["error"] for r in got if "error" in r},
        "screen": [
            {"name": r["name"], "ms": r["ms"], "bw": work / (r["ms"] * 1e-3) / copy_bw} for r in got if "ms" in r
        ][:10],
        "errors": {},
    }


def _time_leaders(
    out: dict[str, Any], fns: dict[str, Any], sets: list[tuple[Any, ...]], work: float, copy_bw: float
) -> dict[str, Any]:
    """`fns` timed interleaved (graph replay, 11 rounds, paired against `separate`) into `out`."""
    from evokernel.judge.footing import side_by_side

    try:
        res = side_by_side(fns, sets, mode="graph", baseline="separate", rounds=11)
    except Exception as exc:
        out["errors"]["side_by_side"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return out
    out["ms"] = {k: v.median_ms for k, v in res["timed"].items()}
    out["vs_separate"] = res["ratios"]
    out["bw_fraction"] = {k: work / (ms * 1e-3) / copy_bw for k, ms in out["ms"].items() if ms}
    return out


def attn_sweep_point(
    sets: list[tuple[Any, ...]],
    entry: dict[str, int],
    splits: int,
    ref: Any,
    work: float,
    copy_bw: float,
    deadline: float,
    leaders: int = 3,
) -> dict[str, Any]:
    """The split-KV attention itself screened over `attn_shapes` (each shape's output checked
    against the fp32 reference first), its `leaders` fastest then timed interleaved (graph
    replay, 11 rounds) against the entry (`separate`): whether a grid the searches' small
    budgets never reached reads the cache faster than the package's entry on this footing."""
    from evokernel.search_spaces.attention import template_decode as t

    base = {k: int(entry[k]) for k in (*t.PARAMS, *t.OPTIONAL) if k in entry}

    def params(shape: dict[str, int]) -> dict[str, int]:
        return dict(base, **shape, PDL=0)

    got = screen(
        sets,
        attn_shapes(splits),
        lambda x, sh: t.decode(*x, **params(sh)),
        deadline - 20,
        _attn_name,
        lambda sh: _attn_error(sets[0], params(sh), ref),
    )
    out = _screened(got, work, copy_bw)
    timed = [r for r in got if "ms" in r]
    if not timed or time.monotonic() > deadline - 15:
        return out
    fns: dict[str, Any] = {"separate": lambda s, p=dict(base, REDUCE=0, PDL=0): t.decode(*s, **p)}
    out["params"] = {}
    for r in timed[:leaders]:
        fns[r["name"]] = lambda s, p=params(r["shape"]): t.decode(*s, **p)
        out["params"][r["name"]] = params(r["shape"])
    return _time_leaders(out, fns, sets, work, copy_bw)


def sweep_point(
    sets: list[tuple[Any, ...]],
    entry: dict[str, int],
    splits: int,
    ref: Any,
    work: float,
    copy_bw: float,
    deadline: float,
    leaders: int = 3,
) -> dict[str, Any]:
    """How fast any shape of this kernel could read the point's bytes: the gather floor screened
    over `sweep_shapes` (`floor_sweep`), then its `leaders` fastest shapes timed interleaved
    (graph replay, 11 rounds, paired against the entry's attention, `separate`) beside the
    entry's own floor and the attention run in each leader's shape (its output checked against
    the fp32 reference first). The best floor over the shapes bounds what any configuration of
    the split kernel reaches at this point; the attention in those shapes says whether the
    entry left any of it on the table."""
    from evokernel.search_spaces.attention import template_decode as t

    got = floor_sweep(sets, sweep_shapes(splits, int(sets[0][1].shape[3])), deadline - 20)
    out = _screened(got, work, copy_bw)
    timed = [r for r in got if "ms" in r]
    if not timed or time.monotonic() > deadline - 15:
        return out
    base = {k: int(entry[k]) for k in (*t.PARAMS, *t.OPTIONAL) if k in entry}
    fns: dict[str, Any] = {
        "separate": lambda s, p=dict(base, REDUCE=0, PDL=0): t.decode(*s, **p),
        "floor_gather": lambda s: read_floor(s, entry, splits, True),
    }
    for r in timed[:leaders]:
        shape = r["shape"]
        fns[f"floor {r['name']}"] = lambda s, sh=shape: read_floor(s, sh, sh["NUM_SPLITS"], True)
        # the attention in the leader's grid and tile (its loads pipelined by the entry's stages)
        grid = {k: shape[k] for k in ("NUM_SPLITS", "BLOCK_N", "num_warps")}
        name = f"attn s{grid['NUM_SPLITS']} n{grid['BLOCK_N']} w{grid['num_warps']}"
        if name in fns or name in out["errors"]:
            continue
        params = dict(base, **grid, REDUCE=0, PDL=0)
        try:
            why = _attn_error(sets[0], params, ref)
        except Exception as exc:  # a shape the attention cannot take is a result too
            why = f"{type(exc).__name__}: {str(exc)[:200]}"
        if why:
            out["errors"][name] = why
            continue
        fns[name] = lambda s, p=params: t.decode(*s, **p)
    return _time_leaders(out, fns, sets, work, copy_bw)


def copy_bandwidth(nbytes: int = 2**30) -> float:
    """This card's device-to-device copy, bytes/s (read plus write), by do_bench: the fractions'
    denominator on a card other than the H200 (whose 4.3 TB/s every recorded figure uses)."""
    import torch
    from triton.testing import do_bench

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200)
    return 2 * nbytes / (ms * 1e-3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--profile", metavar="BATCH:CONTEXT", help="one call of each reduction, for ncu")
    ap.add_argument("--package", default=str(PACKAGE))
    ap.add_argument("--points", nargs="+", default=POINTS, help="BATCH:CONTEXT")
    ap.add_argument("--deadline", type=float, default=200.0)
    ap.add_argument("--only", nargs="+", default=None, help="time these variants (and SGLang's default) only")
    ap.add_argument("--refine", metavar="DEST", help="write the package with each entry beaten here replaced")
    ap.add_argument("--timeline", action="store_true", help="and each variant's per-program stamps (`timeline`)")
    ap.add_argument("--floor", action="store_true", help="and the entry's shape reading the bytes alone (`read_floor`)")
    ap.add_argument(
        "--attn-sweep",
        action="store_true",
        help="and the attention screened over light grids (`attn_sweep_point`), its leaders timed against the entry",
    )
    ap.add_argument(
        "--floor-sweep",
        action="store_true",
        help="and the gather floor over the kernel's shapes (`floor_sweep`), the leaders timed with the attention "
        "in their shapes",
    )
    args = ap.parse_args()
    if args.profile:
        profile_once(args.profile, args.package)
        return 0
    if not args.out:
        ap.error("--out is required (or --profile)")
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from evokernel.judge.footing import side_by_side
    from evokernel.search_spaces.attention import template_decode as t

    entries = _entries(args.package)
    measured = copy_bandwidth()
    # the fractions against the H200's recorded copy, on another card against its own
    copy_bw = COPY_BW if "H200" in torch.cuda.get_device_name() else measured
    doc: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "copy_bw_measured": measured,
        "copy_bw_used": copy_bw,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "torch": torch.__version__,
        "package": args.package,
        "rows": [],
        "skipped": [],
    }
    for spec in args.points:
        if time.monotonic() - t0 > args.deadline:
            doc["skipped"].append(f"{spec}: deadline")
            continue
        mod, shape, batch, context = _problem(spec)
        entry = entries.get(str(batch))
        if not entry:
            doc["skipped"].append(f"{spec}: no package entry")
            continue
        work = float(mod.bytes(shape))
        n = max(2, math.ceil(2 * L2_BYTES / work))
        sets = [mod.make_inputs(shape, seed=100 + i, device="cuda") for i in range(n)]
        ref = mod.reference(*sets[0]).float()
        fns: dict[str, Any] = {}
        row: dict[str, Any] = {"point": spec, "entry": entry, "bytes": work, "sets": n, "errors": {}, "max_err": {}}
        row["splits"] = splits = _splits(entry, batch, context)
        ways = {k: v for k, v in variants(entry, splits).items() if not args.only or k in args.only}
        for name, params in {**ways, "sglang_default": t.sglang_default_params()}.items():
            try:
                got = t.decode(*sets[0], **params).float()
                torch.cuda.synchronize()
                err = float((got - ref).abs().max())
                row["max_err"][name] = err
                if not math.isfinite(err) or err > 2e-2:
                    row["errors"][name] = f"max error {err:.3g} against the fp32 reference"
                    continue
            except Exception as exc:  # a variant that fails is a result of this benchmark
                row["errors"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            fns[name] = lambda s, p=params: t.decode(*s, **p)
        if args.floor:  # (diagnostics: what reading the bytes alone costs in the entry's shape)
            x = sets[0]
            for name, gather in (("floor_gather", True), ("floor_stream", False)):
                try:
                    got = read_floor(x, entry, splits, gather).sum(2)
                    if gather:  # (the slot-order read sums other rows: nothing to compare it with)
                        slots = [x[3][b, : x[4][b]].long() for b in range(batch)]  # each sequence's K/V rows
                        want = torch.stack([(x[1][r].float() + x[2][r].float()).sum((0, 1, 3)) for r in slots])
                        if not torch.allclose(got, want, rtol=1e-3, atol=1.0):
                            row["errors"][name] = f"sums off: {float((got - want).abs().max()):.3g}"
                            continue
                    torch.cuda.synchronize()
                except Exception as exc:
                    row["errors"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    continue
                fns[name] = lambda s, g=gather: read_floor(s, entry, splits, g)
        if "separate" not in fns:
            doc["rows"].append(row)
            continue
        try:
            got = side_by_side(fns, sets, mode="graph", baseline="separate", rounds=11)
        except Exception as exc:  # e.g. a capture that refuses a programmatic dependent launch
            row["errors"]["side_by_side"] = f"{type(exc).__name__}: {str(exc)[:300]}; timed again without PDL"
            fns = {k: f for k, f in fns.items() if not ways.get(k, {}).get("PDL")}
            got = side_by_side(fns, sets, mode="graph", baseline="separate", rounds=11)
        row["footing"] = got["footing"].describe()
        row["ms"] = {k: v.median_ms for k, v in got["timed"].items()}
        row["vs_separate"] = got["ratios"]  # separate / name, per round: median and 95% interval
        row["bw_fraction"] = {k: work / (ms * 1e-3) / copy_bw for k, ms in row["ms"].items() if ms}
        if args.timeline:
            row["timeline"] = {}
            for name in row["ms"]:
                if name not in ways or time.monotonic() - t0 > args.deadline:
                    continue
                try:
                    row["timeline"][name] = timeline(ways[name], sets, work, copy_bw)
                except Exception as exc:  # a diagnosis that fails leaves the timings standing
                    row["errors"][f"timeline {name}"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if args.floor_sweep:
            row["floor_sweep"] = sweep_point(sets, entry, splits, ref, work, copy_bw, t0 + args.deadline)
        if args.attn_sweep:
            row["attn_sweep"] = attn_sweep_point(sets, entry, splits, ref, work, copy_bw, t0 + args.deadline)
        doc["rows"].append(row)
        del sets
        torch.cuda.empty_cache()
        (out / "decode_reduce.json").write_text(json.dumps(doc, indent=1, default=str))
        print(
            json.dumps({"point": spec, "ms": row["ms"], "bw": row["bw_fraction"], "errors": row["errors"]}), flush=True
        )
    if args.refine:
        doc["refined"] = write_refined(args.package, Path(args.refine), doc)
    doc["fits"] = fits(doc)
    (out / "decode_reduce.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "decode_reduce.md").write_text(render(doc))
    print(render(doc))
    return 0


def render(doc: dict[str, Any]) -> str:
    lines = [
        "| point | variant | graph ms | copy-BW fraction | separate / variant, paired [95%] | max err |",
        "|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        for name, ms in row.get("ms", {}).items():
            r = row["vs_separate"].get(name, {})
            ratio = f"{r['median']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]" if r else "-"
            lines.append(
                f"| b{row['point'].replace(':', ' x ')} | {name} | {ms:.4f} | {row['bw_fraction'][name]:.2f} | "
                f"{ratio} | {row['max_err'].get(name, float('nan')):.2g} |"
            )
        for name, why in row.get("errors", {}).items():
            lines.append(f"| b{row['point'].replace(':', ' x ')} | {name} | failed: {why} | | | |")
    if doc.get("fits"):
        lines += [
            "",
            "time a call = fixed + KV bytes / streaming bandwidth, least squares per variant (`fits`):",
            "",
            "| variant | rows | fixed us a call | streaming BW / copy BW |",
            "|---|---|---|---|",
        ]
        for name, groups in doc["fits"].items():
            for group, fit in groups.items():
                lines.append(f"| {name} | {group} | {fit['fixed_us']:.2f} | {fit['stream_bw_fraction']:.3f} |")
    stamped = [(row["point"], name, tl) for row in doc["rows"] for name, tl in row.get("timeline", {}).items()]
    if stamped:
        lines += [
            "",
            "per-program stamps of the last of the graph's calls (`timeline`, us; s1 = the split kernel):",
            "",
            "| point | variant | call | span | outside | s1 span | s1 BW | starts p50 / p90 / last | program med / max "
            "| loop med | programs / SMs / most an SM | reduce gap / span |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for point, name, tl in stamped:
            reduce = f"{tl['gap']:.2f} / {tl['s2_span']:.2f}" if "gap" in tl else "-"
            lines.append(
                f"| b{point.replace(':', ' x ')} | {name} | {tl['call']:.2f} | {tl['span']:.2f} | {tl['outside']:.2f} "
                f"| {tl['s1_span']:.2f} | {tl['s1_bw']:.2f} | {tl['start_p50']:.2f} / {tl['start_p90']:.2f} / "
                f"{tl['start_spread']:.2f} | {tl['prog_med']:.2f} / {tl['prog_max']:.2f} | {tl['loop_med']:.2f} "
                f"| {tl['programs']} / {tl['sms_used']} / {tl['per_sm_max']} | {reduce} |"
            )
    for key, title in (
        (
            "floor_sweep",
            "the gather floor over the kernel's shapes (`floor_sweep`: screened one shape after another, the "
            "leaders then interleaved with the entry's attention, graph replay):",
        ),
        (
            "attn_sweep",
            "the attention over light grids (`attn_sweep_point`: screened one shape after another, outputs "
            "checked, the leaders then interleaved with the entry, graph replay):",
        ),
    ):
        lines += _sweep_table(doc, key, title)
    if doc.get("skipped"):
        lines += ["", "skipped: " + "; ".join(doc["skipped"])]
    return "\n".join(lines) + "\n"


def _sweep_table(doc: dict[str, Any], key: str, title: str) -> list[str]:
    lines: list[str] = []
    swept = [(row["point"], row[key]) for row in doc["rows"] if row.get(key)]
    if swept:
        lines += [
            "",
            title,
            "",
            "| point | shapes (failed) | screen's best (copy BW) | timed | ms | copy-BW fraction | "
            "separate / it, paired [95%] |",
            "|---|---|---|---|---|---|---|",
        ]
        for point, sw in swept:
            best = sw["screen"][0] if sw["screen"] else None
            head = (
                f"| b{point.replace(':', ' x ')} | {sw['shapes']} ({len(sw['failed'])}) | "
                + (f"{best['name']} {best['ms']:.4f} ({best['bw']:.2f})" if best else "-")
                + " |"
            )
            if not sw.get("ms"):
                lines.append(head + " - | | | |")
            for i, (name, ms) in enumerate(sw.get("ms", {}).items()):
                r = sw["vs_separate"].get(name, {})
                ratio = f"{r['median']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]" if r else "-"
                lead = head if i == 0 else "| | | |"
                lines.append(f"{lead} {name} | {ms:.4f} | {sw['bw_fraction'][name]:.2f} | {ratio} |")
            for name, why in sw.get("errors", {}).items():
                lines.append(f"| | | | {name} | failed: {why} | | |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
