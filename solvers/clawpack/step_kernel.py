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

import numba
import numpy as np
from numba import prange
from numba.core.registry import CPUDispatcher

from .limiters import limiter_apply

__all__ = ["make_step_kernel", "jit_pointwise"]

_OPTS = {"error_model": "numpy", "boundscheck": False, "fastmath": False, "nogil": True}

_KERNELS: dict = {}
_ROWS: dict = {}
_JITTED: dict = {}


def jit_pointwise(func):
    """Return ``func`` compiled with ``numba.njit(inline="always")`` (cached per function)."""
    if func is None:
        return None
    try:
        return _JITTED[func]
    except KeyError:
        pass
    py = func.py_func if isinstance(func, CPUDispatcher) else func
    # inline at Numba-IR level: no per-call argument reference counting
    jf = numba.njit(inline="always", **_OPTS)(py)
    _JITTED[func] = jf
    return jf


def _build_flux_row(rpn2, rpt2, meqn, mwaves, order, transverse_waves, fwave):
    """One sweep along a row (x) or column (y): Clawpack's ``flux2``.

    Works on a gathered, contiguous line ``q1d[k, m]`` (``k`` = array index along the
    sweep).  Adds the normal fluctuation fluxes into ``Fm``/``Fp[r, k, m]`` (interface
    ``k`` of line ``r``) and the transverse corrections into ``Gm``/``Gp[k, r, m]``
    (lower edge of cell ``k`` of line ``r``) and ``[k, r + 1, m]`` (its upper edge).
    Returns the largest Courant number over interfaces ``mbc .. mbc + n``.
    """
    key = (rpn2, rpt2, meqn, mwaves, order, transverse_waves, fwave)
    if key in _ROWS:
        return _ROWS[key]

    second = order == 2
    do_trans = transverse_waves >= 1
    corr_trans = transverse_waves == 2 and order == 2
    use_fwave = bool(fwave)
    if rpt2 is None:

        def rpt2(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq):  # noqa: ARG001
            pass

        rpt2 = numba.njit(**_OPTS)(rpt2)

    @numba.njit(**_OPTS)
    def flux_row(ixy, n, mbc, r, q1d, auxm, aux0, auxp, dtdx1d, params, lim,
                 wave, s, amdq, apdq, cq, Fm, Fp, Gm, Gp, buf, wbuf):
        # The pointwise solvers only ever see the small contiguous buffers of ``buf``
        # (no array views are created per interface: views cost reference counting).
        ql = buf[0]
        qr = buf[1]
        sv = buf[2]
        am = buf[3]
        ap = buf[4]
        asdq = buf[5]
        bm = buf[6]
        bp = buf[7]
        al = buf[8]
        ar = buf[9]
        a1 = buf[10]
        a2 = buf[11]
        a3 = buf[12]
        maux = aux0.shape[1]
        # normal Riemann problems at interfaces -1 .. n+1 (all the limiter needs)
        for k in range(mbc - 1, mbc + n + 2):
            for m in range(meqn):
                ql[m] = q1d[k - 1, m]
                qr[m] = q1d[k, m]
            for a in range(maux):
                al[a] = aux0[k - 1, a]
                ar[a] = aux0[k, a]
            rpn2(ixy, ql, qr, al, ar, params, wbuf, sv, am, ap)
            for p in range(mwaves):
                s[k, p] = sv[p]
            for m in range(meqn):
                amdq[k, m] = am[m]
                apdq[k, m] = ap[m]
                for p in range(mwaves):
                    wave[k, m, p] = wbuf[m, p]
        cfl = 0.0
        for k in range(mbc, mbc + n + 1):
            dl = dtdx1d[k - 1]
            dr = dtdx1d[k]
            for p in range(mwaves):
                sp = s[k, p]
                c = max(dr * sp, -dl * sp)
                if c > cfl:
                    cfl = c
            for m in range(meqn):
                cq[m] = 0.0
            if second:
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
                Fp[r, k, m] += -apdq[k, m] + 0.5 * cq[m]
            if do_trans:
                for m in range(meqn):
                    ql[m] = q1d[k - 1, m]
                    qr[m] = q1d[k, m]
                # left-going part enters cell k-1
                for m in range(meqn):
                    if corr_trans:
                        asdq[m] = amdq[k, m] + cq[m]
                    else:
                        asdq[m] = amdq[k, m]
                for a in range(maux):
                    a1[a] = auxm[k - 1, a]
                    a2[a] = aux0[k - 1, a]
                    a3[a] = auxp[k - 1, a]
                rpt2(ixy, 1, ql, qr, a1, a2, a3, params, asdq, bm, bp)
                c = 0.5 * dl
                for m in range(meqn):
                    t = c * bm[m]
                    Gm[k - 1, r, m] -= t
                    Gp[k - 1, r, m] -= t
                    t = c * bp[m]
                    Gm[k - 1, r + 1, m] -= t
                    Gp[k - 1, r + 1, m] -= t
                # right-going part enters cell k
                for m in range(meqn):
                    if corr_trans:
                        asdq[m] = apdq[k, m] - cq[m]
                    else:
                        asdq[m] = apdq[k, m]
                for a in range(maux):
                    a1[a] = auxm[k, a]
                    a2[a] = aux0[k, a]
                    a3[a] = auxp[k, a]
                rpt2(ixy, 2, ql, qr, a1, a2, a3, params, asdq, bm, bp)
                c = 0.5 * dr
                for m in range(meqn):
                    t = c * bm[m]
                    Gm[k, r, m] -= t
                    Gp[k, r, m] -= t
                    t = c * bp[m]
                    Gm[k, r + 1, m] -= t
                    Gp[k, r + 1, m] -= t
        return cfl

    _ROWS[key] = flux_row
    return flux_row


def _build_kernel(riemann, order, transverse_waves, capacity_index):
    meqn = int(riemann.num_eqn)
    mwaves = int(riemann.num_waves)
    rpn2 = jit_pointwise(riemann.rpn2)
    rpt2 = jit_pointwise(riemann.rpt2)
    flux_row = _build_flux_row(rpn2, rpt2, meqn, mwaves, order, transverse_waves,
                               bool(riemann.fwave))
    capa = int(capacity_index)
    use_capa = capa >= 0

    @numba.njit(**_OPTS)
    def run_chunk(lo, hi, q, mbc, aux, qnew, dx, dy, dt, params, lim, cfl_out, edge_out):
        nyt = q.shape[2]
        nxt = q.shape[3]
        my = nyt - 2 * mbc
        mx = nxt - 2 * mbc
        maux = aux.shape[1]
        nmax = max(nxt, nyt)
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
        nb = max(meqn, maux, mwaves, 1)
        buf = np.zeros((13, nb))
        wbuf = np.zeros((meqn, mwaves))

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
            # x-sweeps over rows j = -1 .. my
            for r in range(mbc - 1, mbc + my + 1):
                for k in range(nxt):
                    dtdx1d[k] = dtdx * kinv[r, k]
                c = flux_row(1, mx, mbc, r, qx[r], auxx[r - 1], auxx[r], auxx[r + 1], dtdx1d,
                             params, lim, wave, s, amdq, apdq, cq, fm, fp, gm, gp, buf, wbuf)
                if r >= mbc and r < mbc + my and c > cfl:
                    cfl = c
            # y-sweeps over columns i = -1 .. mx
            for r in range(mbc - 1, mbc + mx + 1):
                for k in range(nyt):
                    dtdx1d[k] = dtdy * kinv[k, r]
                c = flux_row(2, my, mbc, r, qy[r], auxy[r - 1], auxy[r], auxy[r + 1], dtdx1d,
                             params, lim, wave, s, amdq, apdq, cq, gm, gp, fm, fp, buf, wbuf)
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
    def kernel(q, mbc, aux, qnew, dx, dy, dt, params, limiter_codes, cfl_out, edge_out):
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
        if use_capa and capa >= aux.shape[1]:
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
            run_chunk(lo, hi, q, mbc, aux, qnew, dx, dy, dt, params, limiter_codes,
                      cfl_out, edge_out)

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
