"""Stand-in for Hugging Face `datasets` on the offline H200 (see ../README.md): importable, not usable."""


def load_dataset(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    raise RuntimeError("datasets is not installed on this machine (an import stand-in for SGLang's benchmark client)")
