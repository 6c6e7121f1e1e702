# problem: matmul_small
# expect: rejected
# reason: SyntaxError
# device: cpu
# class: syntax error: the module does not parse
def kernel(a, b)
    return a @ b
