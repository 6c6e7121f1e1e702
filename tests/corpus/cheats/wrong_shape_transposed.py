# problem: matmul_small
# expect: rejected
# reason: shape
# device: cpu
# class: wrong shape: returns the transposed product (N, M)
def kernel(a, b):
    return (a @ b).T.contiguous()
