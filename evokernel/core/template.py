"""Template identity: a hash of the code that turns a genome into a kernel's source.

A result depends on the template that rendered the candidate as much as on the problem: after
a template fix, results of the old template (its compile errors above all) must not be
reused. `template_hash(render)` hashes the source files of that code:

- the file that defines `render` (a search file's lambda, a template's function);
- the modules of what `render` refers to (the globals its code names, its closure, a
  partial's function and arguments), where they are evokernel's or the user's own (a file
  outside the standard library and site-packages); helpers defined in render's own file are
  followed the same way;
- every module those import, directly or inside a function body, found transitively by
  reading their source (`ast`), again evokernel's or the user's own.

The file that defines `render` is hashed but its imports are not followed: a search file
imports the evaluator and the search machinery, which are not the template. Data that
render closes over (a flag bound as a default argument) is not hashed; a render whose output
depends on such data can name its identity instead (`KernelEvaluator(..., template="...")`).

>>> from evokernel.search_spaces.gemm.template import candidate_source
>>> render = lambda g: candidate_source(g.params)
>>> names = {Path(f).name for f in template_files(render)}
>>> sorted(names & {"template.py", "template_gluon.py", "launch.py", "candidate.py"})
['candidate.py', 'launch.py', 'template.py', 'template_gluon.py']
>>> len(template_hash(render))
16
"""

from __future__ import annotations

import ast
import dis
import functools
import hashlib
import importlib.util
import inspect
import site
import sys
import sysconfig
import types
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["template_files", "template_hash"]

_CACHE: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def template_hash(render: Callable[..., Any]) -> str:
    """16 hex digits of SHA-256 over the source files of `render` and of the template code it
    uses (`template_files`), each labelled by its module name (or file name), so the hash does
    not depend on where the checkout lives. Cached per render object."""
    try:
        return _CACHE[render]
    except (KeyError, TypeError):  # TypeError: not weakly referenceable (a bound method)
        pass
    parts = sorted(
        label.encode() + b"\0" + hashlib.sha256(Path(path).read_bytes()).digest()
        for path, label in _files(render).items()
    )
    value = hashlib.sha256(b"".join(parts)).hexdigest()[:16]
    try:
        _CACHE[render] = value
    except TypeError:
        pass
    return value


def template_files(render: Callable[..., Any]) -> list[str]:
    """The files `template_hash` reads for `render`, sorted by file name."""
    return sorted(_files(render), key=lambda p: (Path(p).name, p))


def _files(render: Callable[..., Any]) -> dict[str, str]:
    """{path: label} of the files render's identity covers: evokernel's modules labelled by
    their names, other files by their file names (neither depends on where they live)."""
    walk = _Walk()
    _refer(render, walk)
    out: dict[str, str] = {}
    for name, path in [*_closure(walk.roots).items(), *((module, path) for path, module in walk.files.items())]:
        ours = name == "evokernel" or name.startswith("evokernel.")
        out.setdefault(str(Path(path).resolve()), name if ours else f"file:{Path(path).name}")
    return out


def _is_ours(module: str, path: str | None) -> bool:
    """Template code worth hashing: evokernel's, or the user's own (not a library's)."""
    if module == "evokernel" or module.startswith("evokernel."):
        return True
    if not path or not path.endswith(".py") or not Path(path).is_file():
        return False
    resolved = str(Path(path).resolve())
    return not any(resolved.startswith(lib) for lib in _library_dirs())


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    dirs.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else "")
    dirs.add(str(Path(sys.base_prefix) / "lib"))
    return tuple(str(Path(d).resolve()) + "/" for d in dirs if d)


def _maybe_ours(name: str) -> bool:
    """Whether a dotted module name can be ours, judged by its top-level package alone (so
    that no library's submodule is imported to find out)."""
    top = name.partition(".")[0]
    if top == "evokernel":
        return True
    module = sys.modules.get(top)
    path = getattr(module, "__file__", None) if module is not None else None
    if module is None:
        try:
            spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
        except (ImportError, ValueError):
            return False
        path = spec.origin if spec is not None else None
    return _is_ours(top, path)


def _module_file(name: str) -> str | None:
    """The source file of a module of ours, None for anything else."""
    if not _maybe_ours(name):
        return None
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if path is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            return None
        path = spec.origin if spec is not None else None
    return path if path and path.endswith(".py") and Path(path).is_file() else None


class _Walk:
    """What render refers to, collected by `_refer`."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}  # {path: module} of code render runs directly
        self.roots: set[str] = set()  # modules whose imports are followed
        self.home: str | None = None  # the file that defines render
        self.seen: set[int] = set()


def _refer(obj: Any, walk: _Walk) -> None:
    """Collect what `obj` (render, or something it refers to) runs: the files of functions it
    calls in its own file, and the modules of evokernel or user code it uses."""
    if id(obj) in walk.seen:
        return
    walk.seen.add(id(obj))
    obj = inspect.unwrap(obj) if inspect.isfunction(obj) else obj
    if isinstance(obj, types.ModuleType):
        if _module_file(obj.__name__) is not None:
            walk.roots.add(obj.__name__)
        return
    if isinstance(obj, functools.partial):
        for part in (obj.func, *obj.args, *obj.keywords.values()):
            _refer(part, walk)
        return
    if inspect.ismethod(obj):
        _refer(obj.__func__, walk)
        _refer(type(obj.__self__), walk)
        return
    if inspect.isfunction(obj):
        _refer_function(obj, walk)
        return
    cls = obj if isinstance(obj, type) else type(obj)
    module = getattr(cls, "__module__", "") or ""
    if _module_file(module) is not None:
        walk.roots.add(module)
    elif not isinstance(obj, type) and inspect.isfunction(call := inspect.getattr_static(cls, "__call__", None)):
        _refer(call, walk)  # a callable object of a class of the user's


def _refer_function(fn: types.FunctionType, walk: _Walk) -> None:
    module, path = fn.__module__ or "", fn.__code__.co_filename
    real = Path(path).is_file()  # not so for code typed at a prompt or run from a string
    if real and (module == "evokernel" or module.startswith("evokernel.")):
        walk.roots.add(module)  # evokernel's own code: read through its module's imports
        return
    if real and not _is_ours(module, path):
        return  # a library's function
    if walk.home is None:
        walk.home = path
    elif path != walk.home:  # a function of another file of the user's: its module
        if _module_file(module) is not None:
            walk.roots.add(module)
        return
    if real:
        walk.files.setdefault(path, module)
    for name in _globals(fn.__code__):
        if name in fn.__globals__:
            _refer(fn.__globals__[name], walk)
    walk.roots.update(m for m in _imports(fn.__code__) if _module_file(m) is not None)
    for cell in fn.__closure__ or ():
        try:
            _refer(cell.cell_contents, walk)
        except ValueError:  # an empty cell
            pass
    for value in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
        _refer(value, walk)


def _globals(code: types.CodeType) -> Iterable[str]:
    """The global names `code` (and the functions nested in it) reads; attribute names are
    not globals (`triton_matmul.candidate_source` reads only `triton_matmul`)."""
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            yield ins.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _globals(const)


def _imports(code: types.CodeType) -> Iterable[str]:
    """The modules `code` (and the functions nested in it) imports: `from a.b import c` is a.b.c
    where that is a module, else a.b."""
    groups: list[tuple[str, list[str]]] = []
    for ins in dis.get_instructions(code):
        if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str):
            groups.append((ins.argval, []))
        elif ins.opname == "IMPORT_FROM" and groups:
            groups[-1][1].append(str(ins.argval))
    for module, names in groups:
        subs = [f"{module}.{n}" for n in names if _module_file(f"{module}.{n}") is not None]
        yield from subs if names and len(subs) == len(names) else [module, *subs]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _imports(const)


def _closure(roots: Iterable[str]) -> dict[str, str]:
    """{module name: file} of `roots` and of every module of ours they import, transitively."""
    out: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        path = _module_file(name)
        if path is None:
            continue
        out[name] = path
        package = name if Path(path).name == "__init__.py" else name.rpartition(".")[0]
        try:
            tree = ast.parse(Path(path).read_bytes(), filename=path)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):  # imports at the top and inside function bodies
            if isinstance(node, ast.Import):
                todo.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                try:
                    base = (
                        importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                        if node.level
                        else (node.module or "")
                    )
                except (ImportError, ValueError):
                    continue
                for alias in node.names:
                    sub = f"{base}.{alias.name}"  # `from package import module` names a module
                    todo.append(sub if alias.name != "*" and _module_file(sub) else base)
    return out
