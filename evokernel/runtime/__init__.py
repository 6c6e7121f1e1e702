"""What generated kernels use at run time: launching compiled Triton kernels cheaply."""
