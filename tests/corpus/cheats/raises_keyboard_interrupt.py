# problem: matmul_small
# expect: rejected
# reason: exited with code | compile: KeyboardInterrupt
# device: cpu
# class: raises a BaseException that is not an Exception (KeyboardInterrupt) from kernel()
def kernel(a, b):
    raise KeyboardInterrupt
