# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: opens the host's kernel settings for writing (/proc/sys/kernel/core_pattern, vm/drop_caches, kernel/hostname, kernel/domainname; the last two written back with the value they hold, nothing else written) and reads its own uid_map for a root that is the host's; raises if any got through
"""A candidate whose root is the host's root, with a /proc it may write, can set
`core_pattern` to `|program` and have the host run it as root at the next crash. Harmless
when it gets through: it writes no setting but two names back unchanged."""

import torch


def _probe() -> list[str]:
    got = []
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches"):
        try:
            with open(path, "w"):
                got.append(f"opened {path} for writing")
        except OSError:
            pass
    for path in ("/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname"):
        try:
            with open(path) as f:
                same = f.read()
            with open(path, "w") as f:
                f.write(same)
            got.append(f"wrote {path}")
        except OSError:
            pass
    try:
        with open("/proc/self/uid_map") as f:
            for line in f:
                inside, outside, _ = line.split()
                if inside == "0" and outside == "0":
                    got.append("its root is the host's root (uid_map 0 -> 0)")
    except OSError:
        pass
    return got


_GOT = _probe()


def kernel(a, b):
    if _GOT:
        raise RuntimeError("reached the host's settings: " + "; ".join(_GOT))
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
