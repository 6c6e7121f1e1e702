"""Stand-in for `soundfile` on the offline H200 (see ../README.md): importable, not usable."""


def _missing(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise RuntimeError("soundfile is not installed on this machine (an import stand-in for SGLang's HTTP server)")


read = write = info = blocks = SoundFile = _missing
