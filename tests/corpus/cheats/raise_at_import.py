# problem: matmul_small
# expect: rejected
# reason: import: RuntimeError
# device: cpu
# class: crashes at import: raises at module level
raise RuntimeError("CANDIDATE-OUTPUT: broken at import")


def kernel(a, b):
    return a @ b
