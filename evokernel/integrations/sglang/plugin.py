"""The SGLang plugin: what `evokernel export sglang-plugin` wrote, applied inside SGLang.

SGLang (>= 0.5.11) calls every `sglang.srt.plugins` entry point from `load_plugins()` in
each of its processes (the engine, and each spawned scheduler, where the model runs) before
the model loads and before CUDA graphs are captured; evokernel registers `register` there
(pyproject). It does nothing unless `EVOKERNEL_SGLANG_PACKAGE` names a package folder, so
installing evokernel never changes an engine by itself. A package holds:

    manifest.json        {"format": "evokernel-sglang/1", "configs": "configs" | null,
                          "kernels": [{"op": "fused_moe", "target": ..., "table": "kernels/fused_moe.json"}],
                          "provenance": {...}}
    configs/triton_<v>/E=..,N=..,device_name=...json (+ _down.json)   SGLang's own MoE kernel configs
    kernels/fused_moe.json   {"E=128,N=768": {"64": {"up": {...}, "down": {...}}, ...}}
    kernels/decode_attention.json   {"Hq=32,Hkv=8,D=128": {"1": {"NUM_SPLITS": 32, "BLOCK_N": 64, ...}, ...}}
    kernels/prefill_attention.json  {"Hq=32,Hkv=4,D=128,causal=1": {"4096": {"form": "gluon", "BLOCK_M": 128, ...}}}

- `configs`: `SGLANG_MOE_CONFIG_DIR` is pointed at the package (unless the user set it), so
  SGLang's own fused-MoE kernel runs the exported up and down configs;
- `fused_moe`: an AROUND hook on SGLang's `fused_experts_impl` runs evokernel's fused-MoE
  template (`search_spaces/moe/template.py`) at the config tuned for the nearest batch size,
  with the up and down GEMMs' BLOCK_SIZE_M free (SGLang's own kernel forces them equal),
  and its small-batch GEMV path where the search chose it (SGLang's kernel has none).
  Only the plain path is taken over: bf16/fp16, SiLU-gated, no quantisation, biases,
  clamps or router weights on the input, and an (E, N) the package was tuned for; any other
  call goes to SGLang's kernel unchanged. The template builds its alignment with device ops
  only, so it is captured in SGLang's CUDA graphs like SGLang's own.
- `decode_attention`: an AROUND hook on SGLang's `decode_attention_fwd` (its Triton
  attention backend's decode) runs evokernel's split-KV decode template over the engine's
  own token-slot cache (`template_decode.decode_slots`) at the configuration tuned for the
  nearest batch size (splits, keys a step, warps, stages, the reduction), writing into the
  engine's output buffer. Taken over: page size 1, a 3-D cache of q's dtype (bf16/fp16),
  no logit cap, sinks, temperature, MLA, score mods or KV scales other than 1, and a
  (H_q, H_kv, D) the package was tuned for; anything else runs SGLang's kernel. It reads
  lengths and slots on the device only, so it is captured in the decode CUDA graphs.
- `prefill_attention`: an AROUND hook on SGLang's `extend_attention_fwd` (its Triton
  backend's prefill) runs evokernel's prefill kernel (`form` "gluon": the warp-specialised
  FA3-style Gluon kernel, `template_prefill_gluon`; "triton": `template_prefill`) over the
  new tokens of the batch, packed as SGLang packs them (`qo_indptr` as cu_seqlens), at the
  configuration tuned for the sequence length nearest the batch's longest new sequence
  (within 4x). Taken over only where no sequence of the batch has cached tokens before its
  new ones: SGLang sizes the prefix slot list to the cached tokens when it knows them on
  the host, so an empty list says so without reading the GPU; chunks after the first of a
  chunked prefill, radix-cache hits, custom masks, sliding windows, sinks, logit caps,
  score mods, KV scales other than 1 and heads the package was not tuned for run SGLang's
  kernel. A configuration that fails to launch is logged once and left to SGLang.

What the evaluator measures (`evaluators/sglang.py`) is this same package, so what was
measured is what ships.

`hook_stats()` says what the installed hooks did in this process: per op, the calls that ran
evokernel's kernel and those left to SGLang's, with the reasons (a prefix cached, a shape off
the table, a failed launch ...). With EVOKERNEL_SGLANG_CHECK=N (`CHECK_ENV`) the attention hooks
also run SGLang's kernel on the first N eager calls of each shape into a copy of the output and
record the largest difference: the evaluator turns it on for the engines it compares, where the
warm-up absorbs the waits (calls inside a CUDA graph capture are not checked).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "register",
    "hook_stats",
    "Package",
    "MoeTable",
    "DecodeTable",
    "PrefillTable",
    "fused_experts_hook",
    "decode_attention_hook",
    "extend_attention_hook",
    "PACKAGE_ENV",
    "CHECK_ENV",
    "check_calls",
    "FUSED_EXPERTS",
    "DECODE_ATTENTION",
    "EXTEND_ATTENTION",
    "FORMAT",
    "serving",
]

log = logging.getLogger("evokernel.sglang")
#: the hooks `register()` installed in this process, by op (see `hook_stats`)
INSTALLED: dict[str, Callable[..., Any]] = {}

PACKAGE_ENV = "EVOKERNEL_SGLANG_PACKAGE"
#: with a number N > 0, each attention hook also runs SGLang's own kernel on the first N eager
#: calls of every shape it takes over and records how far evokernel's output is from it
#: (`hook_stats()["..."]["checks"]`); each check waits for the GPU, so the evaluator sets it
#: for the engines it compares (their warm-up absorbs the checks), never a served engine
CHECK_ENV = "EVOKERNEL_SGLANG_CHECK"
FORMAT = "evokernel-sglang/1"
#: SGLang 0.5.17's fused-MoE entry (its Triton runner and `fused_moe` both call it).
FUSED_EXPERTS = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe.fused_experts_impl"
#: SGLang 0.5.17's decode attention (its Triton backend imports it from here when built).
DECODE_ATTENTION = "sglang.kernels.ops.attention.decode_attention.decode_attention_fwd"
DECODE_KEYS = ("NUM_SPLITS", "BLOCK_N", "num_warps", "num_stages", "REDUCE")  # template_decode.PARAMS
DECODE_OPTIONAL = ("PREFETCH", "PDL")  # template_decode.OPTIONAL: 0 where an entry has none
#: SGLang 0.5.17's extend (prefill) attention (its Triton backend imports it from here when built).
EXTEND_ATTENTION = "sglang.kernels.ops.attention.extend_attention.extend_attention_fwd"
#: the prefill kernels' genes per form (template_prefill.PARAMS, template_prefill_gluon.GLUON_PARAMS)
PREFILL_KEYS = {
    "triton": (
        "BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "CAUSAL_SKIP", "EXP2", "LAZY_RESCALE", "PERSISTENT", "TMA",
        "WARP_SPEC", "REVERSE_KV",
    ),
    "gluon": (
        "BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "OVERLAP", "PINGPONG", "PERSISTENT", "QSTAGES", "TMA_STORE",
        "BY_SEQUENCE", "SNAKE",
    ),
}  # fmt: skip
GEMM_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
STRUCTURE = ("GEMV", "FUSE_SILU")  # the template's structural genes (search_spaces/moe/template.py: STRUCTURE)


def serving(keys: Iterable[int], batch: int, reach: float | None = 2.0) -> int | None:
    """The tuned batch size whose entry serves `batch`: the nearest (ties to the smaller),
    within `reach` of it (None: at any distance, as SGLang reads its own config files).

    >>> serving([1, 4, 16], 2), serving([1, 4, 16], 7), serving([1, 4, 16], 40), serving([1, 4, 16], 40, None)
    (1, 4, None, 16)
    """
    keys = list(keys)
    if not keys:
        return None
    k = min(keys, key=lambda x: (abs(x - batch), x))
    return k if reach is None or k / reach <= batch <= k * reach else None


class PackageError(ValueError):
    """A package folder that cannot be used, with the reason."""


class MoeTable:
    """Tuned (up, down) configs per (E, N) and batch size; the nearest batch size is used, as
    SGLang picks its own configs (ties go to the smaller), but only within `reach` (2x) of it:
    a prefill of 2048 tokens does not run a config tuned for decode at 256. An entry of None
    (null in the file) keeps SGLang's own kernel for the batch sizes nearest to it: what the
    promotion cascade writes for a change it did not promote (`promote.py`)."""

    def __init__(
        self,
        entries: Mapping[tuple[int, int], Mapping[int, tuple[dict[str, int], dict[str, int]] | None]],
        *,
        reach: float = 2.0,
    ):
        self.entries = {k: dict(v) for k, v in entries.items()}
        self.reach = reach  # a tuned batch size serves batch sizes within this factor of it, no further

    @classmethod
    def from_json(cls, data: Any, where: str = "the table") -> MoeTable:
        if not isinstance(data, dict):
            raise PackageError(f"{where}: expected an object of 'E=..,N=..' keys")
        entries: dict[tuple[int, int], dict[int, tuple[dict[str, int], dict[str, int]] | None]] = {}
        for key, per_m in data.items():
            try:
                parts = dict(p.split("=") for p in key.split(","))
                en = (int(parts["E"]), int(parts["N"]))
                entries[en] = {
                    int(m): (
                        {k: int(c["up"][k]) for k in (*GEMM_KEYS, *STRUCTURE) if k in c["up"] or k not in STRUCTURE},
                        {k: int(c["down"][k]) for k in GEMM_KEYS},
                    )
                    if c is not None
                    else None  # SGLang's own kernel (a change the promotion reverted)
                    for m, c in per_m.items()
                }
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise PackageError(f"{where}: entry {key!r} is malformed ({type(exc).__name__}: {exc})") from exc
        return cls(entries)

    def to_json(self) -> dict[str, Any]:
        return {
            f"E={e},N={n}": {str(m): {"up": c[0], "down": c[1]} if c else None for m, c in sorted(per_m.items())}
            for (e, n), per_m in sorted(self.entries.items())
        }

    def lookup(self, E: int, N: int, M: int) -> tuple[dict[str, int], dict[str, int]] | None:
        per_m = self.entries.get((E, N))
        if not per_m:
            return None
        m = serving(per_m, M, self.reach)
        return None if m is None else per_m[m]  # far from anything tuned: SGLang's own kernel and configs


class DecodeTable:
    """Tuned decode configurations per (H_q, H_kv, D) and batch size; the nearest batch size
    within `reach` (2x) of the call's serves it (ties to the smaller), as in `MoeTable`. A
    decode step's batch size is what the engine knows on the host (its CUDA graphs are
    captured per batch size); the contexts are on the device, so one batch size runs one
    configuration whatever its sequences' lengths. An entry may name the context it was
    tuned at ("context"): NUM_SPLITS 0 ("auto") is then resolved at that context, as the
    search measured it, not at the length of the engine's slot buffer. An entry of None keeps
    SGLang's kernel for the batch sizes nearest to it (as in `MoeTable`)."""

    def __init__(
        self, entries: Mapping[tuple[int, int, int], Mapping[int, dict[str, int] | None]], *, reach: float = 2.0
    ):
        self.entries = {k: dict(v) for k, v in entries.items()}
        self.reach = reach

    @classmethod
    def from_json(cls, data: Any, where: str = "the table") -> DecodeTable:
        if not isinstance(data, dict):
            raise PackageError(f"{where}: expected an object of 'Hq=..,Hkv=..,D=..' keys")
        entries: dict[tuple[int, int, int], dict[int, dict[str, int] | None]] = {}
        for key, per_b in data.items():
            try:
                parts = dict(p.split("=") for p in key.split(","))
                heads = (int(parts["Hq"]), int(parts["Hkv"]), int(parts["D"]))
                if min(heads[:3]) <= 0:
                    raise ValueError(f"Hq={heads[0]}, Hkv={heads[1]} and D={heads[2]} must be positive")
                if heads[0] % heads[1]:
                    raise ValueError(f"Hq={heads[0]} is not a multiple of Hkv={heads[1]}")
                entries[heads] = {
                    int(b): {
                        k: int(c[k]) for k in (*DECODE_KEYS, *DECODE_OPTIONAL, "context") if k in c or k in DECODE_KEYS
                    }
                    if c is not None
                    else None  # SGLang's own kernel (a change the promotion reverted)
                    for b, c in per_b.items()
                }
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise PackageError(f"{where}: entry {key!r} is malformed ({type(exc).__name__}: {exc})") from exc
        return cls(entries)

    def to_json(self) -> dict[str, Any]:
        return {
            f"Hq={hq},Hkv={hkv},D={d}": {str(b): dict(c) if c else None for b, c in sorted(per_b.items())}
            for (hq, hkv, d), per_b in sorted(self.entries.items())
        }

    def lookup(self, Hq: int, Hkv: int, D: int, B: int) -> dict[str, int] | None:
        per_b = self.entries.get((Hq, Hkv, D))
        if not per_b:
            return None
        b = serving(per_b, B, self.reach)
        return None if b is None else per_b[b]


class PrefillTable:
    """Tuned prefill configurations per (H_q, H_kv, D, causal) and sequence length; the entry
    tuned at the length nearest the call's longest new sequence, within `reach` (4x), serves
    it (ties to the shorter). An entry names its kernel ("form": "gluon" or "triton") and that
    kernel's genes; None keeps SGLang's kernel for the lengths nearest it."""

    def __init__(
        self,
        entries: Mapping[tuple[int, int, int, bool], Mapping[int, dict[str, Any] | None]],
        *,
        reach: float = 4.0,
    ):
        self.entries = {k: dict(v) for k, v in entries.items()}
        self.reach = reach

    @staticmethod
    def entry(c: Mapping[str, Any], where: str = "the entry", head_dim: int | None = None) -> dict[str, Any]:
        """The entry's form and genes, checked; with `head_dim`, a Gluon entry is also checked
        against the kernel's build limits (registers, shared memory, the warpgroup layouts), so
        a package that could only fall back at every launch is refused when it loads."""
        form = c.get("form")
        if form not in PREFILL_KEYS:
            raise PackageError(f"{where}: form is {form!r}, expected one of {sorted(PREFILL_KEYS)}")
        keys = PREFILL_KEYS[form]
        missing = [k for k in keys[:4] if k not in c]  # tiles, warps and stages; the structural genes default
        if missing:
            raise PackageError(f"{where}: no {missing}")
        out = {"form": form, **{k: int(c[k]) for k in keys if k in c}}
        if form == "gluon" and head_dim is not None:
            from evokernel.search_spaces.attention.template_prefill_gluon import check_gluon_params

            why = check_gluon_params(out, head_dim=head_dim)
            if why:
                raise PackageError(f"{where}: the Gluon kernel cannot build it ({why})")
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "the table") -> PrefillTable:
        if not isinstance(data, dict):
            raise PackageError(f"{where}: expected an object of 'Hq=..,Hkv=..,D=..,causal=..' keys")
        entries: dict[tuple[int, int, int, bool], dict[int, dict[str, Any] | None]] = {}
        for key, per_s in data.items():
            try:
                parts = dict(p.split("=") for p in key.split(","))
                heads = (int(parts["Hq"]), int(parts["Hkv"]), int(parts["D"]), bool(int(parts["causal"])))
                if min(heads[:3]) <= 0:
                    raise ValueError(f"Hq={heads[0]}, Hkv={heads[1]} and D={heads[2]} must be positive")
                if heads[0] % heads[1]:
                    raise ValueError(f"Hq={heads[0]} is not a multiple of Hkv={heads[1]}")
                entries[heads] = {
                    int(n): cls.entry(c, f"{where}: {key} at {n}", head_dim=heads[2]) if c is not None else None
                    for n, c in per_s.items()
                }
            except PackageError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise PackageError(f"{where}: entry {key!r} is malformed ({type(exc).__name__}: {exc})") from exc
        return cls(entries)

    def to_json(self) -> dict[str, Any]:
        return {
            f"Hq={hq},Hkv={hkv},D={d},causal={int(c)}": {
                str(n): dict(e) if e else None for n, e in sorted(per_s.items())
            }
            for (hq, hkv, d, c), per_s in sorted(self.entries.items())
        }

    def lookup(self, Hq: int, Hkv: int, D: int, causal: bool, seqlen: int) -> dict[str, Any] | None:
        per_s = self.entries.get((Hq, Hkv, D, bool(causal)))
        if not per_s:
            return None
        n = serving(per_s, seqlen, self.reach)
        return None if n is None else per_s[n]


def _check_configs(folder: Path) -> None:
    """Every fused-MoE config file under `folder` as SGLang reads one: a JSON object of batch
    sizes (integers) to objects of integer kernel parameters. SGLang would otherwise fail on
    a broken file inside the engine, or run on half of it."""
    for f in sorted(folder.rglob("E=*.json")):  # (the files SGLang looks up by their name)
        try:
            data = json.loads(f.read_text())
        except ValueError as exc:
            raise PackageError(f"config {f} is not JSON: {exc}") from exc
        try:
            if not isinstance(data, dict) or not data:
                raise TypeError("expected an object of batch sizes")
            for m, c in data.items():
                int(m)
                if not isinstance(c, dict) or not all(isinstance(v, int) for v in c.values()):
                    raise TypeError(f"batch size {m}: expected an object of integer parameters, got {c!r}")
        except (TypeError, ValueError) as exc:
            raise PackageError(f"config {f} is malformed ({exc})") from exc


class Package:
    """An exported package folder (see the module's doc), validated on load."""

    def __init__(
        self,
        root: Path,
        manifest: dict[str, Any],
        moe: MoeTable | None,
        decode: DecodeTable | None = None,
        prefill: PrefillTable | None = None,
    ) -> None:
        self.root, self.manifest, self.moe, self.decode, self.prefill = root, manifest, moe, decode, prefill

    @property
    def config_dir(self) -> Path | None:
        sub = self.manifest.get("configs")
        return (self.root / sub).parent if sub else None  # SGLANG_MOE_CONFIG_DIR holds configs/

    @classmethod
    def load(cls, root: str | os.PathLike[str]) -> Package:
        root = Path(root)
        path = root / "manifest.json"
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise PackageError(
                f"{root} holds no manifest.json (write one with `evokernel export sglang-plugin`)"
            ) from None
        except ValueError as exc:
            raise PackageError(f"{path} is not JSON: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise PackageError(
                f"{path}: format is {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                f"expected {FORMAT!r}"
            )
        configs = manifest.get("configs")
        if configs is not None and not isinstance(configs, str):
            raise PackageError(f"{path}: configs is {configs!r}, expected a folder's name")
        if configs and not (root / configs).is_dir():
            raise PackageError(f"{path}: configs folder {configs!r} is missing")
        if configs:
            _check_configs(root / configs)
        kernels = manifest.get("kernels") or []
        if not isinstance(kernels, list):
            raise PackageError(f"{path}: kernels is {kernels!r}, expected a list of {{op, table}} entries")
        tables: dict[str, Any] = {}
        for kernel in kernels:
            op = kernel.get("op") if isinstance(kernel, dict) else None
            if op not in TABLES:
                raise PackageError(
                    f"{path}: unknown kernel entry {kernel!r} (this evokernel ships {', '.join(map(repr, TABLES))})"
                )
            table = root / str(kernel.get("table", ""))
            try:
                data = json.loads(table.read_text())
            except (FileNotFoundError, IsADirectoryError):
                raise PackageError(f"{path}: kernel table {table} is missing") from None
            except ValueError as exc:
                raise PackageError(f"{table} is not JSON: {exc}") from exc
            tables[op] = TABLES[op].from_json(data, str(table))
        return cls(
            root,
            manifest,
            tables.get("fused_moe"),
            tables.get("decode_attention"),
            tables.get("prefill_attention"),
        )


TABLES: dict[str, Any] = {
    "fused_moe": MoeTable,
    "decode_attention": DecodeTable,
    "prefill_attention": PrefillTable,
}


_PLAIN_DEFAULTS = {  # fused_experts_impl arguments that must hold these values for the template to apply
    "b1": None,
    "b2": None,
    "activation": "silu",
    "is_gated": True,
    "apply_router_weight_on_input": False,
    "use_fp8_w8a8": False,
    "use_int8_w8a8": False,
    "use_int8_w8a16": False,
    "use_int4_w4a16": False,
    "per_channel_quant": False,
    "w1_scale": None,
    "w2_scale": None,
    "w1_zp": None,
    "w2_zp": None,
    "a1_scale": None,
    "a2_scale": None,
    "block_shape": None,
    "no_combine": False,
    "gemm1_alpha": None,
    "gemm1_limit": None,
    "swiglu_limit": None,
    "a1_q": None,
}


def _arguments(
    signatures: dict[Any, inspect.Signature], original: Callable[..., Any], args: tuple, kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """A hooked call's arguments by name, defaults filled in (the original's signature read
    once), or None where they do not bind to it (the hook then leaves the call to SGLang)."""
    sig = signatures.get(original)
    if sig is None:
        sig = signatures[original] = inspect.signature(original)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def fused_experts_hook(table: MoeTable, *, run: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """An AROUND hook for `fused_experts_impl`: the template where `table` has a config for
    the call's (E, N) and the call is on the plain path, else SGLang's own kernel."""
    if run is None:
        from evokernel.search_spaces.moe.template import fused_moe as run
    signatures: dict[Any, inspect.Signature] = {}
    used: set[tuple[int, int, int]] = set()
    stats = {"template": 0, "fallback": 0}

    def hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        a = _arguments(signatures, original, args, kwargs)
        if a is None:
            stats["fallback"] += 1
            return original(*args, **kwargs)
        x, w1, w2 = a["hidden_states"], a["w1"], a["w2"]
        plain = all((a.get(k) is None) if v is None else (a.get(k, v) == v) for k, v in _PLAIN_DEFAULTS.items())
        configs = None
        if plain and str(x.dtype) in ("torch.bfloat16", "torch.float16") and x.dim() == 2 and w1.dim() == 3:
            E, two_n, _ = w1.shape
            configs = table.lookup(int(E), int(two_n) // 2, int(x.shape[0]))
        if configs is None:
            stats["fallback"] += 1
            return original(*args, **kwargs)
        up, down = configs
        out = run(
            x,
            w1,
            w2,
            a["topk_weights"],
            a["topk_ids"],
            up={k: up[k] for k in GEMM_KEYS},
            down=down,
            gemv=int(up.get("GEMV", 0)),
            fuse_silu=bool(up.get("FUSE_SILU")),
        )
        factor = a.get("routed_scaling_factor")
        if factor is not None and factor != 1.0:
            out = out * factor
        key = (int(w1.shape[0]), int(w1.shape[1]) // 2, int(x.shape[0]))
        if key not in used:
            used.add(key)
            log.info("evokernel fused_moe at E=%d N=%d M=%d: up %s, down %s", *key, up, down)
        stats["template"] += 1
        if a.get("inplace"):
            x.copy_(out)
            return x
        return out

    hook.stats = stats  # type: ignore[attr-defined]
    return hook


_DECODE_PLAIN = {  # decode_attention_fwd arguments that must hold these values for the template to apply
    "logit_cap": 0.0,
    "sinks": None,
    "has_mla": False,
    "page_size": 1,
    "score_mod": None,
    "aux_tensors": None,
}


def decode_attention_hook(table: DecodeTable, *, run: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """An AROUND hook for SGLang's `decode_attention_fwd`: the split-KV decode template where
    `table` has a configuration for the call's heads and batch size and the call is on the
    plain path (see the module's doc), else SGLang's own kernel."""
    if run is None:
        from evokernel.search_spaces.attention.template_decode import decode_slots as run
    from evokernel.search_spaces.attention.template_decode import auto_splits, num_sms

    def resolve(batch: int, kv_heads: int, context: int, device: Any) -> int:
        return auto_splits(batch, kv_heads, context, num_sms(device))

    signatures: dict[Any, inspect.Signature] = {}
    used: set[tuple[int, int, int, int]] = set()
    stats = {"template": 0, "fallback": 0}
    checks = _Checks()

    def hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        a = _arguments(signatures, original, args, kwargs)
        if a is None:
            stats["fallback"] += 1
            return original(*args, **kwargs)
        q, k, v, o = a.get("q"), a.get("k_buffer"), a.get("v_buffer"), a.get("o")
        config = None
        if _plain(a, _DECODE_PLAIN) and _heads_layout(q, k, v, o):
            B, Hq, D = (int(x) for x in q.shape)
            config = table.lookup(Hq, int(k.shape[1]), D, B)
        if config is None:
            stats["fallback"] += 1
            return original(*args, **kwargs)
        B, Hq, D = (int(x) for x in q.shape)
        params = {n: config[n] for n in (*DECODE_KEYS, *DECODE_OPTIONAL) if n in config}
        if not params["NUM_SPLITS"] and config.get("context"):
            params["NUM_SPLITS"] = resolve(B, int(k.shape[1]), int(config["context"]), q.device)
        run(q, k, v, a["kv_indptr"][: B + 1], a["kv_indices"], sm_scale=float(a["sm_scale"]), out=o, **params)
        key = (B, Hq, int(k.shape[1]), D)
        if checks.wanted(f"B={B}"):
            checks.run(f"B={B}", original, a, "o", o)
        if key not in used:
            used.add(key)
            log.info("evokernel decode_attention at B=%d Hq=%d Hkv=%d D=%d: %s", *key, params)
        stats["template"] += 1
        return None  # (SGLang's writes `o` and returns nothing)

    hook.stats = stats  # type: ignore[attr-defined]
    hook.checks = checks  # type: ignore[attr-defined]
    return hook


_EXTEND_PLAIN = {  # extend_attention_fwd arguments that must hold these values for the kernel to apply
    "custom_mask": None,
    "logit_cap": 0.0,
    "sinks": None,
    "window_kv_offsets": None,
    "lse_extend": None,
    "skip_prefix": False,
    "skip_extend": False,
    "score_mod": None,
    "aux_tensors": None,
}


def extend_attention_hook(
    table: PrefillTable, *, run: Mapping[str, Callable[..., Any]] | None = None
) -> Callable[..., Any]:
    """An AROUND hook for SGLang's `extend_attention_fwd`: evokernel's prefill kernel where
    `table` has a configuration for the call's heads, masking and longest new sequence and
    no sequence has cached tokens before its new ones (see the module's doc), else SGLang's
    own kernel. `run`: the kernels by form (default: the Gluon and Triton templates)."""
    kernels = dict(run) if run is not None else {}
    signatures: dict[Any, inspect.Signature] = {}
    used: set[tuple[Any, ...]] = set()
    broken: set[tuple[Any, ...]] = set()
    stats = {"template": 0, "fallback": 0}
    why_not: dict[str, int] = {}  # fallbacks by reason
    errors: list[str] = []  # launches that failed (each configuration once)
    checks = _Checks()

    def kernel(form: str) -> Callable[..., Any]:
        if form not in kernels:
            if form == "gluon":
                from evokernel.search_spaces.attention.template_prefill_gluon import attention_gluon as fn
            else:
                from evokernel.search_spaces.attention.template_prefill import attention as fn
            kernels[form] = fn
        return kernels[form]

    def fall_back(why: str, original: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        stats["fallback"] += 1
        why_not[why] = why_not.get(why, 0) + 1
        return original(*args, **kwargs)

    def hook(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        a = _arguments(signatures, original, args, kwargs)
        if a is None:
            return fall_back("arguments do not bind", original, args, kwargs)
        q, k, v, o = a.get("q_extend"), a.get("k_extend"), a.get("v_extend"), a.get("o_extend")
        indices, indptr = a.get("kv_indices"), a.get("qo_indptr")
        if not (_plain(a, _EXTEND_PLAIN) and a.get("sliding_window_size") in (None, -1)):
            return fall_back("not the plain path", original, args, kwargs)
        if not _heads_layout(q, k, v, o) or q.shape[0] != k.shape[0]:
            return fall_back("layout", original, args, kwargs)
        if indices is None or indptr is None or int(indices.numel()) != 0:
            return fall_back("cached prefix", original, args, kwargs)
        if str(indptr.dtype) not in ("torch.int32", "torch.int64"):
            return fall_back("offsets not int32 or int64", original, args, kwargs)
        Hq, Hkv, D = int(q.shape[1]), int(k.shape[1]), int(q.shape[2])
        causal = bool(a.get("is_causal", True))
        config = table.lookup(Hq, Hkv, D, causal, int(a["max_len_extend"]))
        if config is None:
            return fall_back("no entry for the length", original, args, kwargs)
        key = (Hq, Hkv, D, causal, config["form"], tuple(sorted(config.items())))
        if key in broken:
            return fall_back("launch failed before", original, args, kwargs)
        params = {n: x for n, x in config.items() if n != "form"}
        sm_scale = a.get("sm_scale") or 1.0 / math.sqrt(D)
        try:
            out = kernel(config["form"])(
                q.contiguous(),
                k.contiguous(),
                v.contiguous(),
                # SGLang's engine keeps its query offsets in int64 (the H200 A/B: every prefill
                # call); the kernels index with int32 (a batch's tokens are far below 2^31):
                # converted on the device, no wait
                indptr if str(indptr.dtype) == "torch.int32" else indptr.int(),
                int(a["max_len_extend"]),
                causal=causal,
                sm_scale=float(sm_scale),
                **params,
            )
        except Exception as exc:  # a configuration that does not launch here: SGLang's kernel, once logged
            broken.add(key)
            errors.append(f"{config}: {type(exc).__name__}: {str(exc)[:300]}")
            log.warning(
                "evokernel prefill_attention %s failed (%s: %s); SGLang's kernel runs it",
                config,
                type(exc).__name__,
                exc,
            )
            return fall_back("launch failed", original, args, kwargs)
        o.copy_(out)
        where = f"max_len={int(a['max_len_extend'])}"
        if checks.wanted(where):
            checks.run(where, original, a, "o_extend", o)
        if key not in used:
            used.add(key)
            log.info(
                "evokernel prefill_attention at Hq=%d Hkv=%d D=%d causal=%s max_len=%d: %s",
                Hq, Hkv, D, causal, int(a["max_len_extend"]), config,
            )  # fmt: skip
        stats["template"] += 1
        return None  # (SGLang's writes `o_extend` and returns nothing)

    hook.stats = stats  # type: ignore[attr-defined]
    hook.why_not = why_not  # type: ignore[attr-defined]
    hook.errors = errors  # type: ignore[attr-defined]
    hook.checks = checks  # type: ignore[attr-defined]
    return hook


def check_calls() -> int:
    """CHECK_ENV's value: eager calls per shape the attention hooks check (0: none; a value
    that is not a number counts as 0)."""
    try:
        return max(0, int(os.environ.get(CHECK_ENV, "0") or 0))
    except ValueError:
        return 0


class _Checks:
    """The shadow check of an attention hook (see CHECK_ENV): per shape key, the first `n`
    eager calls run SGLang's kernel into a copy of the output and compare."""

    def __init__(self, n: int | None = None):
        self.n = max(0, n) if n is not None else check_calls()
        self.seen: dict[str, dict[str, Any]] = {}

    def wanted(self, key: str) -> bool:
        if self.n <= 0 or self.seen.get(key, {}).get("calls", 0) >= self.n:
            return False
        import torch

        # inside a CUDA graph capture nothing can be read back: those calls are not checked
        return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())

    def run(
        self,
        key: str,
        original: Callable[..., Any],
        a: Mapping[str, Any],
        out_name: str,
        got: Any,
    ) -> None:
        """SGLang's kernel on the same arguments into a copy of `out_name`; its distance to
        `got` (evokernel's output) kept under `key`. A failing reference is recorded too."""
        rec = self.seen.setdefault(key, {"calls": 0, "max_err": 0.0, "ref_absmax": 0.0})
        rec["calls"] += 1
        try:
            ref = a[out_name].clone()
            original(**dict(a, **{out_name: ref}))
            err = float((got.float() - ref.float()).abs().max())
            rec["max_err"] = max(rec["max_err"], err)
            rec["ref_absmax"] = max(rec["ref_absmax"], float(ref.float().abs().max()))
            rec["finite"] = bool(rec.get("finite", True)) and bool(got.isfinite().all())
        except Exception as exc:  # the check must not break the engine: recorded, not raised
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"


def hook_stats() -> dict[str, dict[str, Any]]:
    """What the hooks `register()` installed in this process did so far, per op: calls that ran
    evokernel's kernel ("template") and SGLang's ("fallback"), with the fallbacks' reasons and
    failed launches where the hook records them (the SGLang driver reports this after every
    command, so an A/B shows whether a package's kernel actually ran)."""
    out: dict[str, dict[str, Any]] = {}
    for op, hook in INSTALLED.items():
        st: dict[str, Any] = dict(getattr(hook, "stats", {}))
        if getattr(hook, "why_not", None):
            st["why_not"] = dict(hook.why_not)  # type: ignore[attr-defined]
        if getattr(hook, "errors", None):
            st["errors"] = list(hook.errors)  # type: ignore[attr-defined]
        checks = getattr(hook, "checks", None)
        if checks is not None and checks.seen:
            st["checks"] = {k: dict(v) for k, v in checks.seen.items()}
        out[op] = st
    return out


def _plain(a: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
    """Whether an attention call's arguments `a` are on the plain path: each of `defaults` at its
    value (None: absent or None), no temperature scaling, KV scales of 1."""
    return (
        all((a.get(n) is None) if want is None else (a.get(n, want) == want) for n, want in defaults.items())
        and (a.get("xai_temperature_len") is None or a["xai_temperature_len"] <= 0)
        and all(_one(a.get(n)) for n in ("k_scale", "v_scale"))
    )


def _heads_layout(q: Any, k: Any, v: Any, o: Any) -> bool:
    """Whether q and o are [tokens, H_q, D] and k and v [rows, H_kv, D] of one 16-bit dtype."""
    if q is None or k is None or v is None or o is None:
        return False
    return (
        str(q.dtype) in ("torch.bfloat16", "torch.float16")
        and q.dim() == 3
        and k.dim() == 3
        and v.shape == k.shape
        and str(k.dtype) == str(q.dtype)
        and o.shape == q.shape
        and q.shape[-1] == k.shape[-1]
    )


def _one(x: Any) -> bool:
    """Whether a KV scale is 1: None or the number 1 (a tensor scale is not read: that would
    wait for the GPU; SGLang passes its layers' scales as floats)."""
    return x is None or (isinstance(x, (int, float)) and float(x) == 1.0)


def register() -> None:
    """The `sglang.srt.plugins` entry point: applies the package named by
    EVOKERNEL_SGLANG_PACKAGE in this SGLang process (nothing when it is unset)."""
    where = os.environ.get(PACKAGE_ENV)
    if not where:
        return
    try:
        package = Package.load(where)
    except PackageError as exc:
        log.error("evokernel plugin: %s; SGLang runs unchanged", exc)
        return
    except Exception as exc:  # a package this evokernel did not foresee: never take SGLang down with it
        log.error(
            "evokernel plugin: %s could not be read (%s: %s); SGLang runs unchanged", where, type(exc).__name__, exc
        )
        return
    if package.config_dir is not None and "SGLANG_MOE_CONFIG_DIR" not in os.environ:
        os.environ["SGLANG_MOE_CONFIG_DIR"] = str(package.config_dir)
        log.info("evokernel plugin: SGLANG_MOE_CONFIG_DIR=%s", package.config_dir)
    hooks = (
        ("fused_moe", FUSED_EXPERTS, package.moe, fused_experts_hook, "shapes"),
        ("decode_attention", DECODE_ATTENTION, package.decode, decode_attention_hook, "head shapes"),
        ("prefill_attention", EXTEND_ATTENTION, package.prefill, extend_attention_hook, "head shapes"),
    )
    for op, target, table, make, what in hooks:
        if table is None:
            continue
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        INSTALLED[op] = hook = make(table)
        HookRegistry.register(target, hook, HookType.AROUND)
        log.info("evokernel plugin: %s hooked on %s (%d %s)", op, target, len(table.entries), what)
