"""One time step of the two-layer solver on triangles: the per-edge and per-cell bodies,
written once, run by CPU ``prange`` drivers here and by the CUDA kernels of
:mod:`~forestpy.solvers.tworoe.gpu`.

A step has the seed's phases (its Section 3):

1. :func:`edge_row`, one edge: rotate both cells' states into the edge frame, build the
   boundary ghost (wall: normal momenta mirrored; open: a copy, so nothing but the
   cell's own flux leaves), evaluate the projected flux **once**, rotate back and write
   11 numbers, each already multiplied by the edge length: the two mass fluxes (left to
   right), the left cell's four momentum fluctuations, the right cell's four, and
   ``|Γ| max|λ|``.  A wall's mass fluxes are exactly zero.
2. :func:`cell_row`, one cell: gather its three edges in a fixed order (so the sum is
   the same on every thread count and device), the left cell taking ``+`` the mass flux,
   the right cell ``-``; returns the local step ``2 γ |V| / Σ |Γ| max|λ|`` (the seed's
   CFL rule, its equation (5)).
3. the minimum over cells (an exact, order-free reduction);
4. :func:`update_row`: ``W -= dt / |V| M``.

Both neighbours of an edge read the same stored numbers: the layers' masses are
conserved to round-off and no floating-point atomics are needed.  The state is
structure-of-arrays, ``W[k, cell]`` with ``k``: ``h1, q1x, q1y, h2, q2x, q2y``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .physics import REAL, TWO, ZERO, constants, flux_edge_ifcp, flux_edge_irroe, retyped

__all__ = ["BC_INTERIOR", "BC_OPEN", "BC_WALL", "NOUT", "cpu_kernels", "edge_row",
           "cell_row", "update_row"]

BC_INTERIOR, BC_WALL, BC_OPEN = 0, 1, 2
NOUT = 11
SCHEMES = {"irroe": flux_edge_irroe, "ifcp": flux_edge_ifcp}

# the placeholder that a specialisation replaces by the scheme's flux
flux = flux_edge_irroe


@numba.njit
def edge_row(e, W, H, el, er, ebc, nx, ny, ln, g, r, out):
    """Evaluate edge ``e`` and write its 11 outputs ``out[:, e]``."""
    i = el[e]
    a = nx[e]
    b = ny[e]
    h1l = W[0, i]
    h2l = W[3, i]
    q1l = W[1, i] * a + W[2, i] * b
    p1l = W[2, i] * a - W[1, i] * b
    q2l = W[4, i] * a + W[5, i] * b
    p2l = W[5, i] * a - W[4, i] * b
    Hl = H[i]
    j = er[e]
    kind = ebc[e]
    if j >= 0:
        h1r = W[0, j]
        h2r = W[3, j]
        q1r = W[1, j] * a + W[2, j] * b
        p1r = W[2, j] * a - W[1, j] * b
        q2r = W[4, j] * a + W[5, j] * b
        p2r = W[5, j] * a - W[4, j] * b
        Hr = H[j]
    else:
        h1r = h1l
        h2r = h2l
        p1r = p1l
        p2r = p2l
        Hr = Hl
        if kind == 1:
            q1r = -q1l
            q2r = -q2l
        else:
            q1r = q1l
            q2r = q2l
    f1, f2, m1n, m1t, m2n, m2t, n1n, n1t, n2n, n2t, smax, hyp = flux(
        h1l, q1l, p1l, h2l, q2l, p2l, Hl, h1r, q1r, p1r, h2r, q2r, p2r, Hr, g, r)
    if kind == 1:
        f1 = ZERO
        f2 = ZERO
    L = ln[e]
    out[0, e] = L * f1
    out[1, e] = L * f2
    out[2, e] = L * (m1n * a - m1t * b)
    out[3, e] = L * (m1n * b + m1t * a)
    out[4, e] = L * (m2n * a - m2t * b)
    out[5, e] = L * (m2n * b + m2t * a)
    out[6, e] = L * (n1n * a - n1t * b)
    out[7, e] = L * (n1n * b + n1t * a)
    out[8, e] = L * (n2n * a - n2t * b)
    out[9, e] = L * (n2n * b + n2t * a)
    out[10, e] = L * smax


@numba.njit
def cell_row(c, out, ce, cs, area, gamma, M):
    """Gather cell ``c``'s three edges into ``M[:, c]``; return its local time step."""
    m0 = ZERO
    m1 = ZERO
    m2 = ZERO
    m3 = ZERO
    m4 = ZERO
    m5 = ZERO
    z = ZERO
    for k in range(3):
        e = ce[c, k]
        if cs[c, k] == 0:
            m0 += out[0, e]
            m1 += out[2, e]
            m2 += out[3, e]
            m3 += out[1, e]
            m4 += out[4, e]
            m5 += out[5, e]
        else:
            m0 -= out[0, e]
            m1 += out[6, e]
            m2 += out[7, e]
            m3 -= out[1, e]
            m4 += out[8, e]
            m5 += out[9, e]
        z += out[10, e]
    M[0, c] = m0
    M[1, c] = m1
    M[2, c] = m2
    M[3, c] = m3
    M[4, c] = m4
    M[5, c] = m5
    if z > ZERO:
        return TWO * gamma * area[c] / z
    return math.inf


@numba.njit
def update_row(c, W, M, area, dt):
    """``W[:, c] -= dt / |V_c| M[:, c]``; returns ``min(h1, h2)`` of the new state
    (``-inf`` for NaN)."""
    f = REAL(dt) / area[c]
    for k in range(6):
        W[k, c] = W[k, c] - f * M[k, c]
    m = min(W[0, c], W[3, c])
    if m != m:
        return -math.inf
    return m


# --- CPU drivers ---------------------------------------------------------------------

def _edges_cpu(W, H, el, er, ebc, nx, ny, ln, g, r, out, e0, e1):
    for k in numba.prange(e1 - e0):
        edge_row(e0 + k, W, H, el, er, ebc, nx, ny, ln, g, r, out)


def _cells_cpu(out, ce, cs, area, gamma, M):
    dtmin = math.inf
    for c in numba.prange(ce.shape[0]):
        dtmin = min(dtmin, cell_row(c, out, ce, cs, area, gamma, M))
    return dtmin


def _update_cpu(W, M, area, dt):
    hmin = math.inf
    for c in numba.prange(M.shape[1]):  # the owned cells (a rank's come first)
        hmin = min(hmin, update_row(c, W, M, area, dt))
    return hmin


_CPU: dict = {}


def cpu_kernels(scheme: str = "irroe", dtype=np.float64, parallel: bool = True):
    """``(edges, cells, update)``: the CPU drivers of one scheme and precision (compiled
    on first call; cached per (scheme, dtype, parallel)).  ``edges`` evaluates the edges
    ``e0 <= e < e1``; ``cells`` gathers the cells of ``ce`` (its rows), ``update``
    updates the first ``M.shape[1]`` cells of ``W``."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, not {scheme!r}")
    key = (scheme, np.dtype(dtype).char, parallel)
    got = _CPU.get(key)
    if got is None:
        subs = dict(constants(dtype), flux=SCHEMES[scheme])
        cache: dict = {}

        def compile(py, top):
            if top:
                return numba.njit(parallel=parallel, fastmath=False)(py)
            return numba.njit(py)

        got = _CPU[key] = tuple(retyped(f, subs, compile, cache)
                                for f in (_edges_cpu, _cells_cpu, _update_cpu))
    return got
