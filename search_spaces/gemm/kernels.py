"""The Triton kernels of the Hopper GEMM template (`template.py`: its genes, plans,
launches and candidate source): device code only, one tile loop for every schedule.

`_gemm_kernel` runs one configuration: a program per tile (or, PERSISTENT, one per SM
walking the tiles, with STREAM_K the last tiles' K steps dealt out evenly, `_stream_k`),
each tile's K loop (`_acc`, `_acc_tail` for a BN_TAIL, `_acc_areg` for A_REG) through
pointer loads or TMA descriptors, C stored by pointers or by TMA (`_store`), and with
SPLIT_K its partials summed by `_splitk_reduce_kernel` (a second launch) or in the kernel
(`_fixup`, SPLITK_FIXUP=1).

The split-K fixup (SPLITK_FIXUP=1). Each program stores its fp32 partial tile in the
workspace, then (after a barrier, so every thread's stores precede it) takes a ticket on its
output tile's int32 counter with an acquire-release atomic add. Nobody waits: the program
that draws the last ticket (SPLIT_K - 1) knows every other partial is written and visible
(their releases precede its acquire), reads them past L1 (`.cg`, as L1 is not coherent
across SMs), its own included, in split order and by column chunks of at most 64 (so the
result is bitwise that of the second kernel's fixed-order sum, and a second whole fp32 tile
never sits in registers beside the first), applies the epilogue, writes C, and
sets the counter back to 0. The counters live in one zeroed buffer per device and stream,
grown when a call needs more and never cleared again: every call leaves each counter it
used at 0 (all of a tile's tickets are drawn before its last program resets it), and the
next call on the same stream starts after this kernel ends, so it finds them at 0. Calls on
different streams use different buffers; a kernel killed half way (a fault) leaves counters
set, but a fault loses the CUDA context and the buffer with it.
"""

# One module on purpose, though over 400 lines: the `@triton.jit` functions are one kernel, `_gemm_kernel`,
# specialised by its constexpr genes; every schedule goes through the same tile helpers (`_tile`, `_acc*`, `_store`,
# `_epilogue`), so they read best side by side.

from __future__ import annotations

import triton
import triton.language as tl

from evokernel.search_spaces.matmul.template import grouped_tile

__all__ = ["_gemm_kernel", "_splitk_reduce_kernel"]


@triton.jit
def _epilogue(
    acc,
    offs_m,
    offs_n,
    M,
    N,
    bias_ptr,
    res_ptr,
    stride_rm,
    stride_rn,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
):
    """acc (fp32) -> act(acc + bias) + residual, still fp32."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:
        acc = acc * tl.sigmoid(acc)
    elif ACT == 3:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), tanh(y) = 2 sigmoid(2y) - 1
        inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc * tl.sigmoid(2.0 * inner)
    if HAS_RES:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn, mask=mask, other=0.0)
        acc = acc + res.to(tl.float32)
    return acc


@triton.jit
def _fixup(
    ws_ptr,
    counter_ptr,
    c_ptr,
    bias_ptr,
    res_ptr,
    pid_m,
    pid_n,
    M,
    N,
    stride_cm,
    stride_cn,
    stride_rm,
    stride_rn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    SPLIT_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
):
    """After this split's partial is stored in the workspace: take a ticket on the tile's
    counter; the last of its SPLIT_K programs sums the partials in split order (as the second
    kernel does), by column chunks of at most 64 (a whole-tile sum beside a loaded partial
    spills at 128x256), applies the epilogue, writes C and resets the counter (the module
    docstring says why that is safe)."""
    tl.debug_barrier()  # all threads' partial stores come before the release of the ticket
    ticket = tl.atomic_add(counter_ptr, 1, sem="acq_rel")
    if ticket == SPLIT_K - 1:
        CN: tl.constexpr = BN if BN < 64 else 64
        offs_m = pid_m * BM + tl.arange(0, BM)
        plane = tl.cast(M, tl.int64) * N  # one split's partials
        for j in tl.static_range(BN // CN):
            offs_n = pid_n * BN + j * CN + tl.arange(0, CN)
            mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            w_ptrs = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
            total = tl.zeros((BM, CN), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(w_ptrs + s * plane, mask=mask, other=0.0, cache_modifier=".cg")
            total = _epilogue(
                total, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES
            )
            tl.store(
                c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                total.to(c_ptr.dtype.element_ty),
                mask=mask,
            )
        tl.store(counter_ptr, 0)


@triton.jit
def _a_tile(
    a_ptr,
    a_desc,
    m0,
    kt,
    M,
    K,
    stride_am,
    stride_ak,
    BM: tl.constexpr,
    BK: tl.constexpr,
    TMA: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """A's rows [m0, m0 + BM) at K step kt: through its descriptor, or by pointers whose rows
    are computed here, inside the K loop (why: _k_step)."""
    if TMA:
        return a_desc.load([m0, kt * BK])
    rows = m0 + tl.arange(0, BM)
    ks = kt * BK + tl.arange(0, BK)
    ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    if EVEN_K:
        return tl.load(ptrs, mask=rows[:, None] < M, other=0.0)
    return tl.load(ptrs, mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)


@triton.jit
def _b_tile(
    b_ptr,
    b_desc,
    kt,
    n0,
    N,
    K,
    stride_bk,
    stride_bn,
    BK: tl.constexpr,
    BN: tl.constexpr,
    TMA: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """B's columns [n0, n0 + BN) at K step kt (b_desc's block is BK x BN)."""
    if TMA:
        return b_desc.load([kt * BK, n0])
    cols = n0 + tl.arange(0, BN)
    ks = kt * BK + tl.arange(0, BK)
    ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    if EVEN_K:
        return tl.load(ptrs, mask=cols[None, :] < N, other=0.0)
    return tl.load(ptrs, mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)


@triton.jit
def _k_step(
    acc,
    pid_m,
    pid_n,
    kt,
    a_ptr,
    b_ptr,
    a_desc,
    b_desc,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    TMA: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    SWAP_AB: tl.constexpr,
):
    """acc (BN x BM with SWAP_AB) plus the product of K step kt of output tile (pid_m, pid_n).

    Without TMA, the tile's rows and columns are computed in the K loop (`_a_tile`,
    `_b_tile`): the persistent kernel's flattened loop would otherwise carry them from tile to
    tile as loop values of unknown contiguity, and B (contiguous along N) then loads element by element, unpipelined
    (seen in the sm_90 TTGIR; the persistent form without TMA ran 0.29 ms against 0.032
    not persistent on the H200)."""
    a = _a_tile(a_ptr, a_desc, pid_m * BM, kt, M, K, stride_am, stride_ak, BM, BK, TMA, EVEN_K)
    b = _b_tile(b_ptr, b_desc, kt, pid_n * BN, N, K, stride_bk, stride_bn, BK, BN, TMA, EVEN_K)
    # (one return after the branch: Triton's code generator went on past a `return` inside
    # a constexpr `if` and type-checked the other dot against the swapped accumulator, so
    # every swap-AB kernel failed to compile, while the interpreter ran it)
    if SWAP_AB:
        acc = tl.dot(tl.trans(b), tl.trans(a), acc, input_precision=INPUT_PRECISION)
    else:
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def _acc(
    pid_m,
    pid_n,
    k_lo,
    k_hi,
    a_ptr,
    b_ptr,
    a_desc,
    b_desc,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    TMA: tl.constexpr,
    WS_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    SWAP_AB: tl.constexpr,
):
    """The fp32 sum over K steps [k_lo, k_hi) of the output tile (pid_m, pid_n).

    SWAP_AB computes the tile transposed, C^T = B^T A^T: Hopper's warpgroup MMA takes 64 rows
    or more on its first operand and as few as 8 columns on its second, so with few tokens (a
    BM of 16-64) the weights' BN side fills the MMA's rows and the tokens its columns, instead
    of padding BM up to 64 (the swap-AB of CUTLASS-style small-batch GEMMs). The accumulator
    is transposed back before it is returned."""
    if SWAP_AB:
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in tl.range(k_lo, k_hi, warp_specialize=WS_K):
        acc = _k_step(
            acc,
            pid_m,
            pid_n,
            kt,
            a_ptr,
            b_ptr,
            a_desc,
            b_desc,
            M,
            N,
            K,
            stride_am,
            stride_ak,
            stride_bk,
            stride_bn,
            BM,
            BN,
            BK,
            TMA,
            EVEN_K,
            INPUT_PRECISION,
            SWAP_AB,
        )
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _acc_tail(
    pid_m,
    pid_n,
    k_tiles,
    a_ptr,
    b_ptr,
    a_desc,
    b_desc,
    b2_desc,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BNT: tl.constexpr,
    BK: tl.constexpr,
    TMA: tl.constexpr,
    WS_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """The fp32 sums of a BM x (BN + BNT) tile over all of K, as two accumulators (BM x BN and
    BM x BNT) fed by one A tile per K step: a tile width that is not a power of two (96, 160,
    192), which Triton's blocks cannot be but Hopper's MMA can (its N is any multiple of 8).
    The width picks how many tiles there are, so it picks how full the last wave is: N=6144
    in 192-wide tiles at M=512 is 128 tiles of 128 rows on 132 SMs, where 256-wide ones are
    96 (36 SMs idle) and 128-wide ones 192 (1.45 waves)."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    acc2 = tl.zeros((BM, BNT), dtype=tl.float32)
    m0 = pid_m * BM
    n0 = pid_n * (BN + BNT)
    for kt in tl.range(0, k_tiles, warp_specialize=WS_K):
        a = _a_tile(a_ptr, a_desc, m0, kt, M, K, stride_am, stride_ak, BM, BK, TMA, EVEN_K)
        b = _b_tile(b_ptr, b_desc, kt, n0, N, K, stride_bk, stride_bn, BK, BN, TMA, EVEN_K)
        b2 = _b_tile(b_ptr, b2_desc, kt, n0 + BN, N, K, stride_bk, stride_bn, BK, BNT, TMA, EVEN_K)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        acc2 = tl.dot(a, b2, acc2, input_precision=INPUT_PRECISION)
    return acc, acc2


@triton.jit
def _hold(a):
    """`a` as it is, computed in registers: an identity Triton cannot fold away, so the MMAs
    that use it take A from registers (loaded from shared memory once) instead of each
    reading the A tile from shared memory again."""
    if a.dtype.primitive_bitwidth == 16:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [a], dtype=a.dtype, is_pure=True, pack=2)
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [a], dtype=a.dtype, is_pure=True, pack=1)


@triton.jit
def _acc_areg(
    pid_m,
    pid_n,
    k_tiles,
    a_ptr,
    b_ptr,
    a_desc,
    b64_desc,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    BM: tl.constexpr,
    W: tl.constexpr,
    BK: tl.constexpr,
    TMA: tl.constexpr,
    WS_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    HOLD: tl.constexpr,
):
    """The fp32 sums of a BM x W tile (W = 128, 192 or 256) as W/64 accumulators of 64 columns,
    each K step's A tile held in registers and shared by their MMAs (A_REG=1). Two MMAs of
    different widths (the BN_TAIL form) each read A from shared memory, and Triton gives
    them different register layouts, so A cannot be shared there; 64-wide ones share one
    (the sm_90 TTGIR: one shared-memory load of A per K step). Per 128x192 K step of 64, the
    shared-memory reads go from ~80 KB (two MMAs reading A) to ~64 KB, what a single
    192-wide MMA would read. `HOLD` (on the GPU) keeps A in registers; the interpreter has no
    inline assembly and needs no such hint."""
    NACC: tl.constexpr = W // 64
    acc0 = tl.zeros((BM, 64), dtype=tl.float32)
    acc1 = tl.zeros((BM, 64), dtype=tl.float32)
    acc2 = tl.zeros((BM, 64), dtype=tl.float32)
    acc3 = tl.zeros((BM, 64), dtype=tl.float32)
    m0 = pid_m * BM
    n0 = pid_n * W
    for kt in tl.range(0, k_tiles, warp_specialize=WS_K):
        a = _a_tile(a_ptr, a_desc, m0, kt, M, K, stride_am, stride_ak, BM, BK, TMA, EVEN_K)
        if HOLD:
            a = _hold(a)
        acc0 = tl.dot(
            a,
            _b_tile(b_ptr, b64_desc, kt, n0, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K),
            acc0,
            input_precision=INPUT_PRECISION,
        )
        acc1 = tl.dot(
            a,
            _b_tile(b_ptr, b64_desc, kt, n0 + 64, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K),
            acc1,
            input_precision=INPUT_PRECISION,
        )
        if NACC > 2:
            acc2 = tl.dot(
                a,
                _b_tile(b_ptr, b64_desc, kt, n0 + 128, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K),
                acc2,
                input_precision=INPUT_PRECISION,
            )
        if NACC > 3:
            acc3 = tl.dot(
                a,
                _b_tile(b_ptr, b64_desc, kt, n0 + 192, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K),
                acc3,
                input_precision=INPUT_PRECISION,
            )
    return acc0, acc1, acc2, acc3


@triton.jit
def _store(
    acc,
    m0,
    n0,
    c_ptr,
    c_desc,
    bias_ptr,
    res_ptr,
    M,
    N,
    stride_cm,
    stride_cn,
    stride_rm,
    stride_rn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
    TMA_STORE: tl.constexpr,
):
    """C[m0:m0+BM, n0:n0+BN] = epilogue(acc): by pointers (TMA_STORE=0), through C's tensor
    descriptor in one bulk store (1), or in two BM x BN/2 halves (2: half the shared-memory
    staging of the store, the epilogue subtiling of Triton's persistent-matmul tutorial)."""
    offs_m = m0 + tl.arange(0, BM)
    offs_n = n0 + tl.arange(0, BN)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
    if TMA_STORE == 2:
        halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([m0, n0], left.to(c_desc.dtype))
        c_desc.store([m0, n0 + BN // 2], right.to(c_desc.dtype))
    elif TMA_STORE == 1:
        c_desc.store([m0, n0], acc.to(c_desc.dtype))
    else:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(
            c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask
        )


@triton.jit
def _tile(
    tile,
    a_ptr,
    b_ptr,
    c_ptr,
    a_desc,
    b_desc,
    c_desc,
    ws_ptr,
    counter_ptr,
    bias_ptr,
    res_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_rm,
    stride_rn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    FIXUP: tl.constexpr,
    TMA: tl.constexpr,
    WS_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    SWAP_AB: tl.constexpr,
    TMA_STORE: tl.constexpr,
    BNT: tl.constexpr = 0,
    b2_desc=None,
    c2_desc=None,
    AREG: tl.constexpr = False,
    HOLD: tl.constexpr = False,
):
    """One (tile, K split) of the output: its K range, then the epilogue and C, or the fp32
    partial sum into the workspace when K is split (and with FIXUP, the sum if it is last).
    With a tail (BNT > 0: tiles BN + BNT wide, no split-K) the two accumulators are stored
    side by side, the tail through its own descriptor when C goes by TMA. With AREG the
    tile's BN + BNT columns are 64-wide accumulators sharing A in registers, each stored
    through the 64-column descriptors (b2_desc, c2_desc)."""
    if AREG:
        W: tl.constexpr = BN + BNT
        pid_m, pid_n = grouped_tile(tile, tl.cdiv(M, BM), tl.cdiv(N, W), GROUP_M)
        acc0, acc1, acc2, acc3 = _acc_areg(
            pid_m,
            pid_n,
            tl.cdiv(K, BK),
            a_ptr,
            b_ptr,
            a_desc,
            b2_desc,
            M,
            N,
            K,
            stride_am,
            stride_ak,
            stride_bk,
            stride_bn,
            BM,
            W,
            BK,
            TMA,
            WS_K,
            EVEN_K,
            INPUT_PRECISION,
            HOLD,
        )
        m0 = pid_m * BM
        n0 = pid_n * W
        TS: tl.constexpr = 1 if TMA_STORE else 0
        _store(
            acc0,
            m0,
            n0,
            c_ptr,
            c2_desc,
            bias_ptr,
            res_ptr,
            M,
            N,
            stride_cm,
            stride_cn,
            stride_rm,
            stride_rn,
            BM,
            64,
            HAS_BIAS,
            ACT,
            HAS_RES,
            TS,
        )
        _store(
            acc1,
            m0,
            n0 + 64,
            c_ptr,
            c2_desc,
            bias_ptr,
            res_ptr,
            M,
            N,
            stride_cm,
            stride_cn,
            stride_rm,
            stride_rn,
            BM,
            64,
            HAS_BIAS,
            ACT,
            HAS_RES,
            TS,
        )
        if W > 128:
            _store(
                acc2,
                m0,
                n0 + 128,
                c_ptr,
                c2_desc,
                bias_ptr,
                res_ptr,
                M,
                N,
                stride_cm,
                stride_cn,
                stride_rm,
                stride_rn,
                BM,
                64,
                HAS_BIAS,
                ACT,
                HAS_RES,
                TS,
            )
        if W > 192:
            _store(
                acc3,
                m0,
                n0 + 192,
                c_ptr,
                c2_desc,
                bias_ptr,
                res_ptr,
                M,
                N,
                stride_cm,
                stride_cn,
                stride_rm,
                stride_rn,
                BM,
                64,
                HAS_BIAS,
                ACT,
                HAS_RES,
                TS,
            )
    elif BNT > 0:
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN + BNT)
        pid_m, pid_n = grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        acc, acc2 = _acc_tail(
            pid_m,
            pid_n,
            tl.cdiv(K, BK),
            a_ptr,
            b_ptr,
            a_desc,
            b_desc,
            b2_desc,
            M,
            N,
            K,
            stride_am,
            stride_ak,
            stride_bk,
            stride_bn,
            BM,
            BN,
            BNT,
            BK,
            TMA,
            WS_K,
            EVEN_K,
            INPUT_PRECISION,
        )
        n0 = pid_n * (BN + BNT)
        _store(
            acc,
            pid_m * BM,
            n0,
            c_ptr,
            c_desc,
            bias_ptr,
            res_ptr,
            M,
            N,
            stride_cm,
            stride_cn,
            stride_rm,
            stride_rn,
            BM,
            BN,
            HAS_BIAS,
            ACT,
            HAS_RES,
            TMA_STORE,
        )
        _store(
            acc2,
            pid_m * BM,
            n0 + BN,
            c_ptr,
            c2_desc,
            bias_ptr,
            res_ptr,
            M,
            N,
            stride_cm,
            stride_cn,
            stride_rm,
            stride_rn,
            BM,
            BNT,
            HAS_BIAS,
            ACT,
            HAS_RES,
            1 if TMA_STORE else 0,
        )
    else:
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        split = tile % SPLIT_K
        pid_m, pid_n = grouped_tile(tile // SPLIT_K, tiles_m, tiles_n, GROUP_M)
        k_tiles = tl.cdiv(K, BK)
        per_split = tl.cdiv(k_tiles, SPLIT_K)
        k_lo = split * per_split
        k_hi = tl.minimum(k_lo + per_split, k_tiles)
        acc = _acc(
            pid_m,
            pid_n,
            k_lo,
            k_hi,
            a_ptr,
            b_ptr,
            a_desc,
            b_desc,
            M,
            N,
            K,
            stride_am,
            stride_ak,
            stride_bk,
            stride_bn,
            BM,
            BN,
            BK,
            TMA,
            WS_K,
            EVEN_K,
            INPUT_PRECISION,
            SWAP_AB,
        )
        if SPLIT_K == 1:
            _store(
                acc,
                pid_m * BM,
                pid_n * BN,
                c_ptr,
                c_desc,
                bias_ptr,
                res_ptr,
                M,
                N,
                stride_cm,
                stride_cn,
                stride_rm,
                stride_rn,
                BM,
                BN,
                HAS_BIAS,
                ACT,
                HAS_RES,
                TMA_STORE,
            )
        else:
            offs_m = pid_m * BM + tl.arange(0, BM)
            offs_n = pid_n * BN + tl.arange(0, BN)
            mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            w_ptrs = ws_ptr + split.to(tl.int64) * M * N + offs_m[:, None] * N + offs_n[None, :]
            tl.store(w_ptrs, acc, mask=mask)
            if FIXUP:
                _fixup(
                    ws_ptr,
                    counter_ptr + tile // SPLIT_K,
                    c_ptr,
                    bias_ptr,
                    res_ptr,
                    pid_m,
                    pid_n,
                    M,
                    N,
                    stride_cm,
                    stride_cn,
                    stride_rm,
                    stride_rn,
                    BM,
                    BN,
                    SPLIT_K,
                    HAS_BIAS,
                    ACT,
                    HAS_RES,
                )


@triton.jit
def _sk_sum(
    ws_ptr,
    t,
    first_q,
    last_q,
    per,
    k_tiles,
    pid_m,
    pid_n,
    c_ptr,
    bias_ptr,
    res_ptr,
    M,
    N,
    stride_cm,
    stride_cn,
    stride_rm,
    stride_rn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
):
    """C[tile t] = epilogue(the sum of its contributors' partials), in program order, by column
    chunks of at most 64: a whole BM x BN fp32 sum beside the tile just loaded needs two
    accumulators' worth of registers (256 per thread at 128x256 on 8 warps), which spilled
    and made the stream-K kernel 1.5x slower than the plain persistent one on the H200)."""
    CN: tl.constexpr = BN if BN < 64 else 64
    rows = tl.arange(0, BM)
    offs_m = pid_m * BM + rows
    for j in tl.static_range(BN // CN):
        cols = j * CN + tl.arange(0, CN)
        local = rows[:, None] * BN + cols[None, :]
        part = tl.zeros((BM, CN), dtype=tl.float32)
        for q in range(first_q, last_q + 1):
            q_slot = tl.where(q * per >= t * k_tiles, 0, 1)  # q started inside this tile: its first
            part += tl.load(ws_ptr + (q * 2 + q_slot).to(tl.int64) * (BM * BN) + local, cache_modifier=".cg")
        offs_n = pid_n * BN + cols
        part = _epilogue(part, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(
            c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
            part.to(c_ptr.dtype.element_ty),
            mask=mask,
        )


@triton.jit
def _stream_k(
    pid,
    num_programs,
    dp_tiles,
    sk_tiles,
    a_ptr,
    b_ptr,
    c_ptr,
    a_desc,
    b_desc,
    c_desc,
    ws_ptr,
    counter_ptr,
    bias_ptr,
    res_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_rm,
    stride_rn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    TMA: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    SWAP_AB: tl.constexpr,
    TMA_STORE: tl.constexpr,
):
    """The stream-K phase: the K steps of the last `sk_tiles` tiles, dealt out evenly over the
    programs (the STREAM_K gene, `template.py`), in one flat loop over this program's steps
    that Triton software-pipelines as it does the persistent tutorial's. A K loop that holds
    the tickets' atomic add and barrier, or sits inside a `while`, is not pipelined (in the
    sm_90 TTGIR each TMA load is waited for before its MMA) and runs 2-5x slower per K step
    on the H200 than the plain persistent kernel. Where
    a segment ends (its tile's last K step, or the program's last step): a whole tile is
    written to C; a partial one is stored in this program's workspace slot (0:
    its first segment, 1: its last). Only a program's first and last segments can be
    partial, so after the loop it takes a ticket on at most two tiles' counters (no atomic,
    barrier or nested loop inside the pipelined loop); the last contributor of a tile sums
    every contributor's slot in program order (deterministic whoever is last), applies the
    epilogue, writes C and resets the counter."""
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    total = sk_tiles * k_tiles
    per = tl.cdiv(total, num_programs)
    start = pid * per
    end = tl.minimum(start + per, total)
    local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    if SWAP_AB:
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    seg = start  # the first step of the current segment
    part_first = -1  # the tiles of this program's partial segments (its first, its last)
    part_last = -1
    for it in tl.range(start, end):
        t = it // k_tiles  # global step `it` is K step kt of stream-K tile t
        kt = it - t * k_tiles
        pid_m, pid_n = grouped_tile(dp_tiles + t, tiles_m, tiles_n, GROUP_M)
        acc = _k_step(
            acc,
            pid_m,
            pid_n,
            kt,
            a_ptr,
            b_ptr,
            a_desc,
            b_desc,
            M,
            N,
            K,
            stride_am,
            stride_ak,
            stride_bk,
            stride_bn,
            BM,
            BN,
            BK,
            TMA,
            EVEN_K,
            INPUT_PRECISION,
            SWAP_AB,
        )
        if (kt == k_tiles - 1) | (it == end - 1):  # the segment ends here
            if SWAP_AB:
                out = tl.trans(acc)
            else:
                out = acc
            if (seg == t * k_tiles) & (kt == k_tiles - 1):  # the whole tile
                _store(
                    out,
                    pid_m * BM,
                    pid_n * BN,
                    c_ptr,
                    c_desc,
                    bias_ptr,
                    res_ptr,
                    M,
                    N,
                    stride_cm,
                    stride_cn,
                    stride_rm,
                    stride_rn,
                    BM,
                    BN,
                    HAS_BIAS,
                    ACT,
                    HAS_RES,
                    TMA_STORE,
                )
            else:
                slot = tl.where(seg == start, 0, 1)
                tl.store(ws_ptr + (pid * 2 + slot).to(tl.int64) * (BM * BN) + local, out)
                if seg == start:
                    part_first = t
                else:
                    part_last = t
            acc = tl.zeros_like(acc)
            seg = it + 1
    # the tickets after the loop: an atomic or a barrier inside it stops Triton from
    # software-pipelining it (seen in the TTGIR for sm_90: each K step's TMA load waited for)
    tl.debug_barrier()  # every thread's partial stores come before the tickets
    for f in tl.static_range(2):
        t = part_first if f == 0 else part_last
        if t >= 0:
            first_q = (t * k_tiles) // per
            last_q = ((t + 1) * k_tiles - 1) // per
            ticket = tl.atomic_add(counter_ptr + t, 1, sem="acq_rel")
            if ticket == last_q - first_q:  # the last contributor: every other partial is stored
                pid_m, pid_n = grouped_tile(dp_tiles + t, tiles_m, tiles_n, GROUP_M)
                _sk_sum(
                    ws_ptr,
                    t,
                    first_q,
                    last_q,
                    per,
                    k_tiles,
                    pid_m,
                    pid_n,
                    c_ptr,
                    bias_ptr,
                    res_ptr,
                    M,
                    N,
                    stride_cm,
                    stride_cn,
                    stride_rm,
                    stride_rn,
                    BM,
                    BN,
                    HAS_BIAS,
                    ACT,
                    HAS_RES,
                )
                tl.store(counter_ptr + t, 0)


@triton.jit
def _gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_desc,
    b_desc,
    c_desc,
    ws_ptr,
    counter_ptr,
    bias_ptr,
    res_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_rm,
    stride_rn,
    num_programs,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
    FIXUP: tl.constexpr,
    PERSISTENT: tl.constexpr,
    TMA: tl.constexpr,
    WS_TILES: tl.constexpr,
    WS_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    SWAP_AB: tl.constexpr = False,
    STREAM_K: tl.constexpr = False,
    sk_tiles=0,
    TMA_STORE: tl.constexpr = 0,
    BNT: tl.constexpr = 0,
    b2_desc=None,
    c2_desc=None,
    AREG: tl.constexpr = False,
    HOLD: tl.constexpr = False,
):
    if PERSISTENT:
        num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN + BNT) * SPLIT_K
        if STREAM_K:  # whole tiles first (the data-parallel phase), then the stream-K tiles
            num_tiles = num_tiles - sk_tiles
        for tile in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=True, warp_specialize=WS_TILES):
            _tile(
                tile,
                a_ptr,
                b_ptr,
                c_ptr,
                a_desc,
                b_desc,
                c_desc,
                ws_ptr,
                counter_ptr,
                bias_ptr,
                res_ptr,
                M,
                N,
                K,
                stride_am,
                stride_ak,
                stride_bk,
                stride_bn,
                stride_cm,
                stride_cn,
                stride_rm,
                stride_rn,
                BM,
                BN,
                BK,
                GROUP_M,
                SPLIT_K,
                FIXUP,
                TMA,
                WS_K,
                HAS_BIAS,
                ACT,
                HAS_RES,
                EVEN_K,
                INPUT_PRECISION,
                SWAP_AB,
                TMA_STORE,
                BNT,
                b2_desc,
                c2_desc,
                AREG,
                HOLD,
            )
        if STREAM_K:
            _stream_k(
                tl.program_id(0),
                num_programs,
                num_tiles,
                sk_tiles,
                a_ptr,
                b_ptr,
                c_ptr,
                a_desc,
                b_desc,
                c_desc,
                ws_ptr,
                counter_ptr,
                bias_ptr,
                res_ptr,
                M,
                N,
                K,
                stride_am,
                stride_ak,
                stride_bk,
                stride_bn,
                stride_cm,
                stride_cn,
                stride_rm,
                stride_rn,
                BM,
                BN,
                BK,
                GROUP_M,
                TMA,
                HAS_BIAS,
                ACT,
                HAS_RES,
                EVEN_K,
                INPUT_PRECISION,
                SWAP_AB,
                TMA_STORE,
            )
    else:
        _tile(
            tl.program_id(0),
            a_ptr,
            b_ptr,
            c_ptr,
            a_desc,
            b_desc,
            c_desc,
            ws_ptr,
            counter_ptr,
            bias_ptr,
            res_ptr,
            M,
            N,
            K,
            stride_am,
            stride_ak,
            stride_bk,
            stride_bn,
            stride_cm,
            stride_cn,
            stride_rm,
            stride_rn,
            BM,
            BN,
            BK,
            GROUP_M,
            SPLIT_K,
            FIXUP,
            TMA,
            WS_K,
            HAS_BIAS,
            ACT,
            HAS_RES,
            EVEN_K,
            INPUT_PRECISION,
            SWAP_AB,
            TMA_STORE,
            BNT,
            b2_desc,
            c2_desc,
            AREG,
            HOLD,
        )


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr,
    c_ptr,
    bias_ptr,
    res_ptr,
    M,
    N,
    stride_cm,
    stride_cn,
    stride_rm,
    stride_rn,
    SPLIT_K: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    HAS_RES: tl.constexpr,
):
    """C = epilogue(sum of the SPLIT_K fp32 partials), in a fixed order (deterministic)."""
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(ws_ptr + s * M * N + offs_m[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
    tl.store(
        c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask
    )
