"""Pointwise bodies of the RRB-PCG routines and their batched CPU (Numba) drivers.

Every body works on one quarter index ``(J, I)`` of a level and touches only that
node's entries and its stencil neighbours (quarter arrays shifted by one), so a whole
level is one parallel loop (CPU: ``prange`` over rows; GPU: one thread per ``(J, I)``,
see :mod:`.gpu_kernels`, where the same arithmetic is written out on flat arrays
without branches, and tested against these bodies).  Array layouts (see
:mod:`.ordering` and :mod:`.build`):

* level vector ``y[4, h, w]`` (r1, r2, b1, b2); CG vectors ``x[2, h, w]`` (r1, r2);
* ``BL[2, 5, h, w]``: per black node ``[1/c, lW, lE, lS, lN]``;
* ``P[5, h, w]``: ``[1/d(r2 node), lne, lnw, lse, lsw]`` stored at r1 nodes;
* ``S9[10, h, w]``: the level-1 Schur complement ``[d1, d2, ne, nw, se, sw, e11, n11,
  e22, n22]``.

Bodies return a partial inner product where the caller fuses one (``p.Sp``, ``r.z``).
"""

from __future__ import annotations

import numba as nb

__all__ = [
    "schur_matvec_dot",
    "black_forward",
    "r2_forward",
    "r2_backward_dot",
    "black_backward",
    "update_xr",
    "update_p",
    "dot",
]


@nb.njit(cache=True)
def at(a, q, J, I, h, w):
    """``a[q, J, I]``, or 0 outside the ``h x w`` rectangle."""
    if J < 0 or J >= h or I < 0 or I >= w:
        return 0.0
    return a[q, J, I]


@nb.njit(cache=True)
def at4(a, k, q, J, I, h, w):
    """``a[k, q, J, I]``, or 0 outside the ``h x w`` rectangle."""
    if J < 0 or J >= h or I < 0 or I >= w:
        return 0.0
    return a[k, q, J, I]


@nb.njit(cache=True)
def next_level_quarter(J, I):
    """Quarter of the next level that the r1 node ``(J, I)`` of a level lands in (at
    index ``(J >> 1, I >> 1)``)."""
    if I & 1 == 0:
        return 0 if J & 1 == 0 else 3
    return 2 if J & 1 == 0 else 1


@nb.njit(cache=True)
def next_level_value(X, J, I, h, w):
    """Value of the r1 node ``(I, J)`` of a level, read from the next level's quarters
    ``X[4, h', w']``; 0 outside the level's ``h x w`` r1 grid."""
    if J < 0 or J >= h or I < 0 or I >= w:
        return 0.0
    return X[next_level_quarter(J, I), J >> 1, I >> 1]


@nb.njit(cache=True)
def body_schur_matvec(S, x, y, J, I, h, w):
    x1 = x[0, J, I]
    x2 = x[1, J, I]
    y1 = (
        S[0, J, I] * x1
        + S[2, J, I] * x2
        + S[3, J, I] * at(x, 1, J, I - 1, h, w)
        + S[4, J, I] * at(x, 1, J - 1, I, h, w)
        + S[5, J, I] * at(x, 1, J - 1, I - 1, h, w)
        + S[6, J, I] * at(x, 0, J, I + 1, h, w)
        + at(S, 6, J, I - 1, h, w) * at(x, 0, J, I - 1, h, w)
        + S[7, J, I] * at(x, 0, J + 1, I, h, w)
        + at(S, 7, J - 1, I, h, w) * at(x, 0, J - 1, I, h, w)
    )
    y2 = (
        S[1, J, I] * x2
        + S[2, J, I] * x1
        + at(S, 3, J, I + 1, h, w) * at(x, 0, J, I + 1, h, w)
        + at(S, 4, J + 1, I, h, w) * at(x, 0, J + 1, I, h, w)
        + at(S, 5, J + 1, I + 1, h, w) * at(x, 0, J + 1, I + 1, h, w)
        + S[8, J, I] * at(x, 1, J, I + 1, h, w)
        + at(S, 8, J, I - 1, h, w) * at(x, 1, J, I - 1, h, w)
        + S[9, J, I] * at(x, 1, J + 1, I, h, w)
        + at(S, 9, J - 1, I, h, w) * at(x, 1, J - 1, I, h, w)
    )
    y[0, J, I] = y1
    y[1, J, I] = y2
    return x1 * y1 + x2 * y2


@nb.njit(cache=True)
def black_forward_values(BL, y, J, I, h, w):
    """The red values after the black step of L^-1 (red minus couplings / c_black times
    the black values); :func:`body_black_forward` stores them."""
    v0 = y[0, J, I] - (
        BL[0, 1, J, I] * y[2, J, I]
        + at4(BL, 0, 2, J, I - 1, h, w) * at(y, 2, J, I - 1, h, w)
        + BL[1, 3, J, I] * y[3, J, I]
        + at4(BL, 1, 4, J - 1, I, h, w) * at(y, 3, J - 1, I, h, w)
    )
    v1 = y[1, J, I] - (
        BL[0, 4, J, I] * y[2, J, I]
        + at4(BL, 0, 3, J + 1, I, h, w) * at(y, 2, J + 1, I, h, w)
        + BL[1, 2, J, I] * y[3, J, I]
        + at4(BL, 1, 1, J, I + 1, h, w) * at(y, 3, J, I + 1, h, w)
    )
    return v0, v1


@nb.njit(cache=True)
def body_black_forward(BL, y, J, I, h, w):
    """Red nodes -= (couplings / c_black) * black values (the black step of L^-1)."""
    v0, v1 = black_forward_values(BL, y, J, I, h, w)
    y[0, J, I] = v0
    y[1, J, I] = v1


@nb.njit(cache=True)
def body_r2_forward(P, y, X, J, I, h, w):
    """Eliminate the r2 nodes: r1 value minus L * r2 values, written into the next
    level's quarters ``X``."""
    X[next_level_quarter(J, I), J >> 1, I >> 1] = y[0, J, I] - (
        P[1, J, I] * y[1, J, I]
        + P[2, J, I] * at(y, 1, J, I - 1, h, w)
        + P[3, J, I] * at(y, 1, J - 1, I, h, w)
        + P[4, J, I] * at(y, 1, J - 1, I - 1, h, w)
    )


@nb.njit(cache=True)
def body_r2_backward(P, y, X, o, J, I, h, w):
    """r2 values from the next level's solution ``X``; r1 values copied from ``X``.
    Writes ``o[0:2]`` (may alias ``y``); returns ``y . o`` over the two red entries."""
    x1 = next_level_value(X, J, I, h, w)
    x2 = y[1, J, I] * P[0, J, I] - (
        P[1, J, I] * x1
        + at(P, 2, J, I + 1, h, w) * next_level_value(X, J, I + 1, h, w)
        + at(P, 3, J + 1, I, h, w) * next_level_value(X, J + 1, I, h, w)
        + at(P, 4, J + 1, I + 1, h, w) * next_level_value(X, J + 1, I + 1, h, w)
    )
    s = y[0, J, I] * x1 + y[1, J, I] * x2
    o[0, J, I] = x1
    o[1, J, I] = x2
    return s


@nb.njit(cache=True)
def black_values_from(BL, y, J, I, x0, x0e, x1s, x1, x1w, x0n):
    """The two black values of node ``(J, I)`` (y_black / c - L^T red values) from its
    red neighbours' values: r1 at ``(J, I)``, ``(J, I + 1)``, ``(J + 1, I)`` (``x0``,
    ``x0e``, ``x0n``) and r2 at ``(J, I)``, ``(J - 1, I)``, ``(J, I - 1)`` (``x1``,
    ``x1s``, ``x1w``)."""
    b1 = y[2, J, I] * BL[0, 0, J, I] - (
        BL[0, 1, J, I] * x0 + BL[0, 2, J, I] * x0e + BL[0, 3, J, I] * x1s + BL[0, 4, J, I] * x1
    )
    b2 = y[3, J, I] * BL[1, 0, J, I] - (
        BL[1, 1, J, I] * x1w + BL[1, 2, J, I] * x1 + BL[1, 3, J, I] * x0 + BL[1, 4, J, I] * x0n
    )
    return b1, b2


@nb.njit(cache=True)
def black_backward_values(BL, y, x, J, I, h, w):
    """The two black values of node ``(J, I)``: y_black / c - L^T red values (the red
    values read from ``x[0:2]``)."""
    return black_values_from(
        BL, y, J, I, x[0, J, I], at(x, 0, J, I + 1, h, w), at(x, 1, J - 1, I, h, w),
        x[1, J, I], at(x, 1, J, I - 1, h, w), at(x, 0, J + 1, I, h, w),
    )


@nb.njit(cache=True)
def body_black_backward(BL, y, x, J, I, h, w):
    """Black values = y_black / c - L^T red values (writes ``x[2:4]``; may alias ``y``)."""
    b1, b2 = black_backward_values(BL, y, x, J, I, h, w)
    x[2, J, I] = b1
    x[3, J, I] = b2


# ---------------------------------------------------------------- CPU drivers (Numba)


@nb.njit(parallel=True, cache=True)
def schur_matvec_dot(S, x, y):
    """``y = S x`` on the level-1 red nodes; returns ``x . y``."""
    h, w = x.shape[1], x.shape[2]
    acc = 0.0
    for J in nb.prange(h):
        for I in range(w):
            acc += body_schur_matvec(S, x, y, J, I, h, w)
    return acc


@nb.njit(parallel=True, cache=True)
def black_forward(BL, y):
    h, w = y.shape[1], y.shape[2]
    for J in nb.prange(h):
        for I in range(w):
            body_black_forward(BL, y, J, I, h, w)


@nb.njit(parallel=True, cache=True)
def r2_forward(P, y, X):
    h, w = y.shape[1], y.shape[2]
    for J in nb.prange(h):
        for I in range(w):
            body_r2_forward(P, y, X, J, I, h, w)


@nb.njit(parallel=True, cache=True)
def r2_backward_dot(P, y, X, o):
    h, w = y.shape[1], y.shape[2]
    acc = 0.0
    for J in nb.prange(h):
        for I in range(w):
            acc += body_r2_backward(P, y, X, o, J, I, h, w)
    return acc


@nb.njit(parallel=True, cache=True)
def black_backward(BL, y, x):
    h, w = y.shape[1], y.shape[2]
    for J in nb.prange(h):
        for I in range(w):
            body_black_backward(BL, y, x, J, I, h, w)


@nb.njit(parallel=True, cache=True)
def update_xr(x, r, p, q, alpha):
    """``x += alpha p``, ``r -= alpha q`` (flat arrays)."""
    for k in nb.prange(x.size):
        x[k] += alpha * p[k]
        r[k] -= alpha * q[k]


@nb.njit(parallel=True, cache=True)
def update_p(p, z, beta):
    """``p = z + beta p`` (flat arrays)."""
    for k in nb.prange(p.size):
        p[k] = z[k] + beta * p[k]


@nb.njit(parallel=True, cache=True)
def dot(a, b):
    acc = 0.0
    for k in nb.prange(a.size):
        acc += a[k] * b[k]
    return acc


@nb.njit(cache=True)
def dense_apply(Minv, d, y, o):
    """``o = D Minv D y`` (``D = diag(d)``) on the red quarters of the last level (the
    first ``m`` entries of the flattened quarters; ``Minv`` float64, float32 or int16
    fixed point (:func:`.build._red_schur_inverse`), sums in float64)."""
    m = Minv.shape[0]
    yf = y.reshape(y.size)
    of = o.reshape(o.size)
    for i in range(m):
        s = 0.0
        for j in range(m):
            s += Minv[i, j] * (d[j] * yf[j])
        of[i] = d[i] * s


def precondition_cpu(levels, r, z):
    """``z = M^-1 r`` on the level-1 red nodes (CPU); returns ``r . z``.

    ``levels`` holds per-level lists ``P``, ``BL``, ``W`` (index ``i`` is level
    ``i + 1``; ``W[0]`` is unused, level 1 works on ``r``/``z``) and the last level's
    ``BLlast``, ``Minv``, ``Dlast``, ``Wlast``, ``Xlast``: there the black step, the dense inverse
    of the exact red Schur complement, and the black back-substitution solve exactly.
    """
    L = levels["P"]
    W = levels["W"]
    nl = len(L)  # r2 steps: levels 1 .. k-1
    src = r
    for lev in range(nl):
        dst = W[lev + 1] if lev + 1 < nl else levels["Wlast"]
        r2_forward(L[lev], src, dst)
        if lev + 1 < nl:
            black_forward(levels["BL"][lev + 1], dst)
        src = dst
    X = levels["Xlast"]
    black_forward(levels["BLlast"], src)
    dense_apply(levels["Minv"], levels["Dlast"], src, X)
    black_backward(levels["BLlast"], src, X)
    for lev in range(nl - 1, 0, -1):
        y = W[lev]
        r2_backward_dot(L[lev], y, X, y)
        black_backward(levels["BL"][lev], y, y)
        X = y
    return r2_backward_dot(L[0], r, X, z)
