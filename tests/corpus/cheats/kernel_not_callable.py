# problem: matmul_small
# expect: rejected
# reason: defines no callable `kernel`
# device: cpu
# class: defines `kernel` as something that is not callable
kernel = "a @ b"
