# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: writes files of 128 MiB into its own folder, /tmp and /dev/shm (each file under the 1 GiB file-size limit) until each place refuses; raises if more than 1.25 GiB got written in all (the sandbox's total cap: its folder and /tmp share 1 GiB, /dev/shm 64 MiB)
"""A file-size limit alone let a candidate write 3 GiB in three files of 1 GiB. It stops
as soon as it is past the cap, and its files go with its folder."""

import os

import torch

CHUNK = 8 << 20
LIMIT = int(1.25 * (1 << 30))


def _flood() -> int:
    total, block = 0, b"\0" * CHUNK
    for place in (os.getcwd(), "/tmp", "/dev/shm"):
        for i in range(12):
            try:
                with open(os.path.join(place, f"flood-{i}"), "wb") as f:
                    for _ in range((128 << 20) // CHUNK):
                        f.write(block)
                        f.flush()
                        total += CHUNK
                        if total > LIMIT:
                            return total
            except OSError:
                break
    return total


_WRITTEN = _flood()


def kernel(a, b):
    if _WRITTEN > LIMIT:
        raise RuntimeError(f"wrote {_WRITTEN >> 20} MiB")
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
