# problem: matmul_small
# expect: rejected
# reason: dtype
# device: cpu
# class: wrong dtype: returns the (exact) product in float64 instead of float32
def kernel(a, b):
    return a.double() @ b.double()
