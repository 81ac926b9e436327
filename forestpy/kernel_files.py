"""Generated kernel source files and their on-disk cache (shared by the kernel builders).

Numba caches the machine code of a ``cache=True`` function beside the file that defines
it, keyed by that file.  A kernel made from a template (a batched step specialised per
Riemann solver, a launcher's loop over pointwise bodies) is therefore written to a file
whose name is a hash of everything that ends up in its compiled code: the generated
text and the code of every Python function it calls (:func:`function_fingerprint`).
Changing either changes the file name, so a stale cache is never loaded; a later
process skips compilation.

The directory is ``$FORESTPY_CACHE_DIR``, else ``$XDG_CACHE_HOME/forestpy/kernels`` or
``~/.cache/forestpy/kernels``; callers fall back to a temporary directory (and no disk
caching) when it cannot be written.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import numpy as np
from numba.core.registry import CPUDispatcher

__all__ = ["cache_dir", "function_fingerprint", "import_file", "write_once"]


def cache_dir() -> Path:
    """Where generated kernel modules (and Numba's cache of them) are kept."""
    env = os.environ.get("FORESTPY_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "forestpy" / "kernels"


def _code_fingerprint(code: types.CodeType, h) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_fingerprint(c, h)
        elif isinstance(c, frozenset):  # ``x in {...}``: its order varies by process
            h.update(repr(sorted(map(repr, c))).encode())
        else:
            h.update(repr(c).encode())


def function_fingerprint(fn, h, seen: set) -> None:
    """Update the hash ``h`` with the code of ``fn`` (plain or ``numba.njit``), the
    scalar globals it reads (frozen into compiled code) and, recursively, the functions
    it calls through its globals; ``seen`` the functions already hashed."""
    py = fn.py_func if isinstance(fn, CPUDispatcher) else fn
    if py in seen:
        return
    seen.add(py)
    h.update(f"{py.__module__}.{py.__qualname__}".encode())
    _code_fingerprint(py.__code__, h)
    names = set()
    stack = [py.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    for name in sorted(names):
        value = py.__globals__.get(name)
        if isinstance(value, CPUDispatcher) or isinstance(value, types.FunctionType):
            function_fingerprint(value, h, seen)
        elif isinstance(value, (bool, int, float, complex, str, tuple, np.number)):
            h.update(f"{name}={value!r}".encode())  # frozen into the compiled code
        elif isinstance(value, types.ModuleType):
            h.update(f"{name}=module {value.__name__}".encode())


def write_once(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it holds it already (atomically: concurrent
    processes write identical text)."""
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def import_file(path: Path, name: str):
    """Import the module file ``path`` as ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
