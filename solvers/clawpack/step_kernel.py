"""Batched, dimensionally unsplit wave-propagation step on a batch of patches.

This is the algorithm of Clawpack 4.x's ``step2``/``flux2`` (LeVeque 2002, chapters 20
and 21): Riemann solves at every cell interface, second-order corrections with wave
limiters, and transverse propagation of the normal fluctuations, accumulated as
fluctuation "fluxes" ``fm``/``fp`` (x) and ``gm``/``gp`` (y).  The interior of every
patch is then updated in flux form::

    q[i,j] -= dt/(kappa dx) * (fm[i+1,j] - fp[i,j]) + dt/(kappa dy) * (gm[i,j+1] - gp[i,j])

with ``fm = amdq + F~`` and ``fp = -apdq + F~`` at every interface (``F~`` holding the
second-order and transverse terms), ``kappa`` the capacity (1 without capacity).

Indexing conventions (interior numbering, ``mbc`` ghost cells each side):
cell ``i`` sits at array index ``i + mbc``; x-interface ``i`` lies between cells
``i-1`` and ``i`` (so interfaces ``0`` and ``mx`` are the patch edges); likewise in y.

The pointwise ``rpn2``/``rpt2`` of the :class:`~forestpy.vtable.RiemannSolver` are
compiled with Numba (without the NRT, force-inlined) and called from inside the kernels
of :mod:`.kernel_template`, so LLVM inlines the physics; :mod:`.kernel_cache` keeps the
compiled kernels of each solver on disk.  A solver with the work-sharing pieces of
:mod:`forestpy.vtable` (``cell_state``, ``edge_state``, ``rpn2e``, ``rpt2e``) has them
called instead: each cell state once per cell and sweep, each interface state once for
the normal and both transverse solves.  ``FORESTPY_WORK_SHARING=0`` in the environment
(or ``make_step_kernel(..., work_sharing=False)``) makes the kernel call the composed
``rpn2``/``rpt2`` instead: the same results, bitwise, for the built-in solvers.
"""

from __future__ import annotations

import os

import numba
import numpy as np

from forestpy.cuda_device import recompile_tree

from .kernel_cache import kernel_module

__all__ = ["make_step_kernel", "jit_pointwise", "work_sharing_default"]

_OPTS = {"error_model": "numpy", "boundscheck": False, "fastmath": False, "nogil": True}

_KERNELS: dict = {}
_JITTED: dict = {}


def jit_pointwise(func):
    """Return ``func`` (plain or ``njit``) compiled without the Numba runtime (NRT),
    force-inlined, with all the (not parallel) ``njit`` helpers it calls likewise
    (cached per function).

    With the NRT, every array argument of a compiled function is reference counted
    (atomic operations) on every call, which costs more than the shallow-water Riemann
    solve itself.  The pointwise solvers must not allocate, so they need no NRT; LLVM
    still inlines them into the kernel.
    """
    if func is None:
        return None
    return recompile_tree(func, numba.njit(forceinline=True, _nrt=False, **_OPTS), _JITTED,
                          follow=lambda g: not g.targetoptions.get("parallel"))


_ROWS: dict = {}


def _all_rows(npatch: int) -> np.ndarray:
    """``arange(npatch)`` (cached): the patch list of a whole step."""
    got = _ROWS.get(npatch)
    if got is None:
        if len(_ROWS) > 64:
            _ROWS.clear()
        got = _ROWS[npatch] = np.arange(npatch, dtype=np.int64)
    return got


def work_sharing_default() -> bool:
    """Whether step kernels use the work-sharing pieces of a solver by default: yes,
    unless the environment sets ``FORESTPY_WORK_SHARING=0``."""
    return os.environ.get("FORESTPY_WORK_SHARING", "1").strip() not in ("0", "false", "off")


def make_step_kernel(riemann, *, order=2, transverse_waves=2, capacity_index=-1,
                     work_sharing=None):
    """Compiled batched step for ``riemann`` (a :class:`~forestpy.vtable.RiemannSolver`).

    Returns a Python function around the solver's compiled engine (generated from
    :mod:`.kernel_template` and cached on disk by :mod:`.kernel_cache`)::

        kernel(q, mbc, aux, qnew, dx, dy, dt, params, limiter_codes, cfl_out, edge_out,
               rows=None)

    q, qnew : float64 (npatch, meqn, my + 2 mbc, mx + 2 mbc)
        Input with ghost cells filled; ``qnew`` receives the updated interior (its ghost
        cells are not touched).  ``q`` and ``qnew`` must not be the same array.
    mbc : int
        Ghost-cell width, at least 2.
    aux : float64 (npatch, maux, my + 2 mbc, mx + 2 mbc)
        Aux arrays with ghost cells (``maux`` may be 0).
    dx, dy : float64 (npatch,)
        Cell sizes of each patch; ``dt`` is a scalar.
    params : float64 array of the solver's parameters.
    limiter_codes : int array (num_waves,)
        Limiter of each wave family (codes of :data:`LIMITERS`).
    cfl_out : float64 (npatch,)
        Receives the largest Courant number ``max(dt |s| / (kappa d))`` over the
        interfaces ``0..mx`` of rows ``0..my-1`` and ``0..my`` of columns ``0..mx-1``
        (Clawpack's ``max(dtdx[i] s, -dtdx[i-1] s)`` for capacity).
    edge_out : float64 (npatch, 4, meqn, max(mx, my))
        Edge fluctuation fluxes (not multiplied by dt/dx): side 0 ``fp`` at ``i = 0``
        (index ``j``), side 1 ``fm`` at ``i = mx``, side 2 ``gp`` at ``j = 0`` (index
        ``i``), side 3 ``gm`` at ``j = my``; unused entries are set to 0.
    rows : int64 array, optional
        Step only these patches (indices into every per-patch array); the entries of
        the other patches in ``qnew``, ``cfl_out`` and ``edge_out`` are not touched.

    Options (passed to the engine at run time, so all variants share one compilation):
    ``order`` 1 or 2; ``transverse_waves`` 0, 1
    (increment waves) or 2 (also correction waves); ``capacity_index`` the aux
    component holding the capacity ``kappa`` (-1: none).

    ``work_sharing``: call the solver's work-sharing pieces where it has them (default:
    :func:`work_sharing_default`); ``False`` calls ``rpn2``/``rpt2``.
    """
    order = int(order)
    transverse_waves = int(transverse_waves)
    capacity_index = int(capacity_index)
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order}")
    if transverse_waves not in (0, 1, 2):
        raise ValueError(f"transverse_waves must be 0, 1 or 2, got {transverse_waves}")
    if transverse_waves > 0 and riemann.rpt2 is None:
        raise ValueError(
            f"Riemann solver {riemann.name!r} has no rpt2; use transverse_waves=0"
        )
    if work_sharing is None:
        work_sharing = work_sharing_default()
    shared = bool(work_sharing and riemann.shares_work)
    key = (riemann.rpn2, riemann.rpt2 if transverse_waves else None, bool(riemann.fwave),
           int(riemann.num_eqn), int(riemann.num_waves), order, transverse_waves,
           max(capacity_index, -1), shared, riemann.cell_state, riemann.edge_state,
           riemann.rpn2e, riemann.rpt2e)
    kernel = _KERNELS.get(key)
    if kernel is None:
        engine = kernel_module(riemann, jit_pointwise, shared).engine
        capa = max(capacity_index, -1)

        def kernel(q, mbc, aux, qnew, dx, dy, dt, params, limiter_codes, cfl_out, edge_out,
                   rows=None):
            if rows is None:
                rows = _all_rows(q.shape[0])
            engine(order, transverse_waves, capa, q, mbc, aux, qnew, dx, dy, dt, params,
                   limiter_codes, cfl_out, edge_out, rows, numba.get_num_threads())

        _KERNELS[key] = kernel
    return kernel
