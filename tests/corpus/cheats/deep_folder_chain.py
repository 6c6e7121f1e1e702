# problem: matmul_small
# expect: rejected
# reason: raised: RuntimeError
# device: cpu
# class: makes a 20,000-deep chain of folders in its own folder (a recursive rmtree of it raises RecursionError; its paths pass PATH_MAX), the last ones without permissions, then raises: the judge must still give a verdict and remove the folder
import os

DEPTH = 20_000


def _chain() -> int:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEPTH):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as f:
            f.write("bottom")
        os.chmod(fd, 0o000)  # the deepest folder: no permissions at all
        return DEPTH
    finally:
        os.close(fd)


MADE = _chain()


def kernel(a, b):
    raise RuntimeError(f"made a folder chain {MADE} deep")
