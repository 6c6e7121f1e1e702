"""The plain Triton matmul family: its space (`space`), its template (`template`) and its
problem (`problems/matmul_bf16.py`)."""

from evokernel.search_spaces.matmul.space import matmul_space, tile_class

__all__ = ["matmul_space", "tile_class"]
