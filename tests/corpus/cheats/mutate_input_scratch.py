# problem: matmul_small
# expect: rejected
# reason: input 0 was modified
# device: cpu
# class: mutates an input: uses A as scratch (scales it by 3 and back), leaving last-bit changes behind
"""Right answer, but A is used as scratch space: x * 3 / 3 is not always x in float32."""


def kernel(a, b):
    a.mul_(3.0)
    c = (a @ b) / 3.0
    a.div_(3.0)
    return c
