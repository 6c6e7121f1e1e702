"""A FLUX-style DiT: a stack of double-stream blocks, written on evokernel's rewritable-block
API (`evokernel.model.model_level`), with dummy weights.

Each block has an image and a text stream with their own weights. Per stream: adaLN
modulation (a Linear of silu(vec) into shift/scale/gate for the attention and the MLP
halves), LayerNorm without affine then `h * (1 + scale) + shift`, separate Q, K and V
projections (with bias), RMSNorm on each query and key head (QK-norm), then joint
attention over the text tokens followed by the image tokens, with FLUX's interleaved-pair
rotary embedding of 3-axis position ids; the output projection enters the stream through
its gate, then the modulated MLP (Linear, GELU with the tanh approximation, Linear) through
the second gate. Real sizes (`model("real")`): hidden 3072, 24 heads of 128, MLP ratio 4,
image 4096 tokens (a 64x64 latent grid) and text 512, bf16 on the GPU; `model()` is tiny.

Rewrite sites (`FluxStack.SITES`, `DoubleBlock.SITES`): adaln_hoist (every block's
modulation in one GEMM per forward), qkv_merge (Q/K/V as one GEMM), qkv_epilogue (QK-norm +
RoPE + the joint layout in one Triton kernel, or torch.compile on that segment), norm_modulate
(LayerNorm + modulation, and the gated residual add before the second one, in one Triton
kernel), mlp_act (GELU in the epilogue of the Triton GEMM template), block_compile
(torch.compile on each whole block, after the other rewrites).

    evokernel profile examples/models/flux_dit.py --device cpu --iters 3
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from evokernel.model.model_level import Rewritable, Site, gemm_genes, launch_genes, model_size
from evokernel.search_spaces.fused.kernels import NORM_GENES, ROPE_GENES

name = "flux-dit"

SIZES = {
    "tiny": dict(hidden=64, heads=4, mlp_ratio=4, blocks=2, img_hw=(4, 6), txt=8, axes=(4, 6, 6)),
    "real": dict(hidden=3072, heads=24, mlp_ratio=4, blocks=2, img_hw=(64, 64), txt=512, axes=(16, 56, 56)),
}


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """FLUX's QK-norm: RMSNorm computed in fp32, cast back, times the scale."""
    dtype = x.dtype
    x = x.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(dtype) * weight


def rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) by the angle of position and frequency i; cos/sin [L, D/2]."""
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2).to(x.dtype)


def rope_tables(ids: torch.Tensor, axes: tuple[int, ...], theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [L, D/2] for integer position ids [L, len(axes)] (FLUX's EmbedND)."""
    angles = []
    for i, dim in enumerate(axes):
        freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        angles.append(ids[:, i].double()[:, None] * freq[None, :])
    a = torch.cat(angles, dim=-1)
    return a.cos().float().contiguous(), a.sin().float().contiguous()


class Stream(nn.Module):
    """One stream's weights (image or text)."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        d = hidden // heads
        self.mod = nn.Linear(hidden, 6 * hidden)
        self.to_q, self.to_k, self.to_v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.q_norm, self.k_norm = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        self.proj = nn.Linear(hidden, hidden)
        self.mlp_in = nn.Linear(hidden, mlp_ratio * hidden)
        self.mlp_out = nn.Linear(mlp_ratio * hidden, hidden)


class DoubleBlock(Rewritable, nn.Module):
    SITES = (
        Site(
            "qkv_merge",
            "merge",
            ("separate", "merged"),
            "the Q, K and V projections of a stream as one GEMM (weights concatenated at build time)",
        ),
        Site(
            "qkv_epilogue",
            "fuse",
            ("eager", "triton", "compiled"),
            "QK-norm, RoPE and the joint [B, heads, L, D] layout: eager ops, one Triton kernel per stream "
            "(reads the merged projection), or torch.compile on the segment",
            requires={"triton": (("qkv_merge", "merged"),)},
            kernel=launch_genes(ROPE_GENES),
            tuned=("triton",),
        ),
        Site(
            "norm_modulate",
            "fuse",
            ("eager", "triton"),
            "LayerNorm + adaLN modulation (and the gated residual add before the MLP half) in one Triton kernel",
            kernel=launch_genes(NORM_GENES),
            tuned=("triton",),
        ),
        Site(
            "mlp_act",
            "fuse",
            ("eager", "gemm_epilogue"),
            "the MLP's up projection, bias and GELU(tanh) as the Triton GEMM template with its activation epilogue",
            kernel=gemm_genes(),
            tuned=("gemm_epilogue",),
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

    def __init__(self, hidden: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.img, self.txt = Stream(hidden, heads, mlp_ratio), Stream(hidden, heads, mlp_ratio)
        self.sample_tokens = (12, 4)  # image, text tokens of sample_inputs

    # -- realisation: what the choices need, built once ------------------------------------------
    def realise(self, plan) -> None:  # type: ignore[no-untyped-def]
        super().realise(plan)
        if self.choice("qkv_merge") == "merged":
            self.__dict__["_qkv"] = {
                s: (
                    torch.cat([st.to_q.weight, st.to_k.weight, st.to_v.weight]),
                    torch.cat([st.to_q.bias, st.to_k.bias, st.to_v.bias]),
                )
                for s, st in (("img", self.img), ("txt", self.txt))
            }
        if self.choice("qkv_epilogue") == "compiled":
            self.__dict__["_compiled"] = torch.compile(self._prologue_eager, dynamic=False)
        if self.choice("block_compile") == "on":
            self.__dict__["_block"] = torch.compile(self._forward, dynamic=False)

    # -- pieces ---------------------------------------------------------------------------------
    def _modulated(self, x, shift, scale, stream=None, gate=None, y=None):  # type: ignore[no-untyped-def]
        """(stream, h): stream = x + gate * y when y is given, h = LN(stream) * (1 + scale) + shift."""
        if self.choice("norm_modulate") == "triton":
            from evokernel.search_spaces.fused.kernels import norm_modulate

            if y is None:
                return norm_modulate(x, shift=shift, scale=scale, **self.genes("norm_modulate"))
            return norm_modulate(y, residual=x, gate=gate, shift=shift, scale=scale, **self.genes("norm_modulate"))
        if y is not None:
            x = x + gate[:, None] * y
        h = F.layer_norm(x, (self.hidden,), eps=1e-6)
        return x, h * (1 + scale[:, None]) + shift[:, None]

    def _project(self, name: str, st: Stream, h: torch.Tensor):  # type: ignore[no-untyped-def]
        if self.choice("qkv_merge") == "merged":
            w, b = self.__dict__["_qkv"][name]
            return F.linear(h, w, b)
        return st.to_q(h), st.to_k(h), st.to_v(h)

    def _prologue_eager(self, t_qkv, i_qkv, cos, sin):  # type: ignore[no-untyped-def]
        qs, ks, vs = [], [], []
        for qkv, st in ((t_qkv, self.txt), (i_qkv, self.img)):
            q, k, v = qkv.split(self.hidden, dim=-1) if isinstance(qkv, torch.Tensor) else qkv
            b, s, _ = q.shape
            shape = (b, s, self.heads, self.head_dim)
            qs.append(rms(q.reshape(shape), st.q_norm).transpose(1, 2))
            ks.append(rms(k.reshape(shape), st.k_norm).transpose(1, 2))
            vs.append(v.reshape(shape).transpose(1, 2))
        q, k, v = torch.cat(qs, dim=2), torch.cat(ks, dim=2), torch.cat(vs, dim=2)
        return rope_interleaved(q, cos, sin), rope_interleaved(k, cos, sin), v

    def _prologue(self, t_qkv, i_qkv, cos, sin):  # type: ignore[no-untyped-def]
        how = self.choice("qkv_epilogue")
        if how == "compiled":
            return self.__dict__["_compiled"](t_qkv, i_qkv, cos, sin)
        if how == "eager":
            return self._prologue_eager(t_qkv, i_qkv, cos, sin)
        from evokernel.search_spaces.fused.kernels import qk_norm_rope

        b, st_, _ = t_qkv.shape
        total = st_ + i_qkv.shape[1]
        out = tuple(t_qkv.new_empty(b, self.heads, total, self.head_dim) for _ in range(3))
        for qkv, s, offset in ((t_qkv, self.txt, 0), (i_qkv, self.img, st_)):
            qk_norm_rope(
                qkv,
                s.q_norm,
                s.k_norm,
                cos,
                sin,
                heads=self.heads,
                kv_heads=self.heads,
                out=out,
                offset=offset,
                interleaved=True,
                **self.genes("qkv_epilogue"),
            )
        return out

    def _mlp(self, st: Stream, h: torch.Tensor) -> torch.Tensor:
        if self.choice("mlp_act") == "gemm_epilogue":
            from evokernel.search_spaces.gemm.template import DEFAULTS, gemm

            flat = h.reshape(-1, h.shape[-1])
            up = gemm(
                flat,
                st.mlp_in.weight.t(),
                bias=st.mlp_in.bias,
                activation="gelu_tanh",
                **{**DEFAULTS, **self.genes("mlp_act")},
            )
            return st.mlp_out(up).view(*h.shape[:-1], -1)
        return st.mlp_out(F.gelu(st.mlp_in(h), approximate="tanh"))

    def forward(self, img, txt, vec, cos, sin, mods=None):  # type: ignore[no-untyped-def]
        if self.choice("block_compile") == "on":
            return self.__dict__["_block"](img, txt, vec, cos, sin, mods=mods)
        return self._forward(img, txt, vec, cos, sin, mods=mods)

    def _forward(self, img, txt, vec, cos, sin, mods=None):  # type: ignore[no-untyped-def]
        if mods is None:
            v = F.silu(vec)
            mods = (self.img.mod(v).chunk(6, dim=-1), self.txt.mod(v).chunk(6, dim=-1))
        (i_sh1, i_sc1, i_g1, i_sh2, i_sc2, i_g2), (t_sh1, t_sc1, t_g1, t_sh2, t_sc2, t_g2) = mods
        _, i_h = self._modulated(img, i_sh1, i_sc1)
        _, t_h = self._modulated(txt, t_sh1, t_sc1)
        q, k, v = self._prologue(self._project("txt", self.txt, t_h), self._project("img", self.img, i_h), cos, sin)
        attn = F.scaled_dot_product_attention(q, k, v)
        attn = attn.transpose(1, 2).reshape(q.shape[0], q.shape[2], self.hidden)
        t_attn, i_attn = attn[:, : txt.shape[1]], attn[:, txt.shape[1] :]
        img, i_h = self._modulated(img, i_sh2, i_sc2, gate=i_g1, y=self.img.proj(i_attn))
        txt, t_h = self._modulated(txt, t_sh2, t_sc2, gate=t_g1, y=self.txt.proj(t_attn))
        img = img + i_g2[:, None] * self._mlp(self.img, i_h)
        txt = txt + t_g2[:, None] * self._mlp(self.txt, t_h)
        return img, txt

    def sample_inputs(self, seed: int, dtype: torch.dtype, device) -> tuple:  # type: ignore[no-untyped-def]
        g = torch.Generator().manual_seed(seed)
        n_img, n_txt = self.sample_tokens
        img = torch.randn(1, n_img, self.hidden, generator=g)
        txt = torch.randn(1, n_txt, self.hidden, generator=g)
        vec = torch.randn(1, self.hidden, generator=g)
        cos, sin = rope_tables(torch.randint(0, 64, (n_txt + n_img, 3), generator=g), _axes(self.head_dim))
        return (img.to(device, dtype), txt.to(device, dtype), vec.to(device, dtype), cos.to(device), sin.to(device))


def _axes(d: int) -> tuple[int, ...]:
    """FLUX's split of a head's rotary dims over (time, row, column): (16, 56, 56) for 128."""
    b = (d - d // 8) // 2 // 2 * 2
    return (d - 2 * b, b, b)


class FluxStack(Rewritable, nn.Module):
    SITES = (
        Site(
            "adaln_hoist",
            "hoist",
            ("per_block", "hoisted"),
            "every block's adaLN modulation (a Linear of silu(vec)) computed once per forward, as one GEMM over "
            "the concatenated weights, instead of two GEMMs per block",
        ),
    )

    def __init__(self, hidden: int = 64, heads: int = 4, mlp_ratio: int = 4, blocks: int = 2, **_: object) -> None:
        super().__init__()
        self.hidden = hidden
        self.blocks = nn.ModuleList(DoubleBlock(hidden, heads, mlp_ratio) for _ in range(blocks))

    def realise(self, plan) -> None:  # type: ignore[no-untyped-def]
        super().realise(plan)
        if self.choice("adaln_hoist") == "hoisted":
            mods = [m for b in self.blocks for m in (b.img.mod, b.txt.mod)]
            self.__dict__["_mod"] = (torch.cat([m.weight for m in mods]), torch.cat([m.bias for m in mods]))

    def forward(self, img, txt, vec, cos, sin):  # type: ignore[no-untyped-def]
        mods = [None] * len(self.blocks)
        if self.choice("adaln_hoist") == "hoisted":
            w, b = self.__dict__["_mod"]
            chunks = F.linear(F.silu(vec), w, b).chunk(12 * len(self.blocks), dim=-1)
            mods = [(chunks[12 * i : 12 * i + 6], chunks[12 * i + 6 : 12 * i + 12]) for i in range(len(self.blocks))]
        for block, m in zip(self.blocks, mods):
            img, txt = block(img, txt, vec, cos, sin, mods=m)
        return img, txt

    def sample_inputs(self, seed: int, dtype: torch.dtype, device) -> tuple:  # type: ignore[no-untyped-def]
        return self.blocks[0].sample_inputs(seed, dtype, device)


def model(size: str | None = None) -> FluxStack:
    """The stack with dummy weights (seeded; scaled like a trained model's: O(1) activations)."""
    size = model_size(size, SIZES)
    torch.manual_seed(0)
    cfg = SIZES[size]
    m = FluxStack(cfg["hidden"], cfg["heads"], cfg["mlp_ratio"], cfg["blocks"])
    with torch.no_grad():
        for b in m.blocks:
            for st in (b.img, b.txt):
                st.mod.weight.mul_(0.5)  # gates and scales of order 0.1-1
                st.q_norm.uniform_(0.5, 1.5)
                st.k_norm.uniform_(0.5, 1.5)
    if size == "real":
        img_tokens = cfg["img_hw"][0] * cfg["img_hw"][1]
        for b in m.blocks:
            b.sample_tokens = (min(img_tokens, 1024), min(cfg["txt"], 256))
    return m.to(torch.bfloat16) if size == "real" else m  # real sizes run in bf16, as the benchmarks do


def example_inputs(size: str | None = None, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
    """img [1, h*w, hidden], txt [1, txt, hidden], vec [1, hidden] in `dtype`; cos and sin [txt + h*w, D/2]
    in fp32."""
    size = model_size(size, SIZES)
    dtype = dtype or (torch.bfloat16 if size == "real" else torch.float32)
    cfg = SIZES[size]
    g = torch.Generator().manual_seed(1)
    h, w = cfg["img_hw"]
    hidden, n_txt = cfg["hidden"], cfg["txt"]
    img = torch.randn(1, h * w, hidden, generator=g)
    txt = torch.randn(1, n_txt, hidden, generator=g)
    vec = torch.randn(1, hidden, generator=g)
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    img_ids = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).reshape(-1, 3)
    ids = torch.cat([torch.zeros(n_txt, 3, dtype=torch.long), img_ids])
    cos, sin = rope_tables(ids, cfg["axes"])
    return img.to(dtype), txt.to(dtype), vec.to(dtype), cos, sin


if __name__ == "__main__":
    from rich.console import Console

    from evokernel.model.profile import profile_module

    Console().print(profile_module(model(), example_inputs(), device="cpu", iters=3, target=name).table())
