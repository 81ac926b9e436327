"""Source of the batched wave-propagation kernels, specialised per Riemann solver.

This file is a *template*: :mod:`forestpy.solvers.clawpack.kernel_cache` copies it,
with the header below replaced by one solver's sizes, into a module file named by a
hash of this text and of the solver's code, imports that module, and sets ``RPN2`` and
``RPT2`` to the solver's compiled pointwise functions before the first call (and, for a
solver with the work-sharing pieces of :mod:`forestpy.vtable`, ``CELL_STATE``,
``EDGE_STATE``, ``RPN2E`` and ``RPT2E``, which the step kernel then calls instead of
``RPN2``/``RPT2`` when ``SHARED`` is true).  Because
the kernels then live in a real source file, Numba's ``cache=True`` keeps their machine
code on disk between processes; a change of the template or of the physics gives a
new file name, so a stale cache is never used.

Algorithm: Clawpack 4.x ``step2``/``flux2`` (LeVeque 2002, chapters 20 and 21); see
:mod:`forestpy.solvers.clawpack.step_kernel` for the conventions.
"""

import math

import numba
import numpy as np
from forestpy.solvers.clawpack.limiters import limiter_apply
from forestpy.solvers.clawpack.stack_arrays import local_vector
from numba import prange

# forestpy-kernel-header-begin
MEQN = 1
MWAVES = 1
USE_FWAVE = False
CACHE = False
RPN2 = None
RPT2 = None
SHARED = False
NCS = 1
NES = 1
HAS_EDGE = False
CELL_STATE = None
EDGE_STATE = None
RPN2E = None
RPT2E = None
# forestpy-kernel-header-end

_OPTS = {"error_model": "numpy", "boundscheck": False, "fastmath": False, "nogil": True}


@numba.njit(_nrt=False, forceinline=True, cache=CACHE, **_OPTS)
def _store_transverse(ixy, first, Gm, Gp, k, r, tl, th):
    """Put the transverse terms ``tl``/``th`` of the lower / upper edge of cell ``k`` of
    line ``r`` into the fluxes of the other direction (see :func:`flux_row`)."""
    if ixy == 2:
        for m in range(MEQN):
            t = tl[m]
            Gm[k, r, m] += t
            Gp[k, r, m] += t
            t = th[m]
            Gm[k, r + 1, m] += t
            Gp[k, r + 1, m] += t
    elif first:
        for m in range(MEQN):
            Gm[k, r, m] = 0.0 + tl[m]
            Gm[k, r + 1, m] = 0.0 + th[m]
    else:
        for m in range(MEQN):
            Gm[k, r, m] += tl[m]
            Gm[k, r + 1, m] = 0.0 + th[m]


@numba.njit(_nrt=False, cache=CACHE, **_OPTS)
def flux_row(ixy, order, transverse_waves, n, mbc, r, q1d, auxm, aux0, auxp, dtdx1d,
             params, lim, wave, s, amdq, apdq, Fm, Fp, Fb, Gm, Gp, first, cs, es):
    """One sweep along a row (x) or column (y): Clawpack's ``flux2``.

    Works on a line ``q1d[k, m]`` of the patch (``k`` = array index along the sweep): a
    view of ``q``, a row for the x-sweep and a column for the y-sweep.  Writes the
    normal fluctuation fluxes of interface ``k`` of line ``r`` into ``Fm``/``Fp[r, k,
    m]``, as ``Fb[r, k, m] +`` them (the transverse terms the other sweep has left
    there) when ``ixy == 2`` and as ``0.0 +`` them when ``ixy == 1``; and the
    transverse corrections into ``Gm``/``Gp[k, r, m]`` (lower edge of cell ``k`` of
    line ``r``) and ``[k, r + 1, m]`` (its upper edge): added to both when ``ixy ==
    2``, and when ``ixy == 1`` into ``Gm`` only (the y-sweep adds them to both of its
    fluxes), the upper edge written first (``first``: the first line also writes its
    lower edge).  So no flux array needs zeroing per patch, and every sum is formed
    from the same terms in the same order as accumulating into zeroed arrays would
    (``0.0 + x`` is written out: it is not ``x`` for ``x = -0.0``).  A cell's
    transverse terms are complete after its upper interface: they are carried from
    one interface to the next in registers and stored once.
    Returns the largest Courant number over interfaces ``mbc .. mbc + n``.

    With ``SHARED`` the solver's work-sharing pieces replace ``RPN2``/``RPT2``: ``cs[k]``
    holds the cell state of cell ``k`` of the line (computed once per step by
    ``run_chunk``), the interface state of each interface is computed once into
    ``es[k]``, and the normal solve and both transverse solves of that interface read
    them.  Compiled
    without the NRT: the per-interface array views handed to the pointwise solvers are
    plain structs (no reference counting) that LLVM folds away once they are inlined.
    ``ixy`` is a compile-time constant (one compilation per direction), so the
    solvers' component indices are constants too.
    """
    numba.literally(ixy)
    meqn = MEQN
    mwaves = MWAVES
    # per-interface temporaries on the stack: kept in registers once inlined
    cq = local_vector(MEQN)
    bm = local_vector(MEQN)
    bp = local_vector(MEQN)
    clo = local_vector(MEQN)
    chi = local_vector(MEQN)
    tl = local_vector(MEQN)
    th = local_vector(MEQN)
    second = order == 2
    do_trans = transverse_waves >= 1
    corr_trans = transverse_waves == 2 and order == 2
    if do_trans:
        # transverse terms of the cell left of the interface: the part its lower
        # interface gave (carried from the previous interface), lower and upper edge
        for m in range(meqn):
            clo[m] = 0.0
            chi[m] = 0.0
    # normal Riemann problems at interfaces -1 .. n+1 (all the limiter needs)
    if SHARED:
        if HAS_EDGE:
            # a loop of its own with unsigned indices (no negative-index wrap-around):
            # LLVM vectorises it where the line is contiguous
            one = np.uint64(1)
            for k in range(np.uint64(mbc - 1), np.uint64(mbc + n + 2)):
                e = EDGE_STATE(ixy, q1d[k - one], q1d[k], cs[k - one], cs[k],
                               aux0[k - one], aux0[k], params)
                for m in range(NES):
                    es[k, m] = e[m]
        for k in range(mbc - 1, mbc + n + 2):
            RPN2E(ixy, q1d[k - 1], q1d[k], cs[k - 1], cs[k], aux0[k - 1], aux0[k], params,
                  es[k], wave[k], s[k], amdq[k], apdq[k])
    else:
        for k in range(mbc - 1, mbc + n + 2):
            RPN2(ixy, q1d[k - 1], q1d[k], aux0[k - 1], aux0[k], params,
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
                if USE_FWAVE:
                    c = phi * math.copysign(1.0, sp) * (1.0 - asp * dtdxave)
                else:
                    c = phi * asp * (1.0 - asp * dtdxave)
                for m in range(meqn):
                    cq[m] += c * wave[k, m, p]
            if ixy == 1:
                for m in range(meqn):
                    Fm[r, k, m] = 0.0 + (amdq[k, m] + 0.5 * cq[m])
                    Fp[r, k, m] = 0.0 + (0.5 * cq[m] - apdq[k, m])
            else:
                for m in range(meqn):
                    Fm[r, k, m] = Fb[r, k, m] + (amdq[k, m] + 0.5 * cq[m])
                    Fp[r, k, m] = Fb[r, k, m] + (0.5 * cq[m] - apdq[k, m])
        elif ixy == 1:
            for m in range(meqn):
                Fm[r, k, m] = 0.0 + amdq[k, m]
                Fp[r, k, m] = 0.0 - apdq[k, m]
        else:
            for m in range(meqn):
                Fm[r, k, m] = Fb[r, k, m] + amdq[k, m]
                Fp[r, k, m] = Fb[r, k, m] - apdq[k, m]
        if do_trans:
            if corr_trans:
                # amdq/apdq of this interface are not needed any more
                for m in range(meqn):
                    amdq[k, m] += cq[m]
                    apdq[k, m] -= cq[m]
            # left-going part enters cell k-1, right-going part cell k
            if SHARED:
                RPT2E(ixy, 1, q1d[k - 1], q1d[k], cs[k - 1], cs[k], auxm[k - 1],
                      aux0[k - 1], auxp[k - 1], params, es[k], amdq[k], bm, bp)
            else:
                RPT2(ixy, 1, q1d[k - 1], q1d[k], auxm[k - 1], aux0[k - 1], auxp[k - 1],
                     params, amdq[k], bm, bp)
            c = 0.5 * dl
            for m in range(meqn):
                tl[m] = clo[m] - c * bm[m]
                th[m] = chi[m] - c * bp[m]
            _store_transverse(ixy, first, Gm, Gp, k - 1, r, tl, th)
            if SHARED:
                RPT2E(ixy, 2, q1d[k - 1], q1d[k], cs[k - 1], cs[k], auxm[k], aux0[k],
                      auxp[k], params, es[k], apdq[k], bm, bp)
            else:
                RPT2(ixy, 2, q1d[k - 1], q1d[k], auxm[k], aux0[k], auxp[k],
                     params, apdq[k], bm, bp)
            c = 0.5 * dr
            for m in range(meqn):
                clo[m] = 0.0 - c * bm[m]
                chi[m] = 0.0 - c * bp[m]
    if do_trans:
        _store_transverse(ixy, first, Gm, Gp, mbc + n, r, clo, chi)
    return cfl


@numba.njit(cache=CACHE, **_OPTS)
def run_chunk(order, transverse_waves, capa, lo, hi, q, mbc, aux, qnew, dx, dy, dt,
              params, lim, cfl_out, edge_out, rows):
    """The whole step of patches ``rows[lo .. hi-1]`` (one thread's share)."""
    meqn = MEQN
    mwaves = MWAVES
    nyt = q.shape[2]
    nxt = q.shape[3]
    my = nyt - 2 * mbc
    mx = nxt - 2 * mbc
    maux = aux.shape[1]
    nmax = max(nxt, nyt)
    use_capa = capa >= 0
    # per-chunk scratch (reused for every patch of the chunk)
    auxx = np.empty((nyt, nxt, maux))
    kinv = np.ones((nyt, nxt))
    # fluctuation fluxes, written (not accumulated) by the sweeps of every patch; the
    # entries no sweep writes stay finite (the transverse terms add into some of them)
    fm = np.zeros((nyt, nxt, meqn))
    fp = np.zeros((nyt, nxt, meqn))
    gm = np.zeros((nxt, nyt, meqn))
    gp = np.zeros((nxt, nyt, meqn))
    # transverse terms of the x-sweeps for the y-fluxes (the same for gm and gp)
    gt = np.zeros((nxt, nyt, meqn))
    dtdx1d = np.empty(nmax)
    wave = np.zeros((nmax, meqn, mwaves))
    s = np.zeros((nmax, mwaves))
    amdq = np.zeros((nmax, meqn))
    apdq = np.zeros((nmax, meqn))
    # cell states (work sharing) and interface states of one line, one array per
    # field; the sweeps read the patch, its aux and its cell states through row and
    # column views (the columns strided), which costs less than a transposed copy
    csx = np.zeros((NCS, nyt, nxt) if SHARED else (1, 1, 1))
    es_soa = np.zeros((NES, nmax))
    es = es_soa.T

    for k_row in range(lo, hi):
        ip = rows[k_row]
        dtdx = dt / dx[ip]
        dtdy = dt / dy[ip]
        for a in range(maux):
            for j in range(nyt):
                for i in range(nxt):
                    auxx[j, i, a] = aux[ip, a, j, i]
        if SHARED:
            # every cell's state once per step, shared by both sweeps
            for j in range(nyt):
                for i in range(nxt):
                    t = CELL_STATE(q[ip, :, j, i], auxx[j, i], params)
                    for m in range(NCS):
                        csx[m, j, i] = t[m]
        if use_capa:
            for j in range(nyt):
                for i in range(nxt):
                    kinv[j, i] = 1.0 / aux[ip, capa, j, i]

        cfl = 0.0
        # x-sweeps over rows j = -1 .. my
        for r in range(mbc - 1, mbc + my + 1):
            for k in range(nxt):
                dtdx1d[k] = dtdx * kinv[r, k]
            c = flux_row(1, order, transverse_waves, mx, mbc, r, q[ip, :, r, :].T, auxx[r - 1],
                         auxx[r], auxx[r + 1], dtdx1d, params, lim, wave, s, amdq, apdq,
                         fm, fp, fm, gt, gt, r == mbc - 1, csx[:, r, :].T, es)
            if r >= mbc and r < mbc + my and c > cfl:
                cfl = c
        # y-sweeps over columns i = -1 .. mx
        for r in range(mbc - 1, mbc + mx + 1):
            for k in range(nyt):
                dtdx1d[k] = dtdy * kinv[k, r]
            c = flux_row(2, order, transverse_waves, my, mbc, r, q[ip, :, :, r].T, auxx[:, r - 1],
                         auxx[:, r], auxx[:, r + 1], dtdx1d, params, lim, wave, s, amdq, apdq,
                         gm, gp, gt, fm, fp, False, csx[:, :, r].T, es)
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


@numba.njit(parallel=True, cache=CACHE, **_OPTS)
def engine(order, transverse_waves, capa, q, mbc, aux, qnew, dx, dy, dt, params,
           limiter_codes, cfl_out, edge_out, rows, nthreads):
    """Step the patches ``rows``; options are run-time values (one compilation per
    solver).

    ``nthreads`` comes from the caller: asking Numba for it inside a compiled function
    would make the function uncacheable."""
    meqn = MEQN
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
    if limiter_codes.shape[0] < MWAVES:
        raise ValueError("limiter_codes needs one entry per wave")
    if dx.shape[0] < npatch or dy.shape[0] < npatch or cfl_out.shape[0] < npatch:
        raise ValueError("dx, dy and cfl_out need one entry per patch")
    if (edge_out.shape[0] < npatch or edge_out.shape[1] < 4 or edge_out.shape[2] < meqn
            or edge_out.shape[3] < max(mx, my)):
        raise ValueError("edge_out must have shape (npatch, 4, meqn, max(mx, my))")
    nrows = rows.shape[0]
    for k in range(nrows):
        if rows[k] < 0 or rows[k] >= npatch:
            raise ValueError("rows holds an index outside 0 .. npatch-1")
    if nrows == 0:
        return
    nchunk = max(1, min(nrows, nthreads))
    for c in prange(nchunk):
        lo = (c * nrows) // nchunk
        hi = ((c + 1) * nrows) // nchunk
        run_chunk(order, transverse_waves, capa, lo, hi, q, mbc, aux, qnew, dx, dy, dt,
                  params, limiter_codes, cfl_out, edge_out, rows)


@numba.njit(cache=CACHE, **_OPTS)
def fluct_chunk(lo, hi, ixy, ql, qr, auxl, auxr, params, out):
    wave = np.zeros((MEQN, MWAVES))
    s = np.zeros(MWAVES)
    amdq = np.zeros(MEQN)
    apdq = np.zeros(MEQN)
    for k in range(lo, hi):
        RPN2(ixy, ql[k], qr[k], auxl[k], auxr[k], params, wave, s, amdq, apdq)
        for m in range(MEQN):
            out[k, m] = amdq[m] + apdq[m]


@numba.njit(parallel=True, cache=CACHE, **_OPTS)
def fluct(ixy, ql, qr, auxl, auxr, params, out, nthreads):
    """``out[k] = amdq + apdq`` of the normal solve at each of ``len(ql)`` interfaces."""
    n = ql.shape[0]
    if ql.shape[1] != MEQN or qr.shape[0] != n or qr.shape[1] != MEQN:
        raise ValueError("ql and qr must have shape (n, num_eqn)")
    if auxl.shape[0] != n or auxr.shape[0] != n:
        raise ValueError("auxl and auxr must have shape (n, maux)")
    if out.shape[0] < n or out.shape[1] < MEQN:
        raise ValueError("out must have shape (n, num_eqn)")
    if n == 0:
        return
    nchunk = max(1, min(n, nthreads))
    for c in prange(nchunk):
        lo = (c * n) // nchunk
        hi = ((c + 1) * n) // nchunk
        fluct_chunk(lo, hi, ixy, ql, qr, auxl, auxr, params, out)
