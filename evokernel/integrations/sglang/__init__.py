"""SGLang: the plugin that swaps kernels in, the engine driver, config export."""
