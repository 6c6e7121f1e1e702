# problem: matmul_small
# expect: rejected
# reason: timeout
# device: cpu
# class: hangs in kernel(): a busy infinite loop that never returns
def kernel(a, b):
    while True:
        pass
