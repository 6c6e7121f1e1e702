# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: computes in float16 (inputs rounded to half) and returns float32: too imprecise for the tolerance
def kernel(a, b):
    return (a.half() @ b.half()).float()
