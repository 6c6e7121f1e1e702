# problem: matmul_large
# expect: rejected
# reason: wrong result | unjoined work
# device: cuda
# class: launches the work on a side stream and never joins it back to the current stream (the output is read before it is written); whether the check sees it unwritten or the graph capture refuses the unjoined stream first is a race: both reject it
import torch

_side = []


def kernel(a, b):
    if not _side:
        _side.append(torch.cuda.Stream(device=a.device))
    side = _side[0]
    side.wait_stream(torch.cuda.current_stream(a.device))  # the inputs are ready; the output will not be
    with torch.cuda.stream(side):
        out = torch.matmul(a, b)
    return out
