"""Triton's compiled host-side helpers, built once per judge instead of once per candidate.

Every candidate runs with a Triton cache of its own (nothing one candidate writes may reach
another). Without help, each of them would then rebuild with the system C compiler the
driver's utilities module and the launcher of each kernel signature, which together cost
more than half a second per candidate. Both are keyed by their C source alone, so they are
the same for every configuration of a template.

`SeedCache` keeps those entries, harvested only from candidates the user's own template
rendered (trusted code), in a folder every candidate copies into its own cache when it
starts. A candidate whose source came from a genome (an LLM, a user file) can read the
seed but never feeds it.

>>> import os, tempfile
>>> cand = tempfile.mkdtemp()
>>> os.makedirs(os.path.join(cand, "triton-cache", "abc"))
>>> open(os.path.join(cand, "triton-cache", "abc", "cuda_utils.so"), "w").close()
>>> os.makedirs(os.path.join(cand, "triton-cache", "def"))
>>> open(os.path.join(cand, "triton-cache", "def", "matmul_kernel.cubin"), "w").close()
>>> seed = SeedCache()
>>> seed.harvest(cand)
1
>>> sorted(os.listdir(seed.path))
['abc']
>>> seed.close()
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import weakref

from evokernel.judge.cleanup import remove_tree

__all__ = ["SeedCache", "HELPER_PREFIXES"]

#: File names of the host-side helper modules Triton builds with the C compiler.
HELPER_PREFIXES = ("cuda_utils", "hip_utils", "__triton_launcher")


def _is_helper_entry(path: str) -> bool:
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return bool(names) and all(n.startswith(HELPER_PREFIXES) for n in names)


class SeedCache:
    """A folder of Triton cache entries (one sub-folder per key) readable by every candidate."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or tempfile.mkdtemp(prefix="evokernel-toolchain-")
        os.chmod(self.path, 0o755)  # candidates may run as users of their own: read, never write
        self.harvested = 0
        self._owned = path is None
        self._finalizer = weakref.finalize(self, remove_tree, self.path) if self._owned else None

    def harvest(self, work_dir: str) -> int:
        """Copy the helper entries a trusted candidate built into the seed; returns how many
        were new. Each entry appears at once and whole (copied aside, then renamed)."""
        cache = os.path.join(work_dir, "triton-cache")
        try:
            entries = [e for e in os.scandir(cache) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return 0
        new = 0
        for entry in entries:
            target = os.path.join(self.path, entry.name)
            if os.path.exists(target) or not _is_helper_entry(entry.path):
                continue
            tmp = tempfile.mkdtemp(prefix=".incoming-", dir=self.path)
            try:
                for name in os.listdir(entry.path):
                    src = os.path.join(entry.path, name)
                    if not os.path.isfile(src) or os.path.islink(src):
                        raise OSError(f"not a plain file: {src}")
                    shutil.copyfile(src, os.path.join(tmp, name))
                    os.chmod(os.path.join(tmp, name), stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
                os.chmod(tmp, 0o755)
                os.rename(tmp, target)
                new += 1
            except OSError:
                remove_tree(tmp)
        self.harvested += new
        return new

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
