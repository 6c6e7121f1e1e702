# problem: matmul_small
# expect: rejected
# reason: shape
# device: cpu
# class: wrong shape that broadcasts: returns only the first row (1, N), which copy_ would spread over the output
def kernel(a, b):
    return a[:1] @ b
