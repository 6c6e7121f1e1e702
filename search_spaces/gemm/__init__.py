"""The Hopper GEMM family, with its Gluon and fp8 forms.

- `space`: the bf16/fp16 space and its validity rules (`gemm_space`, the Gluon rule
  `gluon_misfit`); `space_fp8`: the fp8 space;
- `template`: the Triton template (genes, plans, launches, candidate source; a fusable
  epilogue), `kernels`: its Triton kernels, `template_gluon`: the Gluon kernel it runs for
  GLUON=1/2, `template_fp8`: the fp8 e4m3 template;
- `seeds`: starting points (`gemm_seeds`, `wave_seeds`, the Gluon and warp-specialised
  forms of a point); `cublas`: cuBLAS's kernel names read as points (`cublas_seed`);
- `problems/`: gemm_bf16.py and gemm_fp8.py.
"""

from evokernel.search_spaces.gemm.cublas import cublas_seed
from evokernel.search_spaces.gemm.seeds import TAIL_RATE, coop_variant, gemm_seeds, gluon_variant, wave_seeds
from evokernel.search_spaces.gemm.space import (
    ACC_REGISTERS,
    DEFAULTS,
    WARP_SPEC_HANGS,
    gemm_class,
    gemm_space,
    gluon_misfit,
    gluon_warps,
    warp_spec_idle,
    without_idle_genes,
)
from evokernel.search_spaces.gemm.space_fp8 import gemm_fp8_space

__all__ = [
    "gemm_space",
    "gemm_class",
    "gemm_seeds",
    "wave_seeds",
    "cublas_seed",
    "coop_variant",
    "gluon_variant",
    "warp_spec_idle",
    "without_idle_genes",
    "gluon_misfit",
    "gluon_warps",
    "gemm_fp8_space",
    "DEFAULTS",
    "ACC_REGISTERS",
    "WARP_SPEC_HANGS",
    "TAIL_RATE",
]
