"""A Triton GEMM template for Hopper, with a fusable epilogue, as a template over its config.

C[M, N] = epilogue(A[M, K] @ B[K, N]) with fp32 accumulation and C in A's dtype, where the
epilogue is, in this order: + bias[N] (optional), an activation (none, relu, silu, or gelu
with the tanh approximation), + residual[M, N] (optional). The genome (`PARAMS`):

- BM, BN, BK: the tile; GROUP_M: grouped ordering of the tiles (neighbouring programs share
  tiles of A and B in L2); num_warps, num_stages: warps per program, software pipeline depth;
- SPLIT_K: the K loop split over that many programs per tile, partial sums in an fp32
  workspace: parallelism for small M;
- SPLITK_FIXUP: how the partials are summed (with the epilogue). 0: by a second kernel;
  1: in the same kernel, by the last of a tile's programs to finish (`kernels.py`), which saves
  the second launch and a pass over the workspace. No effect without split-K (the space
  rules that point out);
- PERSISTENT: one program per SM walking the tiles (the launch and tail costs of many small
  programs go away); otherwise one program per tile;
- TMA: A and B read through tensor descriptors (Hopper's bulk copy engine) instead of
  pointer loads; needs 16-byte aligned rows (else the call raises, a failure for the search);
- STREAM_K (optional gene, with PERSISTENT and without split-K): the persistent schedule
  takes whole tiles for as many full waves as it can, then deals the K steps of the rest
  (`stream_k_tiles`: the last partial wave plus one full wave, or every tile when there are
  no more than SMs) out evenly over all programs, so no SM idles through a partial last
  wave. A program's segment that covers a whole tile writes C; a partial one goes to the
  program's workspace slot and the tile's last contributor sums the slots in program
  order (the ticket scheme of the split-K fixup, `kernels.py`), so results do not depend on timing;
- TMA_STORE (optional gene, with TMA and without split-K): C written through a tensor
  descriptor, in one bulk store per tile (1) or in two halves of BM x BN/2 (2), which halves
  the shared memory the store stages and leaves it to the pipeline (the epilogue subtiling
  of Triton's persistent-matmul tutorial); 0 writes C by pointers;
- WARP_SPEC: Triton's warp specialisation of the main loop (producer and consumer warps),
  where this Triton supports it on this GPU (a compile error otherwise). Triton 3.6 on Hopper
  builds it from the K loop of a non-persistent 4-warp kernel only: one producer warpgroup
  (TMA loads, 40 registers) and two consumer warpgroups of BM/2 rows (232 registers), 12
  warps in all, cuBLAS's cooperative kernels' structure; with 8 warps or persistent the
  kernel is the same as without (`gemm_space` keeps those out);
- num_ctas: programs per cluster (Hopper thread-block clusters); maxnreg: a cap on
  registers per thread (0: none).

The split-K fixup's protocol (SPLITK_FIXUP=1) is written beside its kernel (`kernels.py`).

`gemm(a, b, bias=, residual=, activation=, **params)` runs one configuration, checking
everything and launching through Triton's JIT on every call (the reference path: 70-230 us
of host time a call on the H200, more than many of these kernels take on the GPU);
`GemmLauncher(params, activation=)(a, b, bias=None, residual=None)` runs the same plan and
kernels, bitwise, with the checks and the JIT's binding done once per input signature and
later calls launched through the compiled kernels' handles (`evokernel.runtime.launch`);
`candidate_source(params, epilogue=...)` writes the candidate module a search evaluates
(a `GemmLauncher` built at import from its literal CONFIG).
Everything runs in Triton's interpreter on the CPU too (where num_ctas, maxnreg and warp
specialisation have no effect), which is how the tests check every path.

>>> src = candidate_source(dict(DEFAULTS, BM=64))
>>> "def kernel(a, b):" in src and '"BM": 64' in src
True
>>> "def kernel(a, b, bias, residual):" in candidate_source(DEFAULTS, bias=True, residual=True, activation="silu")
True
"""

# One module on purpose, though over 400 lines: the genes (PARAMS, OPTIONAL), their checks and launch arithmetic
# (`_plan`), the two launch paths (`gemm`, `GemmLauncher`, sharing `_Launches`) and the candidate source are one
# contract: a launcher must run the very plan `gemm` runs, bitwise, and a gene added to one is a gene of all. The
# device code is apart (kernels.py), as are the Gluon kernel (template_gluon.py) and the space (space.py).

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import triton

from evokernel.judge.candidate import check_params
from evokernel.runtime.launch import KernelLaunch, quick_descriptor
from evokernel.search_spaces.gemm.kernels import _gemm_kernel, _splitk_reduce_kernel

__all__ = [
    "ACTIVATIONS",
    "DEFAULTS",
    "PARAMS",
    "GemmLauncher",
    "candidate_source",
    "gemm",
    "last_compiled",
    "num_sms",
    "stream_k_tiles",
    "torch_source",
]

PARAMS: tuple[str, ...] = (
    "BM",
    "BN",
    "BK",
    "GROUP_M",
    "num_warps",
    "num_stages",
    "SPLIT_K",
    "SPLITK_FIXUP",
    "PERSISTENT",
    "TMA",
    "WARP_SPEC",
    "num_ctas",
    "maxnreg",
)
#: A sensible configuration (Triton's matmul tutorial's Hopper default, no extras).
DEFAULTS: dict[str, int] = {
    "BM": 128,
    "BN": 128,
    "BK": 64,
    "GROUP_M": 8,
    "num_warps": 8,
    "num_stages": 3,
    "SPLIT_K": 1,
    "SPLITK_FIXUP": 0,
    "PERSISTENT": 0,
    "TMA": 0,
    "WARP_SPEC": 0,
    "num_ctas": 1,
    "maxnreg": 0,
}
ACTIVATIONS: dict[str, int] = {"none": 0, "relu": 1, "silu": 2, "gelu_tanh": 3}
#: Genes a genome may carry beyond PARAMS (0 when absent): SWAP_AB, the transposed tile;
#: STREAM_K, the persistent schedule's last tiles split by K steps; TMA_STORE, C written
#: through a tensor descriptor (1) or in two halves (2); BN_TAIL, tiles BN + BN_TAIL wide;
#: A_REG, the tile's columns as 64-wide MMAs sharing each K step's A tile in registers;
#: GLUON, the tile run by the warp-specialised Gluon kernel (`search_spaces/gemm/template_gluon.py`:
#: 1 one or two consumer warpgroups on each tile, 2 two taking turns at tiles, "ping-pong").
OPTIONAL: tuple[str, ...] = ("SWAP_AB", "STREAM_K", "TMA_STORE", "BN_TAIL", "A_REG", "GLUON")


_SMS: dict[int, int] = {}


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of the GPU (4 on the CPU, for the interpreter)."""
    if device.type != "cuda":
        return 4
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def stream_k_tiles(tiles: int, programs: int) -> int:
    """How many of `tiles` output tiles the stream-K phase takes (the rest are whole tiles,
    `programs` at a time): all of them when there are no more tiles than programs (one wave,
    partly idle otherwise: 96 tiles of 128x256 at M=512, N=6144 on 132 SMs), else the last
    partial wave plus one full wave (so each program still gets at least a tile's worth of K
    steps), and none when the tiles fill whole waves.

    >>> stream_k_tiles(96, 132), stream_k_tiles(264, 132), stream_k_tiles(384, 132), stream_k_tiles(20, 132)
    (96, 0, 252, 20)
    """
    if tiles <= programs:
        return tiles
    rest = tiles % programs
    return rest + programs if rest else 0


_COUNTERS: dict[tuple[str, int | None, int], torch.Tensor] = {}


def _raw_stream(index: int | None) -> int:
    """The current CUDA stream's handle on device `index` (torch.cuda.current_stream(index)
    .cuda_stream, without making a Stream object: what Triton's launches read)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is not None and index is not None:
        return get(index)
    return torch.cuda.current_stream(index).cuda_stream


def _tile_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """The split-K fixup's per-tile ticket counters on this device and stream: zeroed once,
    left at zero by every call (the protocol: `kernels.py`)."""
    stream = _raw_stream(device.index) if device.type == "cuda" else 0
    key = (device.type, device.index, stream)
    counters = _COUNTERS.get(key)
    if counters is None or counters.numel() < tiles:
        counters = torch.zeros(max(tiles, 1024), device=device, dtype=torch.int32)
        _COUNTERS[key] = counters
    return counters


def _fits_int32(t: torch.Tensor, rows: int, cols: int) -> bool:
    return (rows * abs(t.stride(0)) + cols * abs(t.stride(1))) < 2**31


def _tma_ok(t: torch.Tensor) -> bool:
    return t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0


_LAST: dict[str, Any] = {"kernel": None}


def last_compiled() -> Any:
    """The compiled kernel `gemm` (or a `GemmLauncher`) launched last (registers: `.n_regs`,
    spills: `.n_spills`), or None (none yet, or the CPU interpreter). For probes: a lookup in
    Triton's kernel cache instead can read a stale entry (one kernel's register count
    reported for others)."""
    return _LAST["kernel"]


#: the main kernel's arguments given per call (then the plan's descriptors), and the reduction's
_TENSOR_ARGS: tuple[str, ...] = ("a_ptr", "b_ptr", "c_ptr", "ws_ptr", "counter_ptr", "bias_ptr", "res_ptr")
_REDUCE_ARGS: tuple[str, ...] = ("ws_ptr", "c_ptr", "bias_ptr", "res_ptr")
_DESCRIPTORS: tuple[str, ...] = ("a_desc", "b_desc", "c_desc", "b2_desc", "c2_desc")


@dataclass(frozen=True)
class _Plan:
    """How one configuration runs on one input signature (shapes, strides, dtypes, devices and
    pointer alignment of A, B, bias and residual): all that `gemm` checks and works out before
    it launches. A call then allocates C (and the workspace), makes its tensors' descriptors
    and launches. `descs`: (kernel argument, tensor 0 A / 1 B / 2 C, block shape);
    `counters`: the tile counters a call takes (0: none, C stands in); `gluon`: the Gluon
    kernel's own plan (`template_gluon.GluonPlan`) when GLUON is set."""

    shape: tuple[int, int]
    dtype: torch.dtype
    device: torch.device
    empty: bool = False
    ws: tuple[int, ...] | None = None
    counters: int = 0
    descs: tuple[tuple[str, int, tuple[int, int]], ...] = ()
    grid: tuple[int, ...] = ()
    static: Mapping[str, Any] = field(default_factory=dict)
    reduce_grid: tuple[int, int] | None = None
    reduce_static: Mapping[str, Any] = field(default_factory=dict)
    gluon: Any = None


def _plan(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    activation: str,
    cfg: Mapping[str, int],
) -> tuple[_Plan, torch.Tensor]:
    """`gemm`'s checks and arithmetic for these inputs at configuration `cfg` (every gene,
    `_genes`), and the C they were made with (the first call's output)."""
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0], f"shapes: {tuple(a.shape)} @ {tuple(b.shape)}"
    assert a.dtype == b.dtype and a.device == b.device, f"{a.dtype}/{a.device} vs {b.dtype}/{b.device}"
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    BM, BN, BK, SPLIT_K, PERSISTENT, TMA = (cfg[k] for k in ("BM", "BN", "BK", "SPLIT_K", "PERSISTENT", "TMA"))
    WARP_SPEC, num_ctas, maxnreg, SWAP_AB, STREAM_K = (
        cfg[k] for k in ("WARP_SPEC", "num_ctas", "maxnreg", "SWAP_AB", "STREAM_K")
    )
    TMA_STORE, BN_TAIL, A_REG, GLUON = cfg["TMA_STORE"], cfg["BN_TAIL"], cfg["A_REG"], cfg["GLUON"]
    if GLUON:
        from evokernel.search_spaces.gemm.space import gluon_misfit  # (the space's rule)

        misfit = gluon_misfit(cfg)
        if misfit:
            raise ValueError(misfit)
        from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

        gplan, c = gluon_gemm.plan_gluon(
            a,
            b,
            bias=bias,
            residual=residual,
            activation=activation,
            BM=BM,
            BN=BN,
            BK=BK,
            GROUP_M=cfg["GROUP_M"],
            num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"],
            PERSISTENT=PERSISTENT,
            EPI_SPLIT=TMA_STORE,
            BN_TAIL=BN_TAIL,
            SWAP_AB=SWAP_AB,
            PINGPONG=int(GLUON == 2),
        )
        return _Plan(
            shape=(c.shape[0], c.shape[1]), dtype=c.dtype, device=c.device, empty=gplan is None, gluon=gplan
        ), c
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return _Plan(shape=(M, N), dtype=a.dtype, device=a.device, empty=True), c
    if bias is not None:
        assert bias.shape == (N,) and bias.is_contiguous(), f"bias must be a contiguous [{N}], got {tuple(bias.shape)}"
    if residual is not None:
        assert residual.shape == (M, N), f"residual must be [{M}, {N}], got {tuple(residual.shape)}"
    if BN_TAIL and not (
        BN_TAIL in (16, 32, 64, 128) and BN_TAIL < BN and SPLIT_K == 1 and not SWAP_AB and not STREAM_K
    ):
        raise ValueError(
            f"BN_TAIL={BN_TAIL}: a tail of 16-128 columns, narrower than BN={BN}, without split-K, swap-AB or stream-K"
        )
    W = BN + BN_TAIL  # the tile's width
    if A_REG and not (W in (128, 192, 256) and SPLIT_K == 1 and not SWAP_AB and not STREAM_K):
        raise ValueError(
            f"A_REG: a tile 128, 192 or 256 columns wide (BN + BN_TAIL = {W}), without split-K, swap-AB or stream-K"
        )
    assert _fits_int32(a, M + BM, K + BK) and _fits_int32(b, K + BK, N + W) and _fits_int32(c, M + BM, N + W), (
        "tensors too large for the template's int32 offsets"
    )
    if TMA and not (_tma_ok(a) and _tma_ok(b)):
        raise ValueError("TMA needs row-major A and B with 16-byte aligned rows and base addresses")
    if TMA_STORE and not (TMA and SPLIT_K == 1):
        raise ValueError("TMA_STORE (C through a tensor descriptor) goes with TMA loads and no split-K")
    if TMA_STORE and not _tma_ok(c):
        raise ValueError("TMA_STORE needs C's rows 16-byte aligned")
    descs: list[tuple[str, int, tuple[int, int]]] = []
    if TMA:
        descs += [("a_desc", 0, (BM, BK)), ("b_desc", 1, (BK, BN))]
        if TMA_STORE:
            descs.append(("c_desc", 2, (BM, BN // 2 if TMA_STORE == 2 else BN)))
        if BN_TAIL or A_REG:  # the tail's (or, with A_REG, every 64-column chunk's) descriptors
            chunk = 64 if A_REG else BN_TAIL
            descs.append(("b2_desc", 1, (BK, chunk)))
            if TMA_STORE:
                descs.append(("c2_desc", 2, (BM, chunk)))
    if STREAM_K and not (PERSISTENT and SPLIT_K == 1 and not WARP_SPEC):
        raise ValueError(
            "STREAM_K is a schedule of the persistent kernel without split-K or warp specialisation "
            "(PERSISTENT=1, SPLIT_K=1, WARP_SPEC=0)"
        )
    if K == 0:  # no K steps to deal out: the whole-tile schedule writes the epilogue of zeros
        STREAM_K = 0
    ws = (SPLIT_K, M, N) if SPLIT_K > 1 else None
    fixup = SPLIT_K > 1 and bool(cfg["SPLITK_FIXUP"])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, W) * SPLIT_K
    counters = tiles // SPLIT_K if fixup else 0
    programs = min(num_sms(a.device), tiles) if PERSISTENT else tiles
    sk_tiles = 0
    if STREAM_K:
        programs = num_sms(a.device)
        sk_tiles = stream_k_tiles(tiles, programs)
        if sk_tiles:  # (whole waves only: no partials, no workspace)
            ws = (programs, 2, BM, BN)
            counters = sk_tiles
    res = residual if residual is not None else c
    launch = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    if num_ctas != 1:
        launch["num_ctas"] = num_ctas
    if maxnreg:
        launch["maxnreg"] = maxnreg
    epi = {"HAS_BIAS": bias is not None, "ACT": ACTIVATIONS[activation], "HAS_RES": residual is not None}
    static: dict[str, Any] = dict(
        M=M,
        N=N,
        K=K,
        stride_am=a.stride(0),
        stride_ak=a.stride(1),
        stride_bk=b.stride(0),
        stride_bn=b.stride(1),
        stride_cm=c.stride(0),
        stride_cn=c.stride(1),
        stride_rm=res.stride(0),
        stride_rn=res.stride(1),
        num_programs=programs,
        BM=BM,
        BN=BN,
        BK=BK,
        GROUP_M=cfg["GROUP_M"],
        SPLIT_K=SPLIT_K,
        FIXUP=fixup,
        PERSISTENT=bool(PERSISTENT),
        TMA=bool(TMA),
        WS_TILES=bool(WARP_SPEC) and bool(PERSISTENT),
        WS_K=bool(WARP_SPEC) and not PERSISTENT,
        EVEN_K=K % BK == 0,
        INPUT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        SWAP_AB=bool(SWAP_AB),
        STREAM_K=bool(STREAM_K),
        sk_tiles=sk_tiles,
        TMA_STORE=int(TMA_STORE),
        BNT=int(BN_TAIL),
        AREG=bool(A_REG),
        HOLD=bool(A_REG) and a.is_cuda,
        **epi,
        **launch,
    )
    given = {name for name, _, _ in descs}
    static.update({name: None for name in _DESCRIPTORS if name not in given})
    reduce_grid = reduce_static = None
    if SPLIT_K > 1 and not fixup:
        RB, RN = 32, 128
        reduce_grid = (triton.cdiv(M, RB), triton.cdiv(N, RN))
        reduce_static = dict(
            M=M,
            N=N,
            stride_cm=c.stride(0),
            stride_cn=c.stride(1),
            stride_rm=res.stride(0),
            stride_rn=res.stride(1),
            SPLIT_K=SPLIT_K,
            BM=RB,
            BN=RN,
            **epi,
            num_warps=4,
        )
    return _Plan(
        shape=(M, N),
        dtype=a.dtype,
        device=a.device,
        ws=ws,
        counters=counters,
        descs=tuple(descs),
        grid=(programs,),
        static=static,
        reduce_grid=reduce_grid,
        reduce_static=reduce_static or {},
    ), c


class _Launches:
    """A plan's kernel launches and its tensors' descriptors. With `fast=False` (`gemm`) every
    launch goes through Triton's JIT and every descriptor through its checking constructor;
    with `fast=True` (`GemmLauncher`) the launches go through the compiled kernels' handles
    after the first call (`evokernel.runtime.launch.KernelLaunch`) and the descriptors are copies of
    the first call's, over this call's tensors (the plan checked their shapes and strides)."""

    __slots__ = ("_make", "_templates", "_ws", "fast", "main", "plan", "reduce")

    def __init__(self, plan: _Plan, *, fast: bool) -> None:
        self.plan = plan
        self.fast = fast
        self.main: KernelLaunch | None = None
        self.reduce: KernelLaunch | None = None
        self._make: Any = None
        self._ws: dict[tuple[int, int], torch.Tensor] = {}
        if plan.gluon is not None:
            from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

            g = plan.gluon
            self.main = KernelLaunch(gluon_gemm._gluon_gemm_kernel, g.grid, g.static, gluon_gemm.GLUON_ARGS, fast=fast)
            self._make = g.descriptor
        elif not plan.empty:
            self.main = KernelLaunch(
                _gemm_kernel, plan.grid, plan.static, _TENSOR_ARGS + tuple(name for name, _, _ in plan.descs), fast=fast
            )
            if plan.reduce_grid is not None:
                self.reduce = KernelLaunch(
                    _splitk_reduce_kernel, plan.reduce_grid, plan.reduce_static, _REDUCE_ARGS, fast=fast
                )
            self._make = self._triton_descriptor
        self._templates: list[Any] = []

    def _direct(
        self,
        c: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        bias: torch.Tensor | None,
        residual: torch.Tensor | None,
    ) -> bool:
        """Launch through the compiled kernels' raw launches (`KernelLaunch.direct`, the
        plan's launches checked in one go), each descriptor given as its tensor (the plan's
        signature fixes their shapes and strides), the split-K workspace kept per stream and
        thread (every call writes all of it before the reduction reads it, in stream order);
        False, launching nothing, where a launch would not go that way (the caller launches as
        usual)."""
        d = self.main.direct(self.reduce) if self.reduce is not None else self.main.direct()
        if d is None:
            return False
        stream, raw = d[0], d[1]
        plan = self.plan
        g = plan.gluon
        if g is not None:
            from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

            tensors = (a, b, c)
            bases = [tensors[src] for src, _, _ in g.descs]
            s = g.slots
            raw(
                stream,
                (
                    bases[s[0]],
                    bases[s[1]],
                    bases[s[2]],
                    bases[s[3]],
                    bases[s[4]],
                    bias if bias is not None else c,
                    residual if residual is not None else c,
                ),
                True,
            )
            _LAST["kernel"] = gluon_gemm.LAST["kernel"] = self.main._handle.compiled
            return True
        ws = c
        if plan.ws is not None:
            key = (stream, threading.get_ident())
            ws = self._ws.get(key)
            if ws is None:
                if len(self._ws) >= 8:
                    self._ws.clear()
                ws = self._ws[key] = torch.empty(plan.ws, device=plan.device, dtype=torch.float32)
        args = self._arguments(c, a, b, ws, bias, residual)
        raw(stream, args, True)
        if len(d) > 2:
            d[2](stream, (ws, c, args[5], args[6]))
        _LAST["kernel"] = self.main._handle.compiled
        return True

    def _arguments(
        self,
        c: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        ws: torch.Tensor,
        bias: torch.Tensor | None,
        residual: torch.Tensor | None,
    ) -> tuple:
        """The Triton kernel's dynamic arguments but its descriptors (a, b, c, the workspace,
        the fixup's counters, bias and residual, C standing in for those not given), then the
        tensor each of the plan's descriptors is over."""
        plan = self.plan
        counters = _tile_counters(plan.device, plan.counters) if plan.counters else c
        tensors = (a, b, c)
        return (
            a,
            b,
            c,
            ws,
            counters,
            bias if bias is not None else c,
            residual if residual is not None else c,
            *[tensors[src] for _, src, _ in plan.descs],
        )

    def _triton_descriptor(self, j: int, t: torch.Tensor) -> Any:
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor.from_tensor(t, list(self.plan.descs[j][2]))

    def descriptor(self, j: int, t: torch.Tensor) -> Any:
        """Descriptor j of the plan over tensor t."""
        if j < len(self._templates):
            return quick_descriptor(self._templates[j], t)
        d = self._make(j, t)
        if self.fast and j == len(self._templates):
            self._templates.append(quick_descriptor(d, None))
        return d

    def __call__(
        self,
        c: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        bias: torch.Tensor | None,
        residual: torch.Tensor | None,
    ) -> torch.Tensor:
        """C = epilogue(a @ b), into the caller's c (of the plan's shape, dtype and device)."""
        plan = self.plan
        if plan.empty:
            return c
        if self.fast and self._direct(c, a, b, bias, residual):
            return c
        if plan.gluon is not None:
            from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

            _LAST["kernel"] = gluon_gemm.launch_gluon(plan.gluon, self.main, self.descriptor, c, a, b, bias, residual)
            return c
        ws = torch.empty(plan.ws, device=plan.device, dtype=torch.float32) if plan.ws is not None else c
        args = self._arguments(c, a, b, ws, bias, residual)
        descs = [self.descriptor(j, t) for j, t in enumerate(args[7:])]
        _LAST["kernel"] = self.main(*args[:7], *descs)
        if self.reduce is not None:
            self.reduce(ws, c, args[5], args[6])
        return c


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    activation: str = "none",
    BM: int,
    BN: int,
    BK: int,
    GROUP_M: int,
    num_warps: int,
    num_stages: int,
    SPLIT_K: int = 1,
    SPLITK_FIXUP: int = 0,
    PERSISTENT: int = 0,
    TMA: int = 0,
    WARP_SPEC: int = 0,
    num_ctas: int = 1,
    maxnreg: int = 0,
    SWAP_AB: int = 0,
    STREAM_K: int = 0,
    TMA_STORE: int = 0,
    BN_TAIL: int = 0,
    A_REG: int = 0,
    GLUON: int = 0,
) -> torch.Tensor:
    """epilogue(a @ b) in a's dtype, with one configuration of the template (`SWAP_AB`: the
    tile computed as B^T A^T, for few tokens; `STREAM_K`: the persistent schedule's last
    tiles split by K steps over the programs; `BN_TAIL`: tiles BN + BN_TAIL wide; `GLUON`:
    the tile run by the warp-specialised Gluon kernel, C stored by TMA whole (TMA_STORE=1)
    or in halves (2); optional genes, see `gemm_space`).

    The reference path: every call checks everything and launches through Triton's JIT.
    `GemmLauncher` runs the same plan and kernels with the checks and the JIT's binding done
    once per input signature (bitwise the same results, a fraction of the host time)."""
    cfg = {
        "BM": BM,
        "BN": BN,
        "BK": BK,
        "GROUP_M": GROUP_M,
        "num_warps": num_warps,
        "num_stages": num_stages,
        "SPLIT_K": SPLIT_K,
        "SPLITK_FIXUP": SPLITK_FIXUP,
        "PERSISTENT": PERSISTENT,
        "TMA": TMA,
        "WARP_SPEC": WARP_SPEC,
        "num_ctas": num_ctas,
        "maxnreg": maxnreg,
        "SWAP_AB": SWAP_AB,
        "STREAM_K": STREAM_K,
        "TMA_STORE": TMA_STORE,
        "BN_TAIL": BN_TAIL,
        "A_REG": A_REG,
        "GLUON": GLUON,
    }
    plan, c = _plan(a, b, bias, residual, activation, cfg)
    return _Launches(plan, fast=False)(c, a, b, bias, residual)


#: the optional genes' defaults (gemm's)
_GENE_DEFAULTS: dict[str, int] = {
    name: p.default
    for name, p in inspect.signature(gemm).parameters.items()
    if name in PARAMS + OPTIONAL and p.default is not inspect.Parameter.empty
}


def _genes(params: Mapping[str, int]) -> dict[str, int]:
    """Every gene of a configuration, the optional ones defaulted as `gemm` defaults them;
    TypeError for a missing or unknown one (as `gemm(**params)` raises)."""
    unknown = set(params) - set(PARAMS + OPTIONAL)
    missing = set(PARAMS) - set(_GENE_DEFAULTS) - set(params)
    if unknown or missing:
        raise TypeError(
            f"a GEMM configuration has the genes {list(PARAMS)} (and optionally {list(OPTIONAL)}); "
            f"unknown: {sorted(unknown)}, missing: {sorted(missing)}"
        )
    return {**_GENE_DEFAULTS, **{k: int(v) for k, v in params.items()}}


def _signature(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None) -> tuple:
    """All a plan depends on, and all Triton specialises a launch on, of a call's inputs:
    shapes, strides, dtypes, devices, and whether each pointer is 16-byte aligned (C, the
    workspace and the counters are fresh allocations, always aligned)."""
    return (
        a.shape,
        a.stride(),
        a.dtype,
        a.get_device(),
        a.data_ptr() % 16 == 0,
        b.shape,
        b.stride(),
        b.dtype,
        b.get_device(),
        b.data_ptr() % 16 == 0,
        None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device(), bias.data_ptr() % 16 == 0),
        None
        if residual is None
        else (residual.shape, residual.stride(), residual.dtype, residual.get_device(), residual.data_ptr() % 16 == 0),
    )


class GemmLauncher:
    """`gemm` at one configuration, for calling again and again at a host cost near
    `torch.matmul`'s: `GemmLauncher(params, activation=...)(a, b, bias=None, residual=None)`.

    The first call for an input signature (`_signature`: shapes, strides, dtypes, devices,
    pointer alignment, which of bias and residual are given) makes `gemm`'s plan, with all of
    its checks (a configuration or an input `gemm` refuses raises here the same error), and
    launches through Triton's JIT; later calls with that signature allocate C and launch the
    compiled kernels directly (`evokernel.runtime.launch`): on Triton 3.6 through the raw C launch,
    each descriptor's CUtensorMap kept per pointer and the split-K workspace per stream and
    thread (one buffer each, held by the launcher), elsewhere through the compiled kernel's
    launcher with the first call's descriptors copied over this call's tensors. The results are bitwise `gemm`'s. Where
    no compiled kernel can be launched directly (Triton's CPU interpreter, another Triton),
    every call goes through the JIT as `gemm` does. `stats()` counts plans and launches.

    >>> import torch
    >>> run = GemmLauncher(dict(DEFAULTS, BM=16, BN=32, BK=32), activation="relu")
    >>> run.stats()
    {'plans': 0, 'jit_launches': 0, 'fast_launches': 0}
    >>> run(torch.zeros(0, 8), torch.zeros(8, 8)).shape  # (no rows: nothing to launch)
    torch.Size([0, 8])
    >>> run.stats()
    {'plans': 1, 'jit_launches': 0, 'fast_launches': 0}
    """

    def __init__(self, params: Mapping[str, int], *, activation: str = "none") -> None:
        self.params = dict(params)
        self.activation = activation
        self._cfg = _genes(params)
        self._plans: dict[tuple, _Launches] = {}

    def __call__(
        self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        key = _signature(a, b, bias, residual)
        launches = self._plans.get(key)
        if launches is None:
            plan, c = _plan(a, b, bias, residual, self.activation, self._cfg)
            launches = _Launches(plan, fast=True)
            out = launches(c, a, b, bias, residual)
            self._plans[key] = launches  # (only once a call went through)
            return out
        plan = launches.plan
        return launches(torch.empty(plan.shape, dtype=plan.dtype, device=plan.device), a, b, bias, residual)

    def stats(self) -> dict[str, int]:
        """Plans made, and launches through the JIT and through the compiled handles."""
        runs = [x for p in self._plans.values() for x in (p.main, p.reduce) if x is not None]
        return {
            "plans": len(self._plans),
            "jit_launches": sum(x.jit_calls for x in runs),
            "fast_launches": sum(x.fast_calls for x in runs),
        }


_CANDIDATE = '''"""Candidate: the Hopper GEMM template at one configuration (generated)."""

from evokernel.search_spaces.gemm.template import GemmLauncher


CONFIG = {config}

# checked and planned once per input signature, then launched through the compiled kernel
_gemm = GemmLauncher(CONFIG{launcher})


def kernel({args}):
    return _gemm({call})
'''


def candidate_source(
    params: Mapping[str, int], *, bias: bool = False, residual: bool = False, activation: str = "none"
) -> str:
    """The text of a candidate module running the template at `params` (a `GemmLauncher`
    built at import from its literal `CONFIG`, which the evaluator binds a genome into), with
    the problem's epilogue (its inputs are a, b, then bias and residual where present)."""
    check_params(params, PARAMS, optional=OPTIONAL)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    args = ["a", "b"] + (["bias"] if bias else []) + (["residual"] if residual else [])
    call = ["a", "b"] + (["bias=bias"] if bias else []) + (["residual=residual"] if residual else [])
    launcher = f", activation={activation!r}" if activation != "none" else ""
    config = ", ".join(f'"{k}": {int(params[k])}' for k in sorted(params))
    return _CANDIDATE.format(config="{" + config + "}", args=", ".join(args), call=", ".join(call), launcher=launcher)


_TORCH = '''"""Baseline: torch.matmul (cuBLAS), then the epilogue in eager torch (generated)."""

import torch
import torch.nn.functional as F


def kernel({args}):
    x = torch.matmul(a, b)
{body}    return x
'''


def torch_source(*, bias: bool = False, residual: bool = False, activation: str = "none") -> str:
    """The baseline candidate a user would otherwise run: cuBLAS through torch.matmul, and
    the epilogue as separate eager torch ops (one kernel each).

    >>> print(torch_source(bias=True, activation="silu").split("def ")[1].strip())
    kernel(a, b, bias):
        x = torch.matmul(a, b)
        x = x + bias
        x = F.silu(x)
        return x
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    args = ["a", "b"] + (["bias"] if bias else []) + (["residual"] if residual else [])
    body = "    x = x + bias\n" if bias else ""
    body += {
        "none": "",
        "relu": "    x = torch.relu(x)\n",
        "silu": "    x = F.silu(x)\n",
        "gelu_tanh": '    x = F.gelu(x, approximate="tanh")\n',
    }[activation]
    body += "    x = x + residual\n" if residual else ""
    return _TORCH.format(args=", ".join(args), body=body)
