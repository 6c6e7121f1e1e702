# problem: matmul_small
# expect: rejected
# reason: raised: RuntimeError
# device: cpu
# class: raises an exception from kernel()
def kernel(a, b):
    raise RuntimeError("CANDIDATE-OUTPUT: this kernel does not work")
