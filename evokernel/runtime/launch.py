"""Launching a Triton (or Gluon) JIT kernel through its compiled handle, at a host cost near cuBLAS's.

`fn[grid](*args, **kwargs)` binds every argument, works out the kernel's specialisation and
cache key and looks the compiled kernel up again on every call: 50-200 us of Python for a
kernel with forty arguments, more than many GEMMs take on the GPU. A `KernelLaunch` is one
launch site whose arguments are fixed except for a few named ones (the pointers and tensor
descriptors of the call's tensors). Its first call goes through the JIT as usual, which
returns the `CompiledKernel`; the launch records the argument vector that kernel's launcher
takes (every parameter in `fn.arg_names` order, constexprs included, as Triton's own
`JITFunction.run` passes `bound_args.values()`) with the positions of the arguments that
change. Each later call copies that vector, fills those positions and calls the compiled
kernel's launcher directly on the current stream: no binding, no specialisation, no key.

What the caller promises: the arguments that change keep the first call's specialisation
(tensors of the same dtypes whose pointers are 16-byte aligned or not alike, descriptors of
the same dtype, block shape and layout), and the static arguments are the same. A caller
keeps one launch per input signature (shapes, strides, dtypes, device, pointer alignment),
as `search_spaces/gemm/template.py`'s `GemmLauncher` does.

Whatever this module cannot vouch for goes through the JIT on every call instead, never a
wrong launch: no `CompiledKernel` returned (Triton's CPU interpreter), a Triton other than
those whose launch protocol it follows (`TRITON_VERSIONS`) or without the attributes it
uses, a pre-run hook on the kernel, a global the kernel reads that changed (the JIT then
raises its error), another current device than the first call's, a change of
`TRITON_DEBUG` at run time, a pipeline inspection hook (Triton 3.9's
`knobs.runtime.add_stages_inspection_hook`), or `EVOKERNEL_FAST_LAUNCH=0` in the
environment. (Compile options read from the environment, such as TRITON_F32_DEFAULT or the
instrumentation mode, are the first call's: set them before it.) Launch hooks
(profilers: Triton's `knobs.runtime.launch_enter_hook`) are honoured: with a hook set, the
launch passes the hooks and the launch metadata as the JIT does; without, it passes None.

>>> from evokernel.search_spaces.gemm.kernels import _splitk_reduce_kernel
>>> launch = KernelLaunch(_splitk_reduce_kernel, (2, 1), dict(M=64, N=128, stride_cm=128, stride_cn=1,
...     stride_rm=128, stride_rn=1, SPLIT_K=2, BM=32, BN=128, HAS_BIAS=False, ACT=0, HAS_RES=False, num_warps=4),
...     ("ws_ptr", "c_ptr", "bias_ptr", "res_ptr"))
>>> launch.dynamic, launch.jit_calls, launch.fast_calls, launch.compiled
(('ws_ptr', 'c_ptr', 'bias_ptr', 'res_ptr'), 0, 0, False)

Where a template function keeps its ordinary launch (`fn[grid](*args, **kwargs)`, every
argument worked out per call), `LaunchCache` is the drop-in: `launches(fn, grid, *args,
**kwargs)` keeps one `KernelLaunch` per launch signature, its key every non-tensor argument
by type and value and, of each tensor (or descriptor), what Triton specialises on.
"""

# One module on purpose, though over 400 lines: `KernelLaunch` and `_RawLaunch` follow one version-pinned reading of
# Triton's launch protocol; keeping the guards and the raw launch together keeps every assumption about Triton's
# internals in one file.

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["TRITON_VERSIONS", "KernelLaunch", "LaunchCache", "fast_launch_enabled", "quick_descriptor"]


#: Triton versions whose launch protocol this module follows (read in their sources: 3.6's
#: and 3.9's `JITFunction.run` and `CompiledKernel`); others launch through the JIT
TRITON_VERSIONS: tuple[tuple[int, int], tuple[int, int]] = ((3, 6), (3, 9))


def fast_launch_enabled() -> bool:
    """Whether direct launches are allowed: a Triton of `TRITON_VERSIONS`, and not switched
    off (`EVOKERNEL_FAST_LAUNCH=0`: every launch then goes through the JIT)."""
    if os.environ.get("EVOKERNEL_FAST_LAUNCH", "1") == "0":
        return False
    try:
        import triton

        version = tuple(int(x) for x in triton.__version__.split(".")[:2])
    except (ImportError, ValueError):
        return False
    return TRITON_VERSIONS[0] <= version <= TRITON_VERSIONS[1]


def quick_descriptor(template: Any, base: Any) -> Any:
    """A copy of `template` (a Triton or Gluon host `TensorDescriptor`) over the tensor
    `base`, without the checks its constructor runs: for a tensor of the shape and strides
    the template was validated for (the caller's plan makes sure of that). A template made
    with `base=None` holds no tensor.

    >>> import torch
    >>> from triton.tools.tensor_descriptor import TensorDescriptor
    >>> a, b = torch.zeros(64, 32, dtype=torch.float16), torch.ones(64, 32, dtype=torch.float16)
    >>> template = quick_descriptor(TensorDescriptor.from_tensor(a, [16, 32]), None)
    >>> d = quick_descriptor(template, b)
    >>> d.base is b, d.shape, d.strides, d.block_shape
    (True, torch.Size([64, 32]), (32, 1), [16, 32])
    """
    d = object.__new__(type(template))
    d.__dict__.update(template.__dict__)
    d.base = base
    return d


def _driver() -> Any:
    from triton.runtime import driver

    return driver.active


def _hooked(hook: Any) -> bool:
    """Whether a Triton launch hook is set: a HookChain (Triton 3.5+) with calls in it, or a
    plain callable (earlier versions)."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return bool(calls) if calls is not None else True


class _Handle:
    """What a fast launch needs, recorded from the first call's compiled kernel."""

    __slots__ = (
        "args",
        "compiled",
        "debug",
        "device",
        "function",
        "get_device",
        "get_stream",
        "grid3",
        "knobs",
        "packed",
        "raw",
        "run",
        "slots",
    )

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self, k, v)


class KernelLaunch:
    """One launch site of the JIT kernel `fn`: the `grid`, the arguments that stay (`static`,
    by name, launch options such as `num_warps` included) and the names of those given per
    call (`dynamic`, in the order `__call__` takes them). Counts the calls that went through
    the JIT (`jit_calls`) and through the compiled handle (`fast_calls`); `compiled` says
    whether the handle was recorded. `fast=False` keeps every call on the JIT."""

    __slots__ = ("_fast", "_handle", "dynamic", "fast_calls", "fn", "grid", "jit_calls", "static")

    def __init__(
        self, fn: Any, grid: Sequence[int], static: Mapping[str, Any], dynamic: Sequence[str], *, fast: bool = True
    ) -> None:
        self.fn = fn
        self.grid = tuple(int(g) for g in grid)
        if not 1 <= len(self.grid) <= 3:
            raise ValueError(f"a grid has 1 to 3 dimensions, got {grid!r}")
        self.static = dict(static)
        self.dynamic = tuple(dynamic)
        both = set(self.static) & set(self.dynamic)
        if both:
            raise ValueError(f"arguments both static and dynamic: {sorted(both)}")
        self.jit_calls = 0
        self.fast_calls = 0
        self._handle: _Handle | None = None
        self._fast = fast and fast_launch_enabled()

    @property
    def compiled(self) -> bool:
        return self._handle is not None

    def __call__(self, *values: Any) -> Any:
        """Launch with the dynamic arguments `values`; returns what `fn[grid](...)` returns
        (the CompiledKernel, or None in the interpreter)."""
        h = self._handle
        if h is not None and len(values) == len(h.slots):
            fn = self.fn
            runtime = h.knobs.runtime
            if (
                not fn.pre_run_hooks
                and (not fn.used_global_vals or _globals_unchanged(fn))
                and runtime.debug == h.debug
                and getattr(runtime, "add_stages_inspection_hook", None) is None
            ):
                device = h.get_device()
                if device == h.device:
                    stream = h.get_stream(device)
                    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
                    hooked = _hooked(enter) or _hooked(leave)
                    if h.raw is not None and not hooked:
                        h.raw(stream, values)
                    else:
                        args = h.args.copy()
                        for i, v in zip(h.slots, values):
                            args[i] = v
                        if hooked:
                            metadata = h.compiled.launch_metadata(self.grid, stream, *args)
                            h.run(*h.grid3, stream, h.function, h.packed, metadata, enter, leave, *args)
                        else:
                            h.run(*h.grid3, stream, h.function, h.packed, None, None, None, *args)
                    self.fast_calls += 1
                    return h.compiled
        return self._jit(values)

    def direct(self, *also: KernelLaunch) -> tuple[Any, ...] | None:
        """`(stream, raw, *raws)` where a call now of this launch and of each of `also` (a
        plan's other launches, checked in one go: the runtime's settings, the current device
        and stream are read once) would go through its raw launch (`_RawLaunch`: the first
        call recorded it, every check `__call__` makes passes, no launch hook set), each
        counted as a fast call: the caller then launches `raw(stream, values, bases)`, with
        `bases=True` passing each descriptor's tensor in its place. None, counting nothing,
        otherwise (the caller calls the launches as usual)."""
        h = self._handle
        if h is None or h.raw is None:
            return None
        fn = self.fn
        runtime = h.knobs.runtime
        debug = runtime.debug
        if (
            fn.pre_run_hooks
            or (fn.used_global_vals and not _globals_unchanged(fn))
            or debug != h.debug
            or getattr(runtime, "add_stages_inspection_hook", None) is not None
            or _hooked(runtime.launch_enter_hook)
            or _hooked(runtime.launch_exit_hook)
        ):
            return None
        device = h.get_device()
        if device != h.device:
            return None
        raws = [h.raw]
        for other in also:
            o = other._handle
            if o is None or o.raw is None or o.device != device or o.debug != debug:
                return None
            fn = other.fn
            if fn.pre_run_hooks or (fn.used_global_vals and not _globals_unchanged(fn)):
                return None
            raws.append(o.raw)
        self.fast_calls += 1
        for other in also:
            other.fast_calls += 1
        return (h.get_stream(device), *raws)

    def _jit(self, values: Sequence[Any]) -> Any:
        if len(values) != len(self.dynamic):
            raise TypeError(f"expected {len(self.dynamic)} dynamic arguments {self.dynamic}, got {len(values)}")
        kwargs = dict(self.static)
        kwargs.update(zip(self.dynamic, values))
        self.jit_calls += 1
        result = self.fn[self.grid](**kwargs)
        if self._fast and self._handle is None:
            self._record(result, kwargs)
        return result

    def _record(self, result: Any, kwargs: Mapping[str, Any]) -> None:
        """Keep what later calls need from the first call's compiled kernel; on anything
        unexpected, keep nothing and stop trying (every call then goes through the JIT)."""
        try:
            from triton import knobs
            from triton.compiler import CompiledKernel

            if not isinstance(result, CompiledKernel) or hasattr(result, "result"):
                return  # the interpreter (None), or an asynchronous compilation's future
            fn = self.fn
            names = list(fn.arg_names)
            params = fn.signature.parameters
            if len(params) != len(names):
                raise RuntimeError("the kernel's signature and arg_names differ")
            args = []
            for name in names:  # the JIT's bound arguments: given, else the parameter's default
                if name in kwargs:
                    args.append(kwargs[name])
                elif params[name].default is not inspect.Parameter.empty:
                    args.append(params[name].default)
                else:
                    raise RuntimeError(f"no value for {name}")
            slots = tuple(names.index(n) for n in self.dynamic)
            for i in slots:
                args[i] = None  # hold none of the caller's tensors
            _ = fn.pre_run_hooks, fn.used_global_vals  # (read on every fast call)
            driver = _driver()
            run = result.run  # (loads the binary and builds the launcher if the JIT did not)
            grid3 = (self.grid + (1, 1))[:3]
            raw = _RawLaunch.of(run, args, slots, [kwargs[n] for n in self.dynamic], grid3, result)
            self._handle = _Handle(
                compiled=result,
                run=run,
                raw=raw,
                function=result.function,
                packed=result.packed_metadata,
                args=args,
                slots=slots,
                device=driver.get_current_device(),
                get_device=driver.get_current_device,
                get_stream=driver.get_current_stream,
                grid3=grid3,
                debug=knobs.runtime.debug,
                knobs=knobs,
            )
        except Exception:  # noqa: BLE001 (anything unexpected: the JIT path, never a wrong launch)
            self._fast = False
            self._handle = None


class _RawLaunch:
    """Triton 3.6's CUDA launch below its Python wrapper: the C launcher called with one
    argument vector built at the first call, each tensor given as its device pointer (an int)
    and each tensor descriptor as a CUtensorMap kept per pointer.

    On Triton 3.6 a compiled kernel's launcher (`CudaLauncher`) wraps the C launch in a
    Python loop over every argument (constexprs included) that encodes each host tensor
    descriptor into a CUtensorMap (`make_tensordesc_arg`: the driver's encoder behind a few
    Python lookups) on every launch, and the C launch asks the driver about every tensor's
    pointer (`cuPointerGetAttribute`, to refuse host tensors) on every call. Here the vector
    (the launch's fixed head, then the kernel's arguments expanded in that loop's order and
    form) is built once; a call copies it and fills in the stream, each CUDA tensor's
    `data_ptr()` (an int, which the C launch takes as is: any other value, a host tensor
    included, goes in as given and gets Triton's own check) and each descriptor's encoding.

    A descriptor of the first call's shape, strides and padding (a `quick_descriptor` copy of
    it shares them) is encoded by the driver's encoder with the first call's constants and
    kept per base pointer: the encoding is made of the pointer and those constants alone, so
    equal pointers give the same CUtensorMap and no tensor is kept alive for it. Any other
    descriptor is encoded as Triton does and kept per (pointer, shape, strides, padding).
    `of` returns None wherever the launcher is not the one read (another Triton, launch
    scratch, descriptors not lowered to CUtensorMaps), and the caller keeps Triton's path."""

    __slots__ = ("_args", "_cache", "_call", "_descs", "_encode", "_fill", "_tensors")

    CACHE = 64  # encodings kept per launch (cleared when full)
    STREAM = 3  # the stream's position in the C launch's arguments

    @classmethod
    def of(
        cls,
        run: Any,
        args: list[Any],
        slots: Sequence[int],
        first: Sequence[Any],
        grid3: tuple[int, ...],
        compiled: Any,
    ) -> _RawLaunch | None:
        try:
            import triton

            if tuple(int(x) for x in triton.__version__.split(".")[:2]) != (3, 6):
                return None
            from triton.backends.nvidia import driver as nv

            if type(run).__name__ != "CudaLauncher" or run.global_scratch_size or run.profile_scratch_size:
                return None
            launch = run.launch
            code = getattr(launch, "__code__", None)
            cells = dict(zip(code.co_freevars, (c.cell_contents for c in launch.__closure__ or ()))) if code else {}
            if code is None:  # no descriptor arguments: no wrapper, the C launch itself
                c_launch, metas = launch, {}
            elif {"launcher", "tensordesc_indices", "tensordesc_meta"} <= set(cells):
                indices = sorted(cells["tensordesc_indices"])
                given = cells["tensordesc_meta"] or []
                if len(given) != len(indices) or any(m is None for m in given):
                    return None  # descriptors passed as pointers and shapes: Triton's own path
                c_launch, metas = cells["launcher"], dict(zip(indices, given))
            else:
                return None
            if getattr(c_launch, "__name__", "") != "launch" or not callable(c_launch):
                return None
            fill = triton.runtime.driver.active.utils.fill_tma_descriptor
            self = cls()
            self._encode = nv.make_tensordesc_arg
            # the C launch's head (grid, stream, function, launch flags, scratch, metadata, hooks)
            vector: list[Any] = [
                *grid3,
                None,
                compiled.function,
                run.launch_cooperative_grid,
                run.launch_pdl,
                None,
                None,
                compiled.packed_metadata,
                None,
                None,
                None,
            ]
            positions: dict[int, tuple[int, int]] = {}  # argument index -> (start, length) in the vector
            descs = []
            for i, a in enumerate(args):
                if i in metas:
                    d = first[list(slots).index(i)] if i in slots else a
                    meta = metas[i]
                    part = self._encode(d, meta)
                    positions[i] = (len(vector), len(part))
                    vector.extend(part)
                    if i in slots:
                        constants = None
                        if not meta["fp4_padded"] and d.strides[-1] == 1:
                            constants = (
                                meta["swizzle"],
                                meta["elem_size"],
                                nv.TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]],
                                meta["block_size"],
                                d.shape,
                                d.strides,
                                1 if d.padding == "nan" else 0,
                            )
                        descs.append(
                            (
                                list(slots).index(i),
                                len(vector) - len(part),
                                len(part),
                                meta,
                                i,
                                quick_descriptor(d, None),
                                constants,
                            )
                        )
                else:
                    positions[i] = (len(vector), 1)
                    vector.append(a)
            self._args = vector
            self._tensors = tuple((k, positions[i][0]) for k, i in enumerate(slots) if i not in metas)
            self._descs = tuple(descs)
            self._call = c_launch
            self._cache: dict[tuple, Any] = {}
            self._fill = fill
            return self
        except Exception:  # noqa: BLE001 (anything not as read: Triton's own launcher)
            return None

    def _store(self, key: tuple, make: Any, *args: Any) -> Any:
        """`make(*args)`, kept under `key` (the cache cleared first when full)."""
        cache = self._cache
        if len(cache) >= self.CACHE:
            cache.clear()
        value = cache[key] = make(*args)
        return value

    def __call__(self, stream: int, values: Sequence[Any], bases: bool = False) -> None:
        """Launch on `stream` with the dynamic arguments `values`; with `bases`, each
        descriptor's place holds the tensor it is over instead: the first call's descriptor
        over that tensor (the caller vouches that the tensor has its shape and strides)."""
        args = self._args.copy()
        args[3] = stream
        tensor = torch.Tensor
        for k, at in self._tensors:
            v = values[k]
            args[at] = v.data_ptr() if type(v) is tensor and v.is_cuda else v
        if self._descs:
            cache = self._cache
            for k, at, n, meta, i, template, constants in self._descs:
                d = values[k]
                ptr = None  # set where the descriptor is the first call's over another tensor
                if bases:
                    if constants is not None:
                        ptr = d.data_ptr()
                    else:
                        d = quick_descriptor(template, d)
                elif (
                    constants is not None
                    and (d.shape is template.shape or d.shape == template.shape)
                    and (d.strides is template.strides or d.strides == template.strides)
                    and (d.padding == template.padding)
                ):
                    ptr = d.base.data_ptr()
                if ptr is not None:
                    key = (i, ptr)
                    # (the shape and strides after the CUtensorMap are the first call's)
                    tensor_map = cache.get(key)
                    args[at] = self._store(key, self._fill, ptr, *constants) if tensor_map is None else tensor_map
                else:
                    key = (i, d.base.data_ptr(), tuple(d.shape), tuple(d.strides), d.padding)
                    part = cache.get(key)
                    args[at : at + n] = self._store(key, self._encode, d, meta) if part is None else part
        self._call(*args)


def _globals_unchanged(fn: Any) -> bool:
    """The JIT's check that the globals a kernel read at compile time still hold their values."""
    missing = object()
    return all(scope.get(name, missing) == value for (name, _), (value, scope) in fn.used_global_vals.items())


def _spec(v: Any) -> Any:
    """What Triton specialises a launch on, of one argument: a tensor's dtype and whether its
    pointer is 16-byte aligned; a host tensor descriptor's type, dtype, block shape (and
    layout); anything else its type and value. (Raises TypeError for an unhashable value.)"""
    if isinstance(v, torch.Tensor):
        return v.dtype, v.data_ptr() % 16 == 0
    if hasattr(v, "block_shape") and hasattr(v, "base"):
        layout = getattr(v, "layout", None)
        return type(v), v.base.dtype, tuple(v.block_shape), None if layout is None else repr(layout)
    if isinstance(v, float):  # (by its bits: 0.0 and -0.0 are equal, and NaN is not equal to itself)
        return float, v.hex()
    hash(v)
    return type(v), v


def _dynamic(v: Any) -> bool:
    return isinstance(v, torch.Tensor) or (hasattr(v, "block_shape") and hasattr(v, "base"))


class LaunchCache:
    """`KernelLaunch`es made on demand, for template functions that work out their launch's
    arguments on every call: `launches(fn, grid, *args, **kwargs)` does what
    `fn[grid](*args, **kwargs)` does, through a launch kept per launch signature (the kernel,
    the grid, the argument names, every non-tensor argument by type and value, and `_spec` of
    each tensor and descriptor, which are the arguments given per call). A value that cannot
    be hashed sends the call through the JIT. At most `size` launches are kept (the oldest
    made goes first).

    >>> cache = LaunchCache(size=2)
    >>> len(cache), cache.size
    (0, 2)
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._launches: dict[tuple, tuple[KernelLaunch, tuple[int, ...]]] = {}

    def __len__(self) -> int:
        return len(self._launches)

    def __call__(self, fn: Any, grid: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        try:
            key = (fn, tuple(grid), len(args), *map(_spec, args), *kwargs, *map(_spec, kwargs.values()))
            entry = self._launches.get(key)
        except TypeError:  # (an unhashable argument)
            return fn[grid](*args, **kwargs)
        values = (*args, *kwargs.values())
        if entry is None:
            names = (*fn.arg_names[: len(args)], *kwargs)
            dynamic = tuple(i for i, v in enumerate(values) if _dynamic(v))
            static = {names[i]: v for i, v in enumerate(values) if i not in dynamic}
            launch = KernelLaunch(fn, grid, static, [names[i] for i in dynamic])
            if len(self._launches) >= self.size:
                try:
                    del self._launches[next(iter(self._launches))]
                except (RuntimeError, KeyError, StopIteration):  # (another thread changed it meanwhile)
                    pass
            entry = self._launches[key] = (launch, dynamic)
        launch, dynamic = entry
        return launch(*[values[i] for i in dynamic])

    def stats(self) -> dict[str, int]:
        """Launches kept, and calls through the JIT and through the compiled handles."""
        kept = [launch for launch, _ in self._launches.values()]
        return {
            "launches": len(kept),
            "jit_calls": sum(x.jit_calls for x in kept),
            "fast_calls": sum(x.fast_calls for x in kept),
        }
