"""The attention family: prefill (`template_prefill`) and decode (`template_decode`), both
spaces in `space`, and their problems (`problems/attention_prefill_bf16.py`,
`problems/attention_decode_bf16.py`). One folder, not two: the two spaces share their
register and flag rules (`space`), and both templates run the same online softmax (decode
as a split-KV, flash-decoding kernel over a paged KV cache)."""

from evokernel.search_spaces.attention.space import (
    ATTENTION_DEFAULTS,
    DECODE_DEFAULTS,
    DECODE_TILE_REGISTERS,
    TILE_REGISTERS,
    attention_class,
    attention_space,
    decode_class,
    decode_space,
    prefill_gluon_class,
    prefill_gluon_space,
)

__all__ = [
    "attention_space",
    "attention_class",
    "decode_space",
    "decode_class",
    "prefill_gluon_space",
    "prefill_gluon_class",
    "ATTENTION_DEFAULTS",
    "DECODE_DEFAULTS",
    "TILE_REGISTERS",
    "DECODE_TILE_REGISTERS",
]
