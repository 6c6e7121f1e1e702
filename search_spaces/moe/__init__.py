"""The fused-MoE family: its space (`space`), its Triton template (`template`), SGLang's
own configs as baselines (`sglang`, with the files it ships in `sglang_configs/`) and its
problems (`problems/moe_bf16.py`, `problems/moe_fp8.py`)."""

from evokernel.search_spaces.moe.space import (
    MOE_MODELS,
    distinct_experts,
    moe_shared_space,
    moe_space,
    sglang_config,
    shared_params,
)

__all__ = ["moe_space", "moe_shared_space", "shared_params", "sglang_config", "distinct_experts", "MOE_MODELS"]
