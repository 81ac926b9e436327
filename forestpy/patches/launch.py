"""One GPU launcher for the pointwise bodies of the patch operations.

The ghost fill, the physical boundaries and the regrid transfer are written as bodies
that update one plan entry (or one cell of one patch); on the CPU a Numba ``prange`` loop
of the operation's own module runs them, on the GPU :func:`launch` does, one thread per
entry (AMReX's ``ParallelFor``: the loop is the launcher's, the work the body's).
Kernels are compiled the first time a GPU path asks for them, so CPU-only runs never
import ``numba.cuda``.

All array arguments must be device arrays (CuPy on a GPU; in Numba's CUDA simulator
NumPy arrays are the device arrays): a host NumPy array handed to a kernel on a real GPU
would be copied to the device and back at every launch, so :func:`launch` refuses them.
"""

from __future__ import annotations

import weakref

import numpy as np

from forestpy.cuda_device import cuda_device, fast_kernel, launch_kernel, launch_stream

__all__ = ["THREADS", "blocks", "component_mask", "launch", "launch_cells", "require_device"]

THREADS = 256
_KERNELS: dict = {}
_CONSTANTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def blocks(n: int) -> int:
    """Blocks of :data:`THREADS` threads covering ``n`` threads."""
    return (n + THREADS - 1) // THREADS


def require_device(backend, *arrays) -> None:
    """Refuse host NumPy arrays on a real GPU (see the module docstring)."""
    if getattr(backend, "simulator", False):
        return  # in the simulator NumPy arrays are the device arrays
    for a in arrays:
        if isinstance(a, np.ndarray):
            raise TypeError(
                "a GPU kernel received a host NumPy array: upload plans once per regrid "
                "(GhostPlan.to(backend), backend.to_device) and keep fields on the device"
            )


def component_mask(backend, meqn: int, components):
    """Device boolean mask (meqn,) of ``components``, uploaded once per backend and value.

    Used for the positive components of the ghost fill and the components negated at
    walls, so that a step uploads nothing.
    """
    key = (int(meqn), tuple(sorted({int(c) for c in components})))
    per_backend = _CONSTANTS.setdefault(backend, {})
    mask = per_backend.get(key)
    if mask is None:
        host = np.zeros(meqn, dtype=np.bool_)
        host[list(key[1])] = True
        mask = per_backend[key] = backend.to_device(host)
    return mask


# Kernel sources: ``args`` are the body's arguments before its index.  The kernel is made
# by ``exec`` because Numba-CUDA kernels take no ``*args``; ``cuda`` is a global of the
# generated function so that Numba's CUDA simulator can swap it for its fake module.
_ENTRY_SOURCE = """
def kernel(n, {args}):
    k = cuda.grid(1)
    if k < n:
        body({args}, k)
"""
_CELL_SOURCE = """
def kernel(n, my, mx, mbc, {args}):
    t = cuda.grid(1)
    if t < n * my * mx:
        c = t % (my * mx)
        body({args}, t // (my * mx), c // mx, c % mx, mbc)
"""


def _kernel(body, nargs: int, source: str):
    key = (body, nargs, source)
    kernel = _KERNELS.get(key)
    if kernel is None:
        from numba import cuda

        names = ", ".join(f"a{i}" for i in range(nargs))
        scope = {"cuda": cuda, "body": cuda_device(body)}
        exec(source.format(args=names), scope)
        kernel = _KERNELS[key] = fast_kernel(cuda.jit(scope["kernel"]))
    return kernel


def launch(body, n: int, *args, backend=None) -> None:
    """Run ``body(*args, k)`` for ``k < n`` on the GPU, one thread each (nothing when
    ``n == 0``).  ``body`` is a ``numba.njit`` function (compiled once for the device)."""
    if n == 0:
        return
    require_device(backend, *(a for a in args if hasattr(a, "shape")))
    launch_kernel(_kernel(body, len(args), _ENTRY_SOURCE), blocks(n), THREADS, launch_stream(),
                  n, *args)


def launch_cells(body, n: int, my: int, mx: int, mbc: int, *args, backend=None) -> None:
    """Run ``body(*args, k, j, i, mbc)`` for every interior cell ``(j, i)`` of the
    ``my x mx`` cells of ``n`` patches ``k``, one thread per cell."""
    if n == 0:
        return
    require_device(backend, *(a for a in args if hasattr(a, "shape")))
    launch_kernel(_kernel(body, len(args), _CELL_SOURCE), blocks(n * my * mx), THREADS,
                  launch_stream(), n, my, mx, mbc, *args)
