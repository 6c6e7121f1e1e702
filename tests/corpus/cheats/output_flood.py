# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: floods its output: 1 GB to stdout at import (the log must be cut after a few MB, with a note), and tries a 2 GB file in its own folder (refused past the file-size limit); raises if that file got written whole
import os

import torch

_CHUNK = b"x" * (1 << 20)


def _flood() -> bool:
    for _ in range(1024):
        try:
            os.write(1, _CHUNK)
        except OSError:
            break
    try:
        with open("big.bin", "wb") as f:
            for _ in range(2048):
                f.write(_CHUNK)
        return True
    except OSError:  # EFBIG: past RLIMIT_FSIZE
        return False
    finally:
        if os.path.exists("big.bin"):
            os.unlink("big.bin")


_WROTE_ALL = _flood()


def kernel(a, b):
    if _WROTE_ALL:
        raise RuntimeError("wrote a 2 GB file")
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
