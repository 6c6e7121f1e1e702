# problem: matmul_large
# expect: rejected
# reason: timed | unjoined work
# device: cuda
# class: joins its side stream back for the checked calls, not for the timed ones, so the work finishes after the timed region (where a graph captures one of the unjoined calls, the capture fails: on an H100 with its fewer rotating input sets, session 27)
"""The product always runs on a side stream. A checked call (an input set seen for the first
time, or again right after itself, or after a long absence) joins the side stream back to
the current stream; a call on an input set that came back after 2 to 5 other calls (the
timing loop rotating its sets) does not, so CUDA events on the current stream time only the
launch while the product runs on past the end event. Either a timed output handed over for
checking is read before it is written, or the device-synchronised wall time gives the
escape away: the reason names the timed calls; or, where the judge's CUDA graph captures one
of the unjoined calls, the capture fails ("capturing stream has unjoined work")."""

import torch

_state = {"calls": 0, "last": {}, "side": None}


def kernel(a, b):
    _state["calls"] += 1
    key = (a.data_ptr(), b.data_ptr())
    last = _state["last"].get(key)
    _state["last"][key] = _state["calls"]
    rotating = last is not None and 2 <= _state["calls"] - last <= 5
    if _state["side"] is None:
        _state["side"] = torch.cuda.Stream(device=a.device)
    side = _state["side"]
    current = torch.cuda.current_stream(a.device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        out = torch.matmul(a, b)
    if not rotating:
        current.wait_stream(side)
        out.record_stream(current)
    return out
