"""The timing harness's input perturbation on fp8 inputs: it works on their bytes (gathers
and index writes on float8 are not kernels every build has), reports the values exactly,
and the gate's replay of a report rebuilds the very inputs the timed call saw."""

from __future__ import annotations

import torch

from evokernel.judge.timing import Perturber


def test_fp8_perturbation_round_trip():
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(64, 32, generator=g) * 3).to(torch.float8_e4m3fn)
    b = torch.randn(16, 8, generator=g).to(torch.bfloat16)
    pristine = [a.clone(), b.clone()]
    p = Perturber([[a, b]], 4, seed=1, batch=3)
    rec = p.apply(0)
    changed = a.view(torch.uint8) != pristine[0].view(torch.uint8)
    assert int(changed.sum()) <= 4 and a.dtype == torch.float8_e4m3fn
    (report,) = Perturber.report_many([rec])
    # the report's values are the fp8 values themselves, so the gate can rebuild the call's inputs
    rebuilt = pristine[0].clone()
    j, positions, values = next(r for r in report if r[0] == 0)
    rebuilt.view(torch.uint8).view(-1)[torch.tensor(positions)] = (
        torch.tensor(values, dtype=torch.float64).to(torch.float8_e4m3fn).view(torch.uint8)
    )
    assert torch.equal(rebuilt.view(torch.uint8), a.view(torch.uint8))
    p.restore(rec, 0)
    assert torch.equal(a.view(torch.uint8), pristine[0].view(torch.uint8)) and torch.equal(b, pristine[1])
