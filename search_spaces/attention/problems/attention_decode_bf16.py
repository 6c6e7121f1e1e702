"""Attention decode (one new token per sequence) over a paged KV cache, in bf16.

Inputs, in the layout paged serving engines keep: q [B, H_q, D]; k_cache and v_cache
[num_pages, PAGE, H_kv, D]; block_table [B, max_pages] int32 (sequence b's pages in order,
drawn as a random permutation of the pool, so pages are scattered; entries past a
sequence's last page are 0); context_lens [B] int32. Output [B, H_q, D]: softmax(q k^T /
sqrt(D)) v over each sequence's context_lens[b] cached tokens, query head h reading KV head
h // (H_q / H_kv). q and k are drawn from 1.5 * randn, v from randn (see the prefill
problem). The shape is the problem's parameters (`Params`: `Problem.load(path, params={...})`,
else the environment variable EVOKERNEL_DECODE_<NAME>, read when the module is loaded):

- model (EVOKERNEL_DECODE_MODEL): llama3-8b (default; 32 query heads, 8 KV heads, D 128),
  qwen3-30b-a3b (32/4, D 128), tiny (4/1, D 64: the CPU tests); see MODELS;
- batch (EVOKERNEL_DECODE_BATCH): sequences (default 32);
- context (EVOKERNEL_DECODE_CONTEXT): context length of every sequence (default 4096), or a
  comma-separated list cycled over the batch (e.g. "512,8192,30000");
- page (EVOKERNEL_DECODE_PAGE): tokens per page (default 16; SGLang's default is 1, vLLM's 16);
- dtype (EVOKERNEL_DECODE_DTYPE): bfloat16 (default), or float16 / float32 (the CPU interpreter).

The reference gathers each sequence's pages and computes in fp32 with plain torch, one
sequence at a time, rounded once.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
import torch

from evokernel.judge.problem import problem_params

#: (H_q, H_kv, D) of each model's attention.
MODELS = {
    "llama3-8b": (32, 8, 128),
    "qwen3-30b-a3b": (32, 4, 128),
    "tiny": (4, 1, 64),  # tests (the CPU interpreter)
}


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters (see the module's docstring)."""

    model: str = "llama3-8b"
    batch: int = 32
    context: tuple[int, ...] = (4096,)
    page: int = 16
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"


P = problem_params(Params, env="EVOKERNEL_DECODE_")
MODEL = P.model
if MODEL not in MODELS:
    raise ValueError(f"model (EVOKERNEL_DECODE_MODEL) must be one of {sorted(MODELS)}, got {MODEL!r}")
HQ, HKV, D = MODELS[MODEL]
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE = _DTYPES[P.dtype]
BATCH = P.batch
_CTX = list(P.context)
PAGE = P.page
if BATCH < 1 or not _CTX or min(_CTX) < 1 or PAGE < 1:
    raise ValueError(f"batch, contexts and page size must be positive: {BATCH}, {_CTX}, {PAGE}")
LENS = [_CTX[i % len(_CTX)] for i in range(BATCH)]


def lens_key(lens: list[int]) -> str:
    """A shape's context lengths as text: "4096x32" for equal lengths, else "512/8192/30000"."""
    return f"{lens[0]}x{len(lens)}" if len(set(lens)) == 1 else "/".join(map(str, lens))


def parse_lens(key: str) -> list[int]:
    if "x" in key:
        n, b = key.split("x")
        return [int(n)] * int(b)
    return [int(n) for n in key.split("/")]


def _shape(lens: list[int]) -> dict:
    return {"B": len(lens), "C": max(lens), "Hq": HQ, "Hkv": HKV, "D": D, "P": PAGE, "lens": lens_key(lens)}


FAMILY = f"attention_decode_{str(DTYPE).removeprefix('torch.')}_d{D}_g{HQ // HKV}_p{PAGE}"
SHAPES = [_shape(LENS)]
# fewer sequences of uneven contexts, none a multiple of the page size
HELDOUT_SHAPES = [_shape([max(1, LENS[0] // 2 + 7), max(1, LENS[-1] - 5), 3][: max(1, min(3, BATCH))])]
TOLERANCE = {
    "bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "float32": {"rtol": 1e-4, "atol": 1e-4},
}


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    lens = parse_lens(shape["lens"])
    B, hq, hkv, d, page = len(lens), shape["Hq"], shape["Hkv"], shape["D"], shape["P"]
    per_seq = [math.ceil(n / page) for n in lens]
    num_pages = sum(per_seq) + 1  # one spare page that no sequence owns
    g = torch.Generator(device=device).manual_seed(seed)
    q = (1.5 * torch.randn(B, hq, d, generator=g, device=device)).to(DTYPE)
    k_cache = (1.5 * torch.randn(num_pages, page, hkv, d, generator=g, device=device)).to(DTYPE)
    v_cache = torch.randn(num_pages, page, hkv, d, generator=g, device=device).to(DTYPE)
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed)).tolist()
    table = torch.zeros(B, max(per_seq), dtype=torch.int32)
    used = 0
    for b, n in enumerate(per_seq):
        table[b, :n] = torch.tensor(perm[used : used + n], dtype=torch.int32)
        used += n
    lens_t = torch.tensor(lens, dtype=torch.int32)
    return q, k_cache, v_cache, table.to(device), lens_t.to(device)


def reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor
) -> torch.Tensor:
    B, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    group = hq // hkv
    out = torch.empty((B, hq, d), device=q.device, dtype=torch.float32)
    for b, n in enumerate(context_lens.tolist()):
        pages = block_table[b, : math.ceil(n / page)].long()
        k = k_cache[pages].reshape(-1, hkv, d)[:n].float()  # [n, H_kv, D]
        v = v_cache[pages].reshape(-1, hkv, d)[:n].float()
        qb = q[b].float().view(hkv, group, d)
        scores = torch.einsum("kgd,nkd->kgn", qb, k) / math.sqrt(d)
        out[b] = torch.einsum("kgn,nkd->kgd", scores.softmax(-1), v).reshape(hq, d)
    return out.to(q.dtype)


def flops(shape: dict) -> float:
    return 4.0 * shape["Hq"] * shape["D"] * sum(parse_lens(shape["lens"]))


def bytes(shape: dict) -> float:  # noqa: A001 - the problem contract's name
    item = torch.tensor([], dtype=DTYPE).element_size()
    lens = parse_lens(shape["lens"])
    kv = 2 * sum(lens) * shape["Hkv"] * shape["D"]
    return float(item * (kv + 2 * len(lens) * shape["Hq"] * shape["D"]) + 4 * len(lens) * (1 + max(lens) // shape["P"]))
