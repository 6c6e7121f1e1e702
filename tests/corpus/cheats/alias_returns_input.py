# problem: softmax_small
# expect: rejected
# reason: shares memory with an input
# device: cpu
# class: output aliasing an input: returns the input tensor itself
def kernel(x):
    return x
