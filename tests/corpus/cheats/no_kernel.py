# problem: matmul_small
# expect: rejected
# reason: defines no callable `kernel`
# device: cpu
# class: defines no kernel (a misspelt name)
def kernal(a, b):
    return a @ b
