"""A Qwen3-MoE-style stack of decoder layers (prefill), written on evokernel's rewritable-block
API (`evokernel.model.model_level`), with dummy weights.

Each layer: RMSNorm, separate Q, K and V projections (no bias), RMSNorm on each query and
key head (QK-norm), rotary embeddings (the rotate-half form), grouped-query causal attention
through F.scaled_dot_product_attention, the output projection and the residual add,
RMSNorm, then a mixture of experts: a router, softmax, top-k with the weights renormalised,
and SwiGLU experts run as two grouped GEMMs (`torch._grouped_mm` over the (token, expert)
pairs sorted by expert: what eager PyTorch offers that a CUDA graph can capture), and the
residual add. Real sizes (`model("real")`, Qwen3-30B-A3B's layer): hidden 2048, 32 query and
4 KV heads of 128, 128 experts, top-8, expert intermediate 768, 4096 tokens, bf16 on the GPU;
`model()` is tiny.

Rewrite sites (`DecoderLayer.SITES`): qkv_merge (Q/K/V as one GEMM), qkv_epilogue (QK-norm +
RoPE + the head layout in one Triton kernel, or torch.compile on that segment), rmsnorm (both
norms as one Triton kernel each, the residual add fused into the second), moe_impl (the
experts as the fused-MoE Triton template of `search_spaces/moe/template.py`, with its genes),
block_compile (torch.compile on each whole layer, after the other rewrites).

    evokernel profile examples/models/qwen3_moe_stack.py --device cpu --iters 3
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from evokernel.model.model_level import Rewritable, Site, launch_genes, model_size, moe_genes
from evokernel.search_spaces.fused.kernels import NORM_GENES, ROPE_GENES

name = "qwen3-moe-stack"

SIZES = {
    "tiny": dict(hidden=64, heads=4, kv_heads=2, head_dim=16, experts=8, top_k=2, inter=32, layers=2, tokens=16),
    "real": dict(
        hidden=2048, heads=32, kv_heads=4, head_dim=128, experts=128, top_k=8, inter=768, layers=2, tokens=4096
    ),
}


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Qwen3's RMSNorm: in fp32, cast back, times the weight."""
    dtype = x.dtype
    x = x.float()
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)


def rope_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (x[i], x[i + D/2]) by position and frequency i; cos/sin [S, D/2] in fp32."""
    c, s = torch.cat((cos, cos), -1).to(x.dtype), torch.cat((sin, sin), -1).to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * c + rotated * s


def rope_tables(tokens: int, head_dim: int, theta: float = 1e6) -> tuple[torch.Tensor, torch.Tensor]:
    freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    a = torch.arange(tokens, dtype=torch.float64)[:, None] * freq[None, :]
    return a.cos().float().contiguous(), a.sin().float().contiguous()


def grouped_experts(
    x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """sum_j w[t, j] * W2[e] (silu(Wg[e] x) * (Wu[e] x)) through two grouped GEMMs over the
    pairs sorted by expert; no host synchronisation (capturable)."""
    tokens, top_k = ids.shape
    experts, two_i, hidden = w1.shape
    if x.dtype != torch.bfloat16 and (x.device.type != "cpu" or torch.compiler.is_compiling()):
        return _experts_fp32(x, w1, w2, weights, ids)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(experts, dtype=torch.int32, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32)
    )
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    xs = x[order // top_k]
    h = torch._grouped_mm(xs, w1.transpose(1, 2), offs=offs)
    a = F.silu(h[:, : two_i // 2]) * h[:, two_i // 2 :]
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    y = y * weights.reshape(-1)[order, None].to(y.dtype)
    out = torch.empty_like(y)
    out[order] = y
    return out.view(tokens, top_k, -1).sum(dim=1)


def _experts_fp32(
    x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """The same experts where torch._grouped_mm does not run (it takes bf16 only on CUDA and
    under torch.compile): each pair's expert weights gathered at small sizes (capturable), a
    loop over experts otherwise (it reads the counts on the host: for fp32 references)."""
    tokens, top_k = ids.shape
    experts, two_i, hidden = w1.shape
    flat = ids.reshape(-1)
    xs = x.repeat_interleave(top_k, dim=0)
    if flat.numel() * two_i * hidden <= 2**24:
        h = torch.bmm(w1[flat], xs[:, :, None])[:, :, 0]
        a = F.silu(h[:, : two_i // 2]) * h[:, two_i // 2 :]
        y = torch.bmm(w2[flat], a[:, :, None])[:, :, 0]
    else:
        y = x.new_empty(flat.numel(), w2.shape[1])
        for e in range(experts):
            rows = (flat == e).nonzero()[:, 0]
            h = xs[rows] @ w1[e].t()
            y[rows] = (F.silu(h[:, : two_i // 2]) * h[:, two_i // 2 :]) @ w2[e].t()
    return (y * weights.reshape(-1, 1).to(y.dtype)).view(tokens, top_k, -1).sum(dim=1)


class DecoderLayer(Rewritable, nn.Module):
    SITES = (
        Site(
            "qkv_merge",
            "merge",
            ("separate", "merged"),
            "the Q, K and V projections as one GEMM (weights concatenated at build time)",
        ),
        Site(
            "qkv_epilogue",
            "fuse",
            ("eager", "triton", "compiled"),
            "QK-norm, RoPE and the [B, heads, S, D] layout: eager ops, one Triton kernel (reads the merged "
            "projection), or torch.compile on the segment",
            requires={"triton": (("qkv_merge", "merged"),)},
            kernel=launch_genes(ROPE_GENES),
            tuned=("triton",),
        ),
        Site(
            "rmsnorm",
            "fuse",
            ("eager", "triton"),
            "each RMSNorm as one Triton kernel, the attention's residual add fused into the second",
            kernel=launch_genes(NORM_GENES),
            tuned=("triton",),
        ),
        Site(
            "moe_impl",
            "fuse",
            ("grouped_mm", "triton_fused"),
            "the experts as the fused-MoE Triton template (sorted, block-aligned pairs, SwiGLU between the two "
            "GEMMs, routing weights in the down GEMM) instead of torch._grouped_mm",
            kernel=moe_genes(),
            tuned=("triton_fused",),
        ),
        Site(
            "block_compile",
            "compile",
            ("off", "on"),
            "torch.compile (mode default, no CUDA graphs of its own) on the whole block after the other rewrites "
            "(their Triton kernels traced as user kernels): the glue left between them fused",
            excludes={"on": (("qkv_epilogue", "compiled"),)},
        ),
    )

    def __init__(
        self, hidden: int, heads: int, kv_heads: int, head_dim: int, experts: int, top_k: int, inter: int
    ) -> None:
        super().__init__()
        self.hidden, self.heads, self.kv_heads, self.head_dim, self.top_k = hidden, heads, kv_heads, head_dim, top_k
        self.input_norm, self.post_norm = nn.Parameter(torch.ones(hidden)), nn.Parameter(torch.ones(hidden))
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.q_norm, self.k_norm = nn.Parameter(torch.ones(head_dim)), nn.Parameter(torch.ones(head_dim))
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.router = nn.Linear(hidden, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, 2 * inter, hidden) / hidden**0.5)  # [gate; up] rows
        self.w2 = nn.Parameter(torch.randn(experts, hidden, inter) / inter**0.5)
        self.sample_tokens = 16

    def realise(self, plan) -> None:  # type: ignore[no-untyped-def]
        super().realise(plan)
        if self.choice("qkv_merge") == "merged":
            self.__dict__["_qkv"] = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        if self.choice("qkv_epilogue") == "compiled":
            self.__dict__["_compiled"] = torch.compile(self._prologue_eager, dynamic=False)
        if self.choice("block_compile") == "on":
            self.__dict__["_block"] = torch.compile(self._forward, dynamic=False)

    def _norm(self, x, weight, y=None):  # type: ignore[no-untyped-def]
        """(stream, h): stream = x + y when y is given, h = RMSNorm(stream)."""
        if self.choice("rmsnorm") == "triton":
            from evokernel.search_spaces.fused.kernels import norm_modulate

            if y is None:
                return norm_modulate(x, weight=weight, rms=True, **self.genes("rmsnorm"))
            return norm_modulate(y, residual=x, weight=weight, rms=True, **self.genes("rmsnorm"))
        if y is not None:
            x = x + y
        return x, rms(x, weight)

    def _project(self, h: torch.Tensor):  # type: ignore[no-untyped-def]
        if self.choice("qkv_merge") == "merged":
            return F.linear(h, self.__dict__["_qkv"])
        return self.q_proj(h), self.k_proj(h), self.v_proj(h)

    def _prologue_eager(self, qkv, cos, sin):  # type: ignore[no-untyped-def]
        if isinstance(qkv, torch.Tensor):
            qkv = qkv.split(
                [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1
            )
        q, k, v = qkv
        b, s, _ = q.shape
        q = rms(q.reshape(b, s, self.heads, self.head_dim), self.q_norm).transpose(1, 2)
        k = rms(k.reshape(b, s, self.kv_heads, self.head_dim), self.k_norm).transpose(1, 2)
        v = v.reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        return rope_half(q, cos, sin), rope_half(k, cos, sin), v

    def _prologue(self, qkv, cos, sin):  # type: ignore[no-untyped-def]
        how = self.choice("qkv_epilogue")
        if how == "compiled":
            return self.__dict__["_compiled"](qkv, cos, sin)
        if how == "eager":
            return self._prologue_eager(qkv, cos, sin)
        from evokernel.search_spaces.fused.kernels import qk_norm_rope

        return qk_norm_rope(
            qkv,
            self.q_norm,
            self.k_norm,
            cos,
            sin,
            heads=self.heads,
            kv_heads=self.kv_heads,
            **self.genes("qkv_epilogue"),
        )

    def _experts(self, flat: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if self.choice("moe_impl") == "triton_fused":
            from evokernel.search_spaces.moe.template import GEMM_KEYS

            genes = self.genes("moe_impl")
            cfg = [int(genes[k]) for k in GEMM_KEYS]
            # the custom op (torch.ops.evokernel.fused_moe): opaque to torch.compile, so a
            # compiled layer (block_compile=on) keeps this kernel inside, without graph breaks
            return torch.ops.evokernel.fused_moe(
                flat,
                self.w1,
                self.w2,
                weights,
                ids,
                cfg,
                cfg,
                int(genes.get("GEMV", 0)),
                bool(genes.get("FUSE_SILU", 0)),
            )
        return grouped_experts(flat, self.w1, self.w2, weights, ids)

    def forward(self, x, cos, sin):  # type: ignore[no-untyped-def]
        if self.choice("block_compile") == "on":
            return self.__dict__["_block"](x, cos, sin)
        return self._forward(x, cos, sin)

    def _forward(self, x, cos, sin):  # type: ignore[no-untyped-def]
        b, s, _ = x.shape
        _, h = self._norm(x, self.input_norm)
        q, k, v = self._prologue(self._project(h), cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x, h = self._norm(x, self.post_norm, y=self.o_proj(o.transpose(1, 2).reshape(b, s, -1)))
        flat = h.reshape(-1, self.hidden)
        probs = F.softmax(self.router(flat), dim=-1, dtype=torch.float32)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        return x + self._experts(flat, weights, ids).view(b, s, -1)

    def sample_inputs(self, seed: int, dtype: torch.dtype, device) -> tuple:  # type: ignore[no-untyped-def]
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(1, self.sample_tokens, self.hidden, generator=g)
        cos, sin = rope_tables(self.sample_tokens, self.head_dim)
        return x.to(device, dtype), cos.to(device), sin.to(device)


class Qwen3MoEStack(nn.Module):
    def __init__(
        self,
        hidden: int = 64,
        heads: int = 4,
        kv_heads: int = 2,
        head_dim: int = 16,
        experts: int = 8,
        top_k: int = 2,
        inter: int = 32,
        layers: int = 2,
        **_: object,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, heads, kv_heads, head_dim, experts, top_k, inter) for _ in range(layers)
        )

    def forward(self, x, cos, sin):  # type: ignore[no-untyped-def]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


def model(size: str | None = None) -> Qwen3MoEStack:
    """The stack with dummy weights (seeded; QK-norm and norm weights off 1 so they matter)."""
    size = model_size(size, SIZES)
    torch.manual_seed(0)
    m = Qwen3MoEStack(**SIZES[size])
    with torch.no_grad():
        for layer in m.layers:
            for w in (layer.input_norm, layer.post_norm, layer.q_norm, layer.k_norm):
                w.uniform_(0.5, 1.5)
            if size == "real":
                layer.sample_tokens = 512
    return m.to(torch.bfloat16) if size == "real" else m  # real sizes run in bf16, as the benchmarks do


def example_inputs(size: str | None = None, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
    """hidden states [1, tokens, hidden] in `dtype` and the rotary tables cos, sin [tokens, D/2] in fp32."""
    size = model_size(size, SIZES)
    dtype = dtype or (torch.bfloat16 if size == "real" else torch.float32)
    cfg = SIZES[size]
    x = torch.randn(1, cfg["tokens"], cfg["hidden"], generator=torch.Generator().manual_seed(1))
    cos, sin = rope_tables(cfg["tokens"], cfg["head_dim"])
    return (x.to(dtype), cos, sin)


if __name__ == "__main__":
    from rich.console import Console

    from evokernel.model.profile import profile_module

    Console().print(profile_module(model(), example_inputs(), device="cpu", iters=3, target=name).table())
