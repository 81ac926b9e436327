"""Per-solver kernel modules, generated from :mod:`.kernel_template` and cached on disk.

``kernel_module(riemann)`` returns a module holding ``engine`` (the batched step) and
``fluct`` (batched fluctuation sums) for one Riemann solver.  The module is a copy of
the template with the solver's sizes in its header, written to a file whose name is a
hash of the template and of the solver's code (the bytecode, constants and referenced
scalar globals of ``rpn2``/``rpt2`` and of every ``numba.njit`` helper they call).  The
kernels carry ``cache=True``, so Numba stores their machine code beside that file and
a later process skips compilation (about 10-15 s per solver).  Changing the physics or
the template changes the file name, so a stale cache is never loaded.

The directory is ``$FORESTPY_CACHE_DIR``, else ``$XDG_CACHE_HOME/forestpy`` or
``~/.cache/forestpy``; when it cannot be written the module goes to a temporary
directory and is compiled without disk caching.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import types
from pathlib import Path

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

__all__ = ["kernel_module", "cache_dir", "physics_fingerprint"]

_TEMPLATE = Path(__file__).with_name("kernel_template.py")
_BEGIN = "# forestpy-kernel-header-begin"
_END = "# forestpy-kernel-header-end"
_MODULES: dict = {}


def cache_dir() -> Path:
    """Where generated kernel modules (and Numba's cache of them) are kept."""
    env = os.environ.get("FORESTPY_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "forestpy" / "kernels"


def _code_fingerprint(code: types.CodeType, h, seen) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_fingerprint(c, h, seen)
        else:
            h.update(repr(c).encode())


def _function_fingerprint(fn, h, seen) -> None:
    py = fn.py_func if isinstance(fn, CPUDispatcher) else fn
    if py in seen:
        return
    seen.add(py)
    h.update(f"{py.__module__}.{py.__qualname__}".encode())
    _code_fingerprint(py.__code__, h, seen)
    names = set()
    stack = [py.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    for name in sorted(names):
        value = py.__globals__.get(name)
        if isinstance(value, CPUDispatcher) or isinstance(value, types.FunctionType):
            _function_fingerprint(value, h, seen)
        elif isinstance(value, (bool, int, float, complex, str, tuple, np.number)):
            h.update(f"{name}={value!r}".encode())  # frozen into the compiled code
        elif isinstance(value, types.ModuleType):
            h.update(f"{name}=module {value.__name__}".encode())


def physics_fingerprint(riemann) -> str:
    """Hash of everything of ``riemann`` that ends up in the compiled kernels."""
    h = hashlib.sha256()
    h.update(f"{riemann.num_eqn},{riemann.num_waves},{bool(riemann.fwave)}".encode())
    seen: set = set()
    for fn in (riemann.rpn2, riemann.rpt2):
        if fn is not None:
            _function_fingerprint(fn, h, seen)
        else:
            h.update(b"none")
    return h.hexdigest()


def _module_text(riemann, cache: bool) -> str:
    text = _TEMPLATE.read_text()
    head, rest = text.split(_BEGIN, 1)
    _, tail = rest.split(_END, 1)
    header = (
        f"{_BEGIN}\n"
        # no solver name here: solvers with the same physics (a renamed copy) share
        # the file, and so Numba's cache of it, instead of rewriting it in turn
        "# generated for a Riemann solver of these sizes; RPN2/RPT2 are set on import\n"
        f"MEQN = {int(riemann.num_eqn)}\n"
        f"MWAVES = {int(riemann.num_waves)}\n"
        f"USE_FWAVE = {bool(riemann.fwave)}\n"
        f"CACHE = {bool(cache)}\n"
        "RPN2 = None\n"
        "RPT2 = None\n"
        f"{_END}"
    )
    return head + header + tail


def _write_once(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # atomic: concurrent processes write identical text


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def kernel_module(riemann, jit_pointwise):
    """The kernel module of ``riemann`` (generated, imported and cached per process).

    ``jit_pointwise`` turns a pointwise Python function into the Numba function the
    kernels call (see :func:`.step_kernel.jit_pointwise`).
    """
    key = (riemann.rpn2, riemann.rpt2, bool(riemann.fwave), int(riemann.num_eqn),
           int(riemann.num_waves))
    module = _MODULES.get(key)
    if module is not None:
        return module
    tag = hashlib.sha256(
        (physics_fingerprint(riemann) + _TEMPLATE.read_text()
         + Path(__file__).read_text() + numba.__version__
         + np.__version__ + sys.version).encode()
    ).hexdigest()[:20]
    name = f"forestpy_kernel_{tag}"
    try:
        path = cache_dir() / f"{name}.py"
        _write_once(path, _module_text(riemann, cache=True))
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="forestpy_kernels_")) / f"{name}.py"
        _write_once(path, _module_text(riemann, cache=False))
    module = _import(path, name)
    module.RPN2 = jit_pointwise(riemann.rpn2)
    if riemann.rpt2 is not None:
        module.RPT2 = jit_pointwise(riemann.rpt2)
    else:
        module.RPT2 = _no_transverse
    _MODULES[key] = module
    return module


@numba.njit(_nrt=False, error_model="numpy", boundscheck=False)
def _no_transverse(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Stand-in ``rpt2`` for solvers without one (only used with transverse_waves=0)."""
