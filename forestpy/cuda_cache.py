"""Compiled CUDA kernels kept on disk between processes.

A first GPU run compiles every kernel it launches: 27 s of a 54 s Okushiri run on an
H200, 12 s of it the step kernel (``docs/performance.md``).  Numba's own cache cannot
keep them: forestpy's kernels are closures over compile-time constants and device
functions, or are made with ``exec`` from templates, and Numba keys a cache by the
file that defines a function.  So :class:`~forestpy.cuda_device.FastKernel` keeps the
linked machine code (the cubin) itself, keyed by a hash of everything that goes into
the compiled code (:func:`kernel_fingerprint`):

* the kernel's code and, recursively, the code of every function it calls through its
  globals, its closure cells and the modules it reads attributes from (device
  functions included), with the scalar and array constants they read (frozen into the
  compiled code);
* the argument types, Numba's target options (register cap, ...), whether multiply-adds
  are contracted (:func:`forestpy.backend.contract_multiply_add`), the device's compute
  capability and the versions of Python, Numba and numba-cuda.

Anything the fingerprint cannot vouch for (an object that is not code, a scalar, a
tuple or an array) makes the kernel uncached: it is compiled as before.  A hit loads
the cubin and launches it through the same marshalling as a compiled kernel, so the
results are bitwise those of a fresh compilation.  Files live in
``cache_dir() / "cuda"`` (:mod:`forestpy.kernel_files`); ``FORESTPY_CUDA_CACHE=0``
turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import types
from pathlib import Path

import numpy as np

from forestpy.kernel_files import _code_fingerprint, cache_dir

__all__ = ["kernel_fingerprint", "enabled", "load", "store", "uncacheable_reason"]

_FORMAT = "forestpy-cuda-cubin-1"


def enabled() -> bool:
    """Whether compiled kernels are read from and written to disk."""
    return os.environ.get("FORESTPY_CUDA_CACHE", "1") != "0"


class _Uncacheable(Exception):
    pass


def _value(name: str, value, h, seen: set) -> None:
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes,
                                           np.number, np.bool_)):
        h.update(f"{name}={type(value).__name__}:{value!r}".encode())
    elif isinstance(value, tuple):
        h.update(f"{name}=tuple{len(value)}".encode())
        for i, v in enumerate(value):
            _value(f"{name}[{i}]", v, h, seen)
    elif isinstance(value, np.ndarray):
        h.update(f"{name}=array {value.dtype} {value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, types.ModuleType):
        h.update(f"{name}=module {value.__name__}".encode())
    elif isinstance(value, types.FunctionType) or hasattr(value, "py_func"):
        _function(value, h, seen)
    elif isinstance(value, (type, np.dtype)) or type(value).__module__.startswith(
            ("numba", "numpy")):
        # classes, dtypes, Numba types and intrinsics (``float64``, ``cuda.local``, ...)
        h.update(f"{name}=object {type(value).__module__}.{type(value).__qualname__} "
                 f"{value!r}".encode())
    else:
        raise _Uncacheable(f"{name}: {type(value).__qualname__}")


def _function(fn, h, seen: set) -> None:
    options = getattr(fn, "targetoptions", None)
    py = getattr(fn, "py_func", fn)
    if not isinstance(py, types.FunctionType):
        raise _Uncacheable(repr(fn))
    if id(py) in seen:
        return
    seen.add(id(py))
    h.update(f"def {py.__module__}.{py.__qualname__}".encode())
    if options:
        h.update(repr(sorted((k, repr(v)) for k, v in options.items())).encode())
    _code_fingerprint(py.__code__, h)
    if py.__defaults__:
        _value("defaults", tuple(py.__defaults__), h, seen)
    names: set = set()
    stack = [py.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    for cell_name, cell in zip(py.__code__.co_freevars, py.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            raise _Uncacheable(f"empty cell {cell_name}") from None
        _value(cell_name, contents, h, seen)
    glob = py.__globals__
    modules = []
    for name in sorted(names):
        if name in glob:
            value = glob[name]
            _value(name, value, h, seen)
            if isinstance(value, types.ModuleType):
                modules.append(value)
    # ``module.function`` inside the kernel: the attribute's code too (Numba resolves
    # it at compile time)
    for module in modules:
        for name in sorted(names):
            attr = getattr(module, name, None)
            if isinstance(attr, types.FunctionType) or (
                    hasattr(attr, "py_func") and isinstance(attr.py_func, types.FunctionType)):
                _function(attr, h, seen)


def kernel_fingerprint(dispatcher) -> str | None:
    """A hash of the code a kernel compiles from (see the module docstring), or None
    when something it depends on cannot be fingerprinted."""
    import numba

    h = hashlib.sha256(_FORMAT.encode())
    h.update(f"{sys.version} {numba.__version__} {_numba_cuda_version()}".encode())
    try:
        _function(dispatcher, h, set())
    except (_Uncacheable, RecursionError):
        return None
    return h.hexdigest()


def uncacheable_reason(dispatcher) -> str | None:
    """What keeps a kernel out of the cache (None: nothing)."""
    try:
        _function(dispatcher, hashlib.sha256(), set())
    except (_Uncacheable, RecursionError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _numba_cuda_version() -> str:
    try:
        from importlib.metadata import version

        return version("numba-cuda")
    except Exception:  # noqa: BLE001 - Numba's built-in CUDA target
        return "builtin"


def _path(fingerprint: str, argkinds: tuple, cc) -> Path:
    from forestpy.backend import _FMA

    key = hashlib.sha256(
        f"{fingerprint} {argkinds!r} {cc!r} fma={_FMA['enabled']!r}".encode()).hexdigest()
    return cache_dir() / "cuda" / f"{key[:40]}.pkl"


def load(fingerprint: str, argkinds: tuple, cc):
    """``(entry_name, argument kinds, cubin)`` kept for this kernel, or None."""
    path = _path(fingerprint, argkinds, cc)
    try:
        with open(path, "rb") as f:
            record = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        return None
    return record["entry_name"], tuple(record["argkinds"]), record["cubin"]


def store(fingerprint: str, argkinds: tuple, cc, entry_name: str, kinds: tuple,
          cubin: bytes) -> None:
    """Keep a compiled kernel (atomically; a failure to write only loses the cache)."""
    path = _path(fingerprint, argkinds, cc)
    record = {"format": _FORMAT, "entry_name": entry_name, "argkinds": list(kinds),
              "cubin": bytes(cubin)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass
