"""A 1D two-layer finite-volume solution with the same pointwise flux: uniform cells on
``[0, length]``, walls at both ends, forward Euler with the seed's CFL rule (``dt =
gamma dx / max|lambda|``).  The triangle solver's channel runs are checked against a
much finer one (tests, ``demos/tworoe/lock_exchange.py``)."""

import numba
import numpy as np

from .physics import flux_edge_irroe

__all__ = ["solve_1d"]


@numba.njit
def _run(W, H, dx, g, r, gamma, t_end):
    n = W.shape[1]
    F = np.zeros((10, n + 1))
    t = 0.0
    steps = 0
    while t < t_end:
        smax = 0.0
        for e in range(n + 1):
            i = max(e - 1, 0)
            j = min(e, n - 1)
            ql1 = W[1, i]
            ql2 = W[3, i]
            qr1 = W[1, j]
            qr2 = W[3, j]
            if e == 0:
                ql1 = -qr1
                ql2 = -qr2
            if e == n:
                qr1 = -ql1
                qr2 = -ql2
            out = flux_edge_irroe(W[0, i], ql1, 0.0, W[2, i], ql2, 0.0, H[i],
                                  W[0, j], qr1, 0.0, W[2, j], qr2, 0.0, H[j], g, r)
            for k in range(10):
                F[k, e] = out[k]
            smax = max(smax, out[10])
        dt = gamma * dx / smax
        if t + dt > t_end:
            dt = t_end - t
        c = dt / dx
        for i in range(n):
            # left edge i (the cell is its right cell), right edge i + 1 (its left cell)
            fl1 = 0.0 if i == 0 else F[0, i]
            fl2 = 0.0 if i == 0 else F[1, i]
            fr1 = 0.0 if i == n - 1 else F[0, i + 1]
            fr2 = 0.0 if i == n - 1 else F[1, i + 1]
            W[0, i] -= c * (fr1 - fl1)
            W[2, i] -= c * (fr2 - fl2)
            W[1, i] -= c * (F[2, i + 1] + F[6, i])
            W[3, i] -= c * (F[4, i + 1] + F[8, i])
        t += dt
        steps += 1
    return steps


def solve_1d(h1, h2, H, length, t_end, g=9.81, r=0.98, gamma=0.9):
    """Cell averages ``(h1, q1, h2, q2)`` (rows) at ``t_end`` from initial cell values
    ``h1``, ``h2`` (at rest) over the bottom depths ``H``."""
    W = np.zeros((4, len(h1)))
    W[0] = h1
    W[2] = h2
    dx = length / len(h1)
    _run(W, np.asarray(H, dtype=float), dx, g, r, gamma, t_end)
    return W
