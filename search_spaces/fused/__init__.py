"""Small fused Triton kernels that model-level rewrites use (`kernels`: norm + modulate,
QK-norm + RoPE): launch genes, no search space of their own."""

from evokernel.search_spaces.fused.kernels import NORM_GENES, ROPE_GENES, norm_modulate, qk_norm_rope

__all__ = ["norm_modulate", "qk_norm_rope", "NORM_GENES", "ROPE_GENES"]
