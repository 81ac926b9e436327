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
compiled with Numba and called from inside the kernel (the kernel is a closure over
them, so LLVM inlines the physics).  Compiled kernels are cached per solver and
options.
"""

from __future__ import annotations

import math
import types

import numba
import numpy as np
from numba import prange
from numba.core.registry import CPUDispatcher

from .limiters import limiter_apply

__all__ = ["make_step_kernel", "jit_pointwise"]

_OPTS = {"error_model": "numpy", "boundscheck": False, "fastmath": False, "nogil": True}

_KERNELS: dict = {}
_ROWS: dict = {}
_ENGINES: dict = {}
_JITTED: dict = {}


def _code_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _inline_tree(py):
    """Copy of the Python function ``py`` compiled without the Numba runtime (NRT),
    with every ``numba.njit`` function it references through its globals treated the
    same way.

    With the NRT, every array argument of a compiled function is reference counted
    (atomic operations) on every call, which costs more than the shallow-water Riemann
    solve itself.  The pointwise solvers must not allocate, so they need no NRT; LLVM
    still inlines them into the kernel.
    """
    done = _JITTED.get(py)
    if done is not None:
        return done
    new_globals = None
    for name in _code_names(py.__code__):
        g = py.__globals__.get(name)
        if isinstance(g, CPUDispatcher) and not g.targetoptions.get("parallel"):
            if new_globals is None:
                new_globals = dict(py.__globals__)
            new_globals[name] = _inline_tree(g.py_func)
    if new_globals is not None:
        py2 = types.FunctionType(py.__code__, new_globals, py.__name__, py.__defaults__,
                                 py.__closure__)
        py2.__kwdefaults__ = py.__kwdefaults__
        py2.__qualname__ = py.__qualname__
        py2.__module__ = py.__module__
    else:
        py2 = py
    jf = numba.njit(forceinline=True, _nrt=False, **_OPTS)(py2)
    _JITTED[py] = jf
    return jf


def jit_pointwise(func):
    """Return ``func`` (plain or ``njit``) compiled without NRT, with all the ``njit``
    helpers it calls likewise (cached per function)."""
    if func is None:
        return None
    py = func.py_func if isinstance(func, CPUDispatcher) else func
    return _inline_tree(py)


def _build_flux_row(rpn2, rpt2, meqn, mwaves, fwave):
    """One sweep along a row (x) or column (y): Clawpack's ``flux2``.

    Works on a gathered, contiguous line ``q1d[k, m]`` (``k`` = array index along the
    sweep).  Adds the normal fluctuation fluxes into ``Fm``/``Fp[r, k, m]`` (interface
    ``k`` of line ``r``) and the transverse corrections into ``Gm``/``Gp[k, r, m]``
    (lower edge of cell ``k`` of line ``r``) and ``[k, r + 1, m]`` (its upper edge).
    Returns the largest Courant number over interfaces ``mbc .. mbc + n``.
    """
    key = (rpn2, rpt2, meqn, mwaves, fwave)
    if key in _ROWS:
        return _ROWS[key]

    use_fwave = bool(fwave)
    if rpt2 is None:

        def rpt2(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):  # noqa: ARG001
            pass

        rpt2 = numba.njit(_nrt=False, **_OPTS)(rpt2)

    @numba.njit(_nrt=False, **_OPTS)
    def flux_row(ixy, order, transverse_waves, n, mbc, r, q1d, auxm, aux0, auxp, dtdx1d,
                 params, lim, wave, s, amdq, apdq, cq, bm, bp, tlo, thi, Fm, Fp, Gm, Gp):
        # Compiled without the NRT: the per-interface array views handed to the
        # pointwise solvers are plain structs (no reference counting) that LLVM folds
        # away once the solvers are inlined.
        second = order == 2
        do_trans = transverse_waves >= 1
        corr_trans = transverse_waves == 2 and order == 2
        if do_trans:
            for k in range(mbc - 1, mbc + n + 1):
                for m in range(meqn):
                    tlo[k, m] = 0.0
                    thi[k, m] = 0.0
        # normal Riemann problems at interfaces -1 .. n+1 (all the limiter needs)
        for k in range(mbc - 1, mbc + n + 2):
            rpn2(ixy, q1d[k - 1], q1d[k], aux0[k - 1], aux0[k], params,
                 wave[k], s[k], amdq[k], apdq[k])
        cfl = 0.0
        for k in range(mbc, mbc + n + 1):
            dl = dtdx1d[k - 1]
            dr = dtdx1d[k]
            for p in range(mwaves):
                sp = s[k, p]
                c = max(dr * sp, -dl * sp)
                if c > cfl:
                    cfl = c
            if second:
                for m in range(meqn):
                    cq[m] = 0.0
                dtdxave = 0.5 * (dl + dr)
                for p in range(mwaves):
                    wn = 0.0
                    for m in range(meqn):
                        wn += wave[k, m, p] * wave[k, m, p]
                    if wn == 0.0:
                        continue
                    sp = s[k, p]
                    ku = k - 1 if sp > 0.0 else k + 1
                    dot = 0.0
                    for m in range(meqn):
                        dot += wave[ku, m, p] * wave[k, m, p]
                    phi = limiter_apply(lim[p], dot / wn)
                    asp = abs(sp)
                    if use_fwave:
                        c = phi * math.copysign(1.0, sp) * (1.0 - asp * dtdxave)
                    else:
                        c = phi * asp * (1.0 - asp * dtdxave)
                    for m in range(meqn):
                        cq[m] += c * wave[k, m, p]
                for m in range(meqn):
                    Fm[r, k, m] += amdq[k, m] + 0.5 * cq[m]
                    Fp[r, k, m] += 0.5 * cq[m] - apdq[k, m]
            else:
                for m in range(meqn):
                    Fm[r, k, m] += amdq[k, m]
                    Fp[r, k, m] -= apdq[k, m]
            if do_trans:
                if corr_trans:
                    # amdq/apdq of this interface are not needed any more
                    for m in range(meqn):
                        amdq[k, m] += cq[m]
                        apdq[k, m] -= cq[m]
                # left-going part enters cell k-1, right-going part cell k
                rpt2(ixy, 1, q1d[k - 1], q1d[k], auxm[k - 1], aux0[k - 1], auxp[k - 1],
                     params, amdq[k], bm, bp)
                c = 0.5 * dl
                for m in range(meqn):
                    tlo[k - 1, m] -= c * bm[m]
                    thi[k - 1, m] -= c * bp[m]
                rpt2(ixy, 2, q1d[k - 1], q1d[k], auxm[k], aux0[k], auxp[k],
                     params, apdq[k], bm, bp)
                c = 0.5 * dr
                for m in range(meqn):
                    tlo[k, m] -= c * bm[m]
                    thi[k, m] -= c * bp[m]
        if do_trans:
            # transverse corrections of the lower / upper edge of every touched cell go
            # equally into the minus and plus fluctuation fluxes of that edge
            for k in range(mbc - 1, mbc + n + 1):
                for m in range(meqn):
                    t = tlo[k, m]
                    Gm[k, r, m] += t
                    Gp[k, r, m] += t
                    t = thi[k, m]
                    Gm[k, r + 1, m] += t
                    Gp[k, r + 1, m] += t
        return cfl

    _ROWS[key] = flux_row
    return flux_row


def _build_engine(riemann):
    """Per-patch work of the step (``run_chunk``), compiled once per solver; the
    options are run-time arguments so that the variants share one compilation."""
    key = (riemann.rpn2, riemann.rpt2, bool(riemann.fwave), int(riemann.num_eqn),
           int(riemann.num_waves))
    if key in _ENGINES:
        return _ENGINES[key]
    meqn = int(riemann.num_eqn)
    mwaves = int(riemann.num_waves)
    rpn2 = jit_pointwise(riemann.rpn2)
    rpt2 = jit_pointwise(riemann.rpt2)
    flux_row = _build_flux_row(rpn2, rpt2, meqn, mwaves, bool(riemann.fwave))

    @numba.njit(**_OPTS)
    def run_chunk(order, transverse_waves, capa, lo, hi, q, mbc, aux, qnew, dx, dy, dt,
                  params, lim, cfl_out, edge_out):
        nyt = q.shape[2]
        nxt = q.shape[3]
        my = nyt - 2 * mbc
        mx = nxt - 2 * mbc
        maux = aux.shape[1]
        nmax = max(nxt, nyt)
        use_capa = capa >= 0
        # per-chunk scratch (reused for every patch of the chunk)
        qx = np.empty((nyt, nxt, meqn))
        qy = np.empty((nxt, nyt, meqn))
        auxx = np.empty((nyt, nxt, maux))
        auxy = np.empty((nxt, nyt, maux))
        kinv = np.ones((nyt, nxt))
        fm = np.empty((nyt, nxt, meqn))
        fp = np.empty((nyt, nxt, meqn))
        gm = np.empty((nxt, nyt, meqn))
        gp = np.empty((nxt, nyt, meqn))
        dtdx1d = np.empty(nmax)
        wave = np.zeros((nmax, meqn, mwaves))
        s = np.zeros((nmax, mwaves))
        amdq = np.zeros((nmax, meqn))
        apdq = np.zeros((nmax, meqn))
        cq = np.zeros(meqn)
        bm = np.zeros(meqn)
        bp = np.zeros(meqn)
        tlo = np.zeros((nmax, meqn))
        thi = np.zeros((nmax, meqn))

        for ip in range(lo, hi):
            dtdx = dt / dx[ip]
            dtdy = dt / dy[ip]
            # gather the patch into sweep-contiguous layouts
            for m in range(meqn):
                for j in range(nyt):
                    for i in range(nxt):
                        v = q[ip, m, j, i]
                        qx[j, i, m] = v
                        qy[i, j, m] = v
            for a in range(maux):
                for j in range(nyt):
                    for i in range(nxt):
                        v = aux[ip, a, j, i]
                        auxx[j, i, a] = v
                        auxy[i, j, a] = v
            if use_capa:
                for j in range(nyt):
                    for i in range(nxt):
                        kinv[j, i] = 1.0 / aux[ip, capa, j, i]
            fm[:] = 0.0
            fp[:] = 0.0
            gm[:] = 0.0
            gp[:] = 0.0

            cfl = 0.0
            ixy = 1
            # x-sweeps over rows j = -1 .. my
            for r in range(mbc - 1, mbc + my + 1):
                for k in range(nxt):
                    dtdx1d[k] = dtdx * kinv[r, k]
                c = flux_row(ixy, order, transverse_waves, mx, mbc, r, qx[r], auxx[r - 1],
                             auxx[r], auxx[r + 1], dtdx1d,
                             params, lim, wave, s, amdq, apdq, cq, bm, bp,
                             tlo, thi, fm, fp, gm, gp)
                if r >= mbc and r < mbc + my and c > cfl:
                    cfl = c
            ixy = 2
            # y-sweeps over columns i = -1 .. mx
            for r in range(mbc - 1, mbc + mx + 1):
                for k in range(nyt):
                    dtdx1d[k] = dtdy * kinv[k, r]
                c = flux_row(ixy, order, transverse_waves, my, mbc, r, qy[r], auxy[r - 1],
                             auxy[r], auxy[r + 1], dtdx1d,
                             params, lim, wave, s, amdq, apdq, cq, bm, bp,
                             tlo, thi, gm, gp, fm, fp)
                if r >= mbc and r < mbc + mx and c > cfl:
                    cfl = c
            cfl_out[ip] = cfl

            # flux-form update of the interior
            for j in range(mbc, mbc + my):
                for i in range(mbc, mbc + mx):
                    kc = kinv[j, i]
                    cx = dtdx * kc
                    cy = dtdy * kc
                    for m in range(meqn):
                        qnew[ip, m, j, i] = (q[ip, m, j, i]
                                             - cx * (fm[j, i + 1, m] - fp[j, i, m])
                                             - cy * (gm[i, j + 1, m] - gp[i, j, m]))

            # edge fluctuation fluxes for the coarse-fine correction
            edge_out[ip] = 0.0
            for m in range(meqn):
                for j in range(my):
                    edge_out[ip, 0, m, j] = fp[j + mbc, mbc, m]
                    edge_out[ip, 1, m, j] = fm[j + mbc, mbc + mx, m]
                for i in range(mx):
                    edge_out[ip, 2, m, i] = gp[i + mbc, mbc, m]
                    edge_out[ip, 3, m, i] = gm[i + mbc, mbc + my, m]

    @numba.njit(parallel=True, **_OPTS)
    def engine(order, transverse_waves, capa, q, mbc, aux, qnew, dx, dy, dt, params,
               limiter_codes, cfl_out, edge_out):
        npatch = q.shape[0]
        if q.shape[1] != meqn:
            raise ValueError("q.shape[1] does not match the Riemann solver's num_eqn")
        if mbc < 2:
            raise ValueError("mbc must be >= 2")
        my = q.shape[2] - 2 * mbc
        mx = q.shape[3] - 2 * mbc
        if mx < 1 or my < 1:
            raise ValueError("patch interior is empty for this mbc")
        if qnew.shape != q.shape:
            raise ValueError("qnew must have the shape of q")
        if (aux.shape[0] != npatch or aux.shape[2] != q.shape[2]
                or aux.shape[3] != q.shape[3]):
            raise ValueError("aux must have shape (npatch, maux, my + 2 mbc, mx + 2 mbc)")
        if capa >= aux.shape[1]:
            raise ValueError("capacity_index is out of range of aux")
        if limiter_codes.shape[0] < mwaves:
            raise ValueError("limiter_codes needs one entry per wave")
        if dx.shape[0] < npatch or dy.shape[0] < npatch or cfl_out.shape[0] < npatch:
            raise ValueError("dx, dy and cfl_out need one entry per patch")
        if (edge_out.shape[0] < npatch or edge_out.shape[1] < 4 or edge_out.shape[2] < meqn
                or edge_out.shape[3] < max(mx, my)):
            raise ValueError("edge_out must have shape (npatch, 4, meqn, max(mx, my))")
        if npatch == 0:
            return
        nchunk = min(npatch, numba.get_num_threads())
        for c in prange(nchunk):
            lo = (c * npatch) // nchunk
            hi = ((c + 1) * npatch) // nchunk
            run_chunk(order, transverse_waves, capa, lo, hi, q, mbc, aux, qnew, dx, dy, dt,
                      params, limiter_codes, cfl_out, edge_out)

    _ENGINES[key] = engine
    return engine


def _build_kernel(riemann, order, transverse_waves, capacity_index):
    engine = _build_engine(riemann)
    capa = max(int(capacity_index), -1)

    @numba.njit(**_OPTS)
    def kernel(q, mbc, aux, qnew, dx, dy, dt, params, limiter_codes, cfl_out, edge_out):
        # run-time (non-literal) option values, so that every variant shares the one
        # compiled engine of the solver instead of specialising it again
        zero = 0 * q.shape[0]
        engine(order + zero, transverse_waves + zero, capa + zero, q, mbc, aux, qnew,
               dx, dy, dt, params, limiter_codes, cfl_out, edge_out)

    return kernel


def make_step_kernel(riemann, *, order=2, transverse_waves=2, capacity_index=-1):
    """Compiled batched step for ``riemann`` (a :class:`~forestpy.vtable.RiemannSolver`).

    Returns a Numba function (callable from Python and from other ``njit`` code)::

        kernel(q, mbc, aux, qnew, dx, dy, dt, params, limiter_codes, cfl_out, edge_out)

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

    Options (compile-time, cached): ``order`` 1 or 2; ``transverse_waves`` 0, 1
    (increment waves) or 2 (also correction waves); ``capacity_index`` the aux
    component holding the capacity ``kappa`` (-1: none).
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
    key = (riemann.rpn2, riemann.rpt2 if transverse_waves else None, bool(riemann.fwave),
           int(riemann.num_eqn), int(riemann.num_waves), order, transverse_waves,
           max(capacity_index, -1))
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _build_kernel(riemann, order, transverse_waves, capacity_index)
        _KERNELS[key] = kernel
    return kernel
