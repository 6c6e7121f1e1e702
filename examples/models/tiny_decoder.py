"""A tiny Qwen3-style decoder in plain torch, a target for `evokernel profile`.

Each layer: RMSNorm, a fused QKV projection, RMSNorm on the queries and keys per head
(QK-norm), rotary embeddings, grouped-query attention through
F.scaled_dot_product_attention (causal), the output projection, RMSNorm, and a SwiGLU MLP
(even layers) or a small top-2 mixture of experts (odd layers). Small enough to profile on
a CPU in about a second; scale it up (`TinyDecoder(hidden=4096, ...)`) for a GPU.

    evokernel profile examples/models/tiny_decoder.py --device cpu --iters 3
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

name = "tiny-decoder"


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=False)
        self.q_norm, self.k_norm = RMSNorm(head_dim), RMSNorm(head_dim)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1
        )
        q = self.q_norm(q.view(b, s, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(k.view(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class MoE(nn.Module):
    def __init__(self, hidden: int, inter: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(MLP(hidden, inter) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = torch.topk(F.softmax(self.router(flat), dim=-1), self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot, None])
        return out.view_as(x)


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, moe: bool) -> None:
        super().__init__()
        self.input_norm, self.post_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.attn = Attention(hidden, heads, kv_heads, head_dim)
        self.mlp = MoE(hidden, inter // 2, experts=4, top_k=2) if moe else MLP(hidden, inter)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin)
        return x + self.mlp(self.post_norm(x))


class TinyDecoder(nn.Module):
    def __init__(
        self,
        vocab: int = 256,
        hidden: int = 64,
        layers: int = 2,
        heads: int = 4,
        kv_heads: int = 2,
        head_dim: int = 16,
        inter: int = 128,
        theta: float = 1e6,
    ) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            Layer(hidden, heads, kv_heads, head_dim, inter, moe=i % 2 == 1) for i in range(layers)
        )
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device, dtype=torch.float32)
        freq = self.theta ** (-torch.arange(0, self.head_dim, 2, device=tokens.device) / self.head_dim)
        angles = torch.outer(pos, freq).repeat(1, 2)
        cos, sin = angles.cos(), angles.sin()
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def model() -> TinyDecoder:
    torch.manual_seed(0)
    return TinyDecoder()


def example_inputs() -> tuple[torch.Tensor]:
    return (torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0)),)


if __name__ == "__main__":
    from evokernel.model.profile import profile_module

    from rich.console import Console

    Console().print(profile_module(model(), example_inputs(), device="cpu", iters=3, target=name).table())
