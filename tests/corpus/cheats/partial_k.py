# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: skips work: sums over only the first half of K (every value a little off, none zero)
"""Half the reduction: the output has the right scale and no zeros, but is wrong."""


def kernel(a, b):
    k = a.shape[1] // 2
    return (a[:, :k] @ b[:k]) * 2.0
