"""Construction of the RRB incomplete factorisation ``S = L D L^T + R``.

A symmetric 5-point operator on an ``nx x ny`` grid is given by three arrays of shape
``(ny, nx)``: the diagonal ``c``, the coupling ``e`` of node ``(i, j)`` with its east
neighbour ``(i+1, j)`` and the coupling ``n`` with its north neighbour ``(i, j+1)``
(so ``e[:, -1] = n[-1, :] = 0``).  One level of the Repeated Red-Black factorisation
(Brand 1992; Ciarlet 1994; de Jong & Vuik 2014) does:

1. **black step** -- eliminate the black nodes (``i + j`` odd).  They couple only to red
   nodes, so the Schur complement on the red nodes is exact,

   .. math:: S = A_{RR} - A_{RB} D_B^{-1} A_{BR},

   a 9-point operator: a *rotated* 5-point part (diagonal neighbours ``(i±1, j±1)``) and
   fill-in at distance 2 (``(i±2, j)``, ``(i, j±2)``).  The fill-in is **lumped** back onto the
   rotated 5-point stencil (row sums are kept, ``R 1 = 0``; see :func:`_lump`).
2. **r2 step** -- on the rotated grid, eliminate the red nodes with odd ``i`` and ``j``;
   the Schur complement on the remaining ``(even, even)`` nodes is a 5-point operator on
   the grid of spacing 2 plus fill-in at ``(±2, ±2)``, lumped the same way.  That operator is
   the next level.

At the chosen last level ``k`` the remaining operator is factorised completely: its black
nodes are eliminated exactly (as in step 1) and the exact 9-point Schur complement on its
red nodes gets a dense inverse (at most 4096 red nodes; stored in int16 above 1024,
see :func:`_red_schur_inverse`).  Every pivot is checked to be positive.

The PCG of :mod:`.solver` runs on the level-1 red nodes, with the *exact* 9-point Schur
complement of step 1 as its operator (no lumping there), and the rest of the
factorisation as its preconditioner.

Everything here runs once per operator, on the host, with NumPy.
"""

from __future__ import annotations

import numpy as np

from .ordering import level_shapes, max_levels, quarter_shape, to_quarters

__all__ = ["check_stencil", "build_levels", "MAX_DIRECT"]

MAX_DIRECT = 4096


def _sh(a, dj, di, fill=0.0):
    """``out[j, i] = a[j + dj, i + di]``, ``fill`` outside the array."""
    ny, nx = a.shape
    out = np.full_like(a, fill)
    j0, j1 = max(0, -dj), min(ny, ny - dj)
    i0, i1 = max(0, -di), min(nx, nx - di)
    if j0 < j1 and i0 < i1:
        out[j0:j1, i0:i1] = a[j0 + dj : j1 + dj, i0 + di : i1 + di]
    return out


def check_stencil(stencil):
    """Validate ``(c, e, n)`` and return float64 copies; one clear error per problem."""
    try:
        c, e, n = (np.array(a, dtype=np.float64) for a in stencil)
    except (TypeError, ValueError) as err:
        raise ValueError(
            "stencil must be a sequence (diag, east, north) of three 2D arrays"
        ) from err
    if c.ndim != 2 or e.shape != c.shape or n.shape != c.shape:
        raise ValueError(
            f"stencil arrays must be 2D and of one shape (ny, nx); got {c.shape}, "
            f"{e.shape}, {n.shape}"
        )
    if not (np.isfinite(c).all() and np.isfinite(e).all() and np.isfinite(n).all()):
        raise ValueError("stencil coefficients must be finite")
    if not (c > 0).all():
        raise ValueError("stencil diagonal must be positive everywhere (an SPD operator)")
    if np.any(e[:, -1] != 0):
        raise ValueError("east coupling e[:, -1] must be 0 (no node east of the last column)")
    if np.any(n[-1, :] != 0):
        raise ValueError("north coupling n[-1, :] must be 0 (no node north of the last row)")
    return c, e, n


def _shift_add(target, src, dj, di):
    """``target[j + dj, i + di] += src[j, i]`` where both are inside the array."""
    ny, nx = src.shape
    j0, j1 = max(0, -dj), min(ny, ny - dj)
    i0, i1 = max(0, -di), min(nx, nx - di)
    if j0 < j1 and i0 < i1:
        target[j0 + dj : j1 + dj, i0 + di : i1 + di] += src[j0:j1, i0:i1]


def _inside(shape, dj, di):
    """Mask of nodes ``(i, j)`` whose node ``(i + di, j + dj)`` is inside the grid."""
    ny, nx = shape
    jj, ii = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    return (jj + dj >= 0) & (jj + dj < ny) & (ii + di >= 0) & (ii + di < nx)


def _lump(d, K, F, off, mids, mode):
    """Lump the fill-in ``F`` (coupling of node ``a`` with ``a + off``) back onto the
    kept stencil ``(d, K)``; ``K`` maps an offset ``(dj, di)`` to its coupling array.

    ``mode="diagonal"``: onto the two diagonals (row sums kept).  ``mode="stencil"``
    (default): onto the kept couplings through the common neighbours ``b = a + m`` of
    ``a`` and ``c = a + off`` (``mids``): each of the ``n`` existing ones receives
    ``F/n`` on the couplings ``a-b`` and ``b-c`` and ``-2F/n`` on its diagonal.  Row
    sums are kept as well, and for an isotropic operator so is the energy of linear
    functions, which keeps the coarse levels spectrally close to the exact Schur
    complements (diagonal lumping loses a factor 4 of it per level).
    """
    ok = [_inside(F.shape, *m) for m in mids] if mode == "stencil" else []
    cnt = sum(o.astype(np.float64) for o in ok) if ok else np.zeros_like(F)
    none = cnt == 0
    d += np.where(none, F, 0.0)
    _shift_add(d, np.where(none, F, 0.0), *off)
    for m, o in zip(mids, ok):
        g = np.where(o, F / np.maximum(cnt, 1.0), 0.0)
        _shift_add(d, -2.0 * g, *m)
        for p, q in ((0, 0), m), (m, off):
            oj, oi = q[0] - p[0], q[1] - p[1]
            if oj < 0 or (oj == 0 and oi < 0):
                p, (oj, oi) = q, (-oj, -oi)
            _shift_add(K[(oj, oi)], g, *p)


def _black_step(c, e, n):
    """Exact Schur complement on the red nodes (valid where ``i + j`` is even).

    Returns ``d`` (diagonal), ``ne``/``nw`` (couplings to ``(i+1, j+1)``/``(i-1, j+1)``),
    ``ee``/``nn`` (fill-in to ``(i+2, j)``/``(i, j+2)``).
    """
    cE, cW, cN, cS = _sh(c, 0, 1, 1.0), _sh(c, 0, -1, 1.0), _sh(c, 1, 0, 1.0), _sh(c, -1, 0, 1.0)
    eW, nS = _sh(e, 0, -1), _sh(n, -1, 0)
    d = c - e * e / cE - eW * eW / cW - n * n / cN - nS * nS / cS
    ne = -(e * _sh(n, 0, 1) / cE + n * _sh(e, 1, 0) / cN)
    nw = -(eW * _sh(n, 0, -1) / cW + n * _sh(e, 1, -1) / cN)
    ee = -e * _sh(e, 0, 1) / cE
    nn = -n * _sh(n, 1, 0) / cN
    return d, ne, nw, ee, nn


def _lump_black(d, ne, nw, ee, nn, red, mode):
    """Lumped rotated 5-point operator ``(dl, ne, nw)`` on the red nodes."""
    dl, K = d.copy(), {(1, 1): ne.copy(), (1, -1): nw.copy()}
    _lump(dl, K, np.where(red, ee, 0.0), (0, 2), ((1, 1), (-1, 1)), mode)
    _lump(dl, K, np.where(red, nn, 0.0), (2, 0), ((1, 1), (1, -1)), mode)
    return dl, K[(1, 1)], K[(1, -1)]


def _r2_step(dl, ne, nw, r1, mode):
    """Eliminate the (odd, odd) nodes of the rotated operator ``(dl, ne, nw)``.

    Returns the lumped 5-point operator ``(c, e, n)`` on the (even, even) nodes ``r1``
    (full grid arrays; the next level takes ``[::2, ::2]``).
    """
    dNE, dNW = _sh(dl, 1, 1, 1.0), _sh(dl, 1, -1, 1.0)
    dSW, dSE = _sh(dl, -1, -1, 1.0), _sh(dl, -1, 1, 1.0)
    neSW, nwSE = _sh(ne, -1, -1), _sh(nw, -1, 1)
    d = dl - ne * ne / dNE - nw * nw / dNW - neSW * neSW / dSW - nwSE * nwSE / dSE
    e2 = -(ne * _sh(nw, 0, 2) / dNE + nwSE * _sh(ne, -1, 1) / dSE)
    n2 = -(ne * _sh(nw, 1, 1) / dNE + nw * _sh(ne, 1, -1) / dNW)
    qne = np.where(r1, -ne * _sh(ne, 1, 1) / dNE, 0.0)  # fill-in to (i+2, j+2)
    qnw = np.where(r1, -nw * _sh(nw, 1, -1) / dNW, 0.0)  # fill-in to (i-2, j+2)
    d = np.where(r1, d, 1.0)
    K = {(0, 2): np.where(r1, e2, 0.0), (2, 0): np.where(r1, n2, 0.0)}
    _lump(d, K, qne, (2, 2), ((0, 2), (2, 0)), mode)
    _lump(d, K, qnw, (2, -2), ((0, -2), (2, 0)), mode)
    return d, K[(0, 2)], K[(2, 0)]


def _parity(shape):
    ny, nx = shape
    jj, ii = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    return ii, jj


def _check_pivots(values, what, level):
    bad = ~(values > 0)
    if bad.any():
        raise ValueError(
            f"RRB factorisation broke down: non-positive pivot among the {what} of level "
            f"{level} (min {values.min():.3e}); the operator is not SPD or not diagonally "
            "dominant enough for lumping"
        )


def _black_quarter_coeffs(c, e, n):
    """Per black node: ``[1/c, lW, lE, lS, lN]`` (couplings divided by its diagonal), as
    ``(2, 5, h, w)`` for quarters b1, b2 (padding: 1/c = 1, l = 0)."""
    ny, nx = c.shape
    inv = 1.0 / c
    cols = [inv, _sh(e, 0, -1) * inv, e * inv, _sh(n, -1, 0) * inv, n * inv]
    q = np.stack([to_quarters(a, pad=0.0) for a in cols])  # (5, 4, h, w)
    out = np.ascontiguousarray(q[:, 2:4].transpose(1, 0, 2, 3))  # (2, 5, h, w)
    out[:, 0][to_quarters(np.zeros((ny, nx)), pad=1.0)[2:4] == 1.0] = 1.0
    return out


def _rotated_quarter_coeffs(dl, ne, nw):
    """Per r1 node: ``[1/d(r2 at ne), lne, lnw, lse, lsw]`` where ``l = coupling / d`` of
    the r2 neighbour, as ``(5, h, w)``.  Index 0 holds ``1/d`` of the r2 node ``(I, J)``."""
    inv = 1.0 / dl
    lne = ne * _sh(inv, 1, 1, 1.0)
    lnw = nw * _sh(inv, 1, -1, 1.0)
    lse = _sh(nw, -1, 1) * _sh(inv, -1, 1, 1.0)
    lsw = _sh(ne, -1, -1) * _sh(inv, -1, -1, 1.0)
    invq = to_quarters(inv, pad=1.0)[1]
    return np.stack([invq] + [to_quarters(a, pad=0.0)[0] for a in (lne, lnw, lse, lsw)])


def _schur9_quarter_coeffs(d, ne, nw, ee, nn):
    """Exact level-1 Schur complement on the red nodes, quarter storage ``(10, h, w)``:
    ``[d1, d2, ne, nw, se, sw, e11, n11, e22, n22]`` (``ne..sw`` are the couplings of the
    r1 node ``(I, J)`` to its r2 neighbours; ``e11``/``n11`` r1-r1 couplings to
    ``(I+1, J)``/``(I, J+1)``; likewise ``e22``/``n22`` between r2 nodes)."""
    se = _sh(nw, -1, 1)
    sw = _sh(ne, -1, -1)
    dq = to_quarters(d, pad=1.0)
    r1 = [to_quarters(a)[0] for a in (ne, nw, se, sw, ee, nn)]
    r2 = [to_quarters(a)[1] for a in (ee, nn)]
    return np.stack([dq[0], dq[1]] + r1 + r2)


def build_levels(stencil, levels: int | None = None, lumping: str = "stencil",
                 coarse_nodes: int = 64, factors: str = "float32"):
    """Factorise; return a dict of host arrays (quarter storage) for the solver.

    ``levels`` is the level ``k`` at which the rest is factorised completely
    (``2 <= k <= max_levels``); default: the first level with at most
    ``coarse_nodes`` nodes.  ``lumping``: ``"stencil"`` or ``"diagonal"`` (see
    :func:`_lump`).  ``factors``: the storage precision of the preconditioner's
    factors (``"float32"`` or ``"float64"``, see :func:`_store_factors`).
    """
    if lumping not in ("stencil", "diagonal"):
        raise ValueError(f"unknown lumping {lumping!r}; valid: 'stencil', 'diagonal'")
    if factors not in FACTOR_DTYPES:
        raise ValueError(f"unknown factor precision {factors!r}; valid: 'float32', 'float64'")
    c, e, n = check_stencil(stencil)
    ny, nx = c.shape
    kmax = max_levels(nx, ny)
    if kmax < 2:
        raise ValueError(f"grid {nx} x {ny} is too small for RRB (needs 2 nodes)")
    shapes = level_shapes(nx, ny, kmax)
    if levels is None:
        levels = next(
            (k for k in range(2, kmax + 1)
             if shapes[k - 1][0] * shapes[k - 1][1] <= coarse_nodes), kmax
        )
    if not isinstance(levels, (int, np.integer)) or not 2 <= levels <= kmax:
        raise ValueError(
            f"RRB stopping level must be an integer in [2, {kmax}] for a "
            f"{nx} x {ny} grid, got {levels!r}"
        )
    levels = int(levels)
    fx, fy = shapes[levels - 1]
    h, w = quarter_shape(fx, fy)
    if 2 * h * w > MAX_DIRECT:
        raise ValueError(
            f"last RRB level {levels} has {fx} x {fy} nodes; at most "
            f"{2 * MAX_DIRECT} can be factorised completely: choose a higher level"
        )
    out = {
        "shape": (nx, ny),
        "levels": levels,
        "max_levels": kmax,
        "shapes": shapes[:levels],
        "black": [],
        "rot": [],
    }
    for lev in range(1, levels):
        if lev > 1:
            _check_pivots(c, "nodes", lev)
        ii, jj = _parity(c.shape)
        d, ne, nw, ee, nn = _black_step(c, e, n)
        if lev == 1:
            out["schur9"] = _schur9_quarter_coeffs(d, ne, nw, ee, nn)
        out["black"].append(_black_quarter_coeffs(c, e, n))
        red = (ii + jj) % 2 == 0
        ne = np.where(red, ne, 0.0)
        nw = np.where(red, nw, 0.0)
        dl, ne, nw = _lump_black(np.where(red, d, 1.0), ne, nw, ee, nn, red, lumping)
        _check_pivots(dl[(ii % 2 == 1) & (jj % 2 == 1)], "r2 nodes", lev)
        out["rot"].append(_rotated_quarter_coeffs(dl, ne, nw))
        c2, e2, n2 = _r2_step(dl, ne, nw, (ii % 2 == 0) & (jj % 2 == 0), lumping)
        c, e, n = c2[::2, ::2].copy(), e2[::2, ::2].copy(), n2[::2, ::2].copy()
    _check_pivots(c, "nodes", levels)
    out["last"] = (c, e, n)
    out["last_black"] = _black_quarter_coeffs(c, e, n)
    out["last_inv"], out["last_scale"] = _red_schur_inverse(c, e, n, levels)
    _store_factors(out, FACTOR_DTYPES[factors])
    return out


FACTOR_DTYPES = {"float32": np.float32, "float64": np.float64}


def _store_factors(out, dtype):
    """Round the preconditioner's factors (the r2 steps of every level, the black steps
    of levels >= 2 and of the last level) to ``dtype``; the kernels still compute in
    float64.  ``M = L D L^T`` stays exactly symmetric (the forward and the backward sweep
    read the same stored entries of ``L``) and positive definite (the stored ``1/d`` stay
    positive), so CG sees a fixed SPD preconditioner, and float32 halves the bytes that
    an application reads.  The level-1 black step is not part of the preconditioner (it
    makes the exact Schur system CG solves and recovers the black unknowns), so it keeps
    float64, as does the Schur operator ``schur9``."""
    def rounded(a, pivots):
        with np.errstate(over="ignore", under="ignore"):
            r = np.ascontiguousarray(a, dtype=dtype)
        # an entry beyond float32's range (|1/d| or |l| > 3e38, or 1/d below 1e-45)
        # keeps the array in float64 rather than store inf or a zero pivot
        return r if np.isfinite(r).all() and (pivots(r) > 0).all() else a

    out["rot"] = [rounded(p, lambda r: r[0]) for p in out["rot"]]
    out["black"] = out["black"][:1] + [rounded(b, lambda r: r[:, 0]) for b in out["black"][1:]]
    out["last_black"] = rounded(out["last_black"], lambda r: r[:, 0])


def dense_matrix(c, e, n, order="quarters"):
    """Dense matrix of a 5-point operator, rows in quarter order (padding: identity)
    or natural order (``order="natural"``)."""
    ny, nx = c.shape
    N = nx * ny
    A = np.zeros((N, N))
    idx = np.arange(N).reshape(ny, nx)
    A[idx.ravel(), idx.ravel()] = c.ravel()
    a, b = idx[:, :-1].ravel(), idx[:, 1:].ravel()
    A[a, b] = A[b, a] = e[:, :-1].ravel()
    a, b = idx[:-1, :].ravel(), idx[1:, :].ravel()
    A[a, b] = A[b, a] = n[:-1, :].ravel()
    if order == "natural":
        return A
    h, w = quarter_shape(nx, ny)
    pos = to_quarters(idx.astype(np.float64), pad=-1.0).ravel().astype(np.int64)
    M = np.eye(pos.size)
    real = np.nonzero(pos >= 0)[0]
    M[np.ix_(real, real)] = A[np.ix_(pos[real], pos[real])]
    return M


def red_schur_matrix(c, e, n):
    """Dense exact Schur complement of a 5-point operator on its red nodes (the black ones
    eliminated, no lumping), rows in the order of the red quarters r1, r2 (padding:
    identity)."""
    ny, nx = c.shape
    d, ne, nw, ee, nn = _black_step(c, e, n)
    idx = np.arange(nx * ny).reshape(ny, nx)
    pos = to_quarters(idx.astype(np.float64), pad=-1.0)[:2].ravel().astype(np.int64)
    row = np.full(nx * ny, -1)
    real = np.nonzero(pos >= 0)[0]
    row[pos[real]] = real
    ii, jj = _parity((ny, nx))
    red = (ii + jj) % 2 == 0
    S = np.eye(pos.size)
    S[row[idx[red]], row[idx[red]]] = d[red]
    for a, dj, di in ((ne, 1, 1), (nw, 1, -1), (ee, 0, 2), (nn, 2, 0)):
        both = red & (jj + dj < ny) & (ii + di >= 0) & (ii + di < nx)
        ra = row[idx[both]]
        rb = row[idx[jj[both] + dj, ii[both] + di]]
        S[ra, rb] = S[rb, ra] = a[both]
    return S


# Dense inverses with more rows are stored in 16-bit fixed point: the GPU reads a
# 3000-row one (the default at 1.5 M unknowns) in a quarter of the float64 bytes.  The
# inverse is split as ``D F D`` with ``D = sqrt(diag)``, so that ``F`` has a unit diagonal
# and entries in [-1, 1] (Cauchy-Schwarz); ``F`` is stored as ``round(F * 32767)`` in
# int16 and the factor 1/32767 goes into ``D``.  The products accumulate in float64.
# Rounding keeps ``F`` symmetric; it is kept only if still positive definite (checked;
# else float32, else float64), so CG sees a fixed SPD preconditioner either way.  At 1.5
# M unknowns and at 4096^2 it costs no iteration at tol 1e-3 or 1e-8 (docs/rrb.md).
DENSE_F64_ROWS = 1024
FIXED_ONE = 32767


def _red_schur_inverse(c, e, n, level):
    """``(F, d)`` with ``F * d[:, None] * d[None, :]`` the inverse of the last level's red
    Schur complement: ``F`` int16 fixed point above ``DENSE_F64_ROWS`` rows when that
    stays positive definite, else float32 or float64 with ``d = 1``."""
    S = red_schur_matrix(c, e, n)
    try:
        L = np.linalg.cholesky(S)
    except np.linalg.LinAlgError as err:
        raise ValueError(f"RRB last level {level} is not positive definite") from err
    Linv = np.linalg.inv(L)
    inv = Linv.T @ Linv
    inv = 0.5 * (inv + inv.T)
    ones = np.ones(inv.shape[0])
    if inv.shape[0] > DENSE_F64_ROWS:
        d = np.sqrt(np.diag(inv))
        F = np.clip(np.rint((inv / d[:, None]) / d[None, :] * FIXED_ONE), -FIXED_ONE, FIXED_ONE)
        for stored, scale in ((F.astype(np.int16), d / np.sqrt(FIXED_ONE)),
                              (inv.astype(np.float32), ones)):
            try:
                np.linalg.cholesky(stored.astype(np.float64))
                return stored, scale
            except np.linalg.LinAlgError:
                pass
    return inv, ones
