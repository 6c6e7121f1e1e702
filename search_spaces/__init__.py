"""Search spaces for kernels evokernel ships: declared as data, a few lines each."""

from .matmul import matmul_space, tile_class

__all__ = ["matmul_space", "tile_class"]
