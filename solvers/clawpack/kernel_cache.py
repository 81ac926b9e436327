"""Per-solver kernel modules, generated from :mod:`.kernel_template` and cached on disk.

``kernel_module(riemann)`` returns a module holding ``engine`` (the batched step) and
``fluct`` (batched fluctuation sums) for one Riemann solver; for a solver with the
work-sharing pieces (:mod:`forestpy.vtable`) its step calls them, unless
``work_sharing=False`` (a separate module whose step calls ``rpn2``/``rpt2``, the same
results bitwise for the built-in solvers: the comparison the tests make).  The module is a copy of
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
import sys
import tempfile
from pathlib import Path

import numba
import numpy as np

from forestpy.kernel_files import cache_dir, function_fingerprint, import_file, write_once

__all__ = ["kernel_module", "cache_dir", "physics_fingerprint"]

_TEMPLATE = Path(__file__).with_name("kernel_template.py")
#: The modules the template imports compiled code from: their text is part of the kernel
#: module's name, since Numba's disk cache of that module checks only its own file.
_IMPORTED = tuple(Path(__file__).with_name(n) for n in ("limiters.py", "stack_arrays.py"))
_BEGIN = "# forestpy-kernel-header-begin"
_END = "# forestpy-kernel-header-end"
_MODULES: dict = {}


def physics_fingerprint(riemann) -> str:
    """Hash of everything of ``riemann`` that ends up in the compiled kernels."""
    h = hashlib.sha256()
    h.update(f"{riemann.num_eqn},{riemann.num_waves},{bool(riemann.fwave)}".encode())
    seen: set = set()
    for fn in (riemann.rpn2, riemann.rpt2, riemann.cell_state, riemann.edge_state,
               riemann.rpn2e, riemann.rpt2e):
        if fn is not None:
            function_fingerprint(fn, h, seen)
        else:
            h.update(b"none")
    return h.hexdigest()


def _module_text(riemann, cache: bool, shared: bool = False) -> str:
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
        f"SHARED = {bool(shared)}\n"
        f"NCS = {max(int(riemann.num_cell_state), 1)}\n"
        f"NES = {max(int(riemann.num_edge_state), 1)}\n"
        f"HAS_EDGE = {bool(shared and riemann.edge_state is not None)}\n"
        "CELL_STATE = None\n"
        "EDGE_STATE = None\n"
        "RPN2E = None\n"
        "RPT2E = None\n"
        f"{_END}"
    )
    return head + header + tail


def kernel_module(riemann, jit_pointwise, work_sharing: bool = True):
    """The kernel module of ``riemann`` (generated, imported and cached per process).

    ``jit_pointwise`` turns a pointwise Python function into the Numba function the
    kernels call (see :func:`.step_kernel.jit_pointwise`).  ``work_sharing``: the step
    calls the solver's work-sharing pieces where it has them (``False``: always
    ``rpn2``/``rpt2``).
    """
    shared = bool(work_sharing and riemann.shares_work)
    key = (riemann.rpn2, riemann.rpt2, bool(riemann.fwave), int(riemann.num_eqn),
           int(riemann.num_waves), shared, riemann.cell_state, riemann.edge_state,
           riemann.rpn2e, riemann.rpt2e)
    module = _MODULES.get(key)
    if module is not None:
        return module
    tag = hashlib.sha256(
        (physics_fingerprint(riemann) + f"shared={shared}" + _TEMPLATE.read_text()
         + Path(__file__).read_text() + "".join(f.read_text() for f in _IMPORTED)
         + numba.__version__
         + np.__version__ + sys.version).encode()
    ).hexdigest()[:20]
    name = f"forestpy_kernel_{tag}"
    try:
        path = cache_dir() / f"{name}.py"
        write_once(path, _module_text(riemann, cache=True, shared=shared))
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="forestpy_kernels_")) / f"{name}.py"
        write_once(path, _module_text(riemann, cache=False, shared=shared))
    module = import_file(path, name)
    module.RPN2 = jit_pointwise(riemann.rpn2)
    if riemann.rpt2 is not None:
        module.RPT2 = jit_pointwise(riemann.rpt2)
    else:
        module.RPT2 = _no_transverse
    if shared:
        module.CELL_STATE = jit_pointwise(riemann.cell_state)
        module.RPN2E = jit_pointwise(riemann.rpn2e)
        if riemann.edge_state is not None:
            module.EDGE_STATE = jit_pointwise(riemann.edge_state)
        module.RPT2E = (jit_pointwise(riemann.rpt2e) if riemann.rpt2e is not None
                        else _no_transverse_e)
    _MODULES[key] = module
    return module


@numba.njit(_nrt=False, error_model="numpy", boundscheck=False)
def _no_transverse(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):
    """Stand-in ``rpt2`` for solvers without one (only used with transverse_waves=0)."""


@numba.njit(_nrt=False, error_model="numpy", boundscheck=False)
def _no_transverse_e(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq, bmasdq,
                     bpasdq):
    """Stand-in ``rpt2e`` for solvers without ``rpt2`` (only used with
    transverse_waves=0)."""
