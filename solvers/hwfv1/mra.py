"""Haar multiresolution analysis on a Z-order (Morton) hierarchy of 2^n x 2^n grids.

Every cell of every level n = 0..L has one global index ``offset(n) + morton(i, j)``
with ``offset(n) = (4^n - 1) / 3``; the four children of cell ``m`` at level n are
``4m .. 4m+3`` at level n+1 (child k = dx + 2 dy), so they are contiguous, and the
finest cells under any cell form one contiguous block of level L.

Arrays of scale coefficients are ``s[nfield, ntotal]``; details ``d[nfield, 3, ninternal]``
(x, y and diagonal Haar details of the cells of levels 0..L-1).  All kernels are Numba,
parallel over the cells of one level.
"""

import numba
import numpy as np

from forestpy.forest.quadrants import compact_bits, spread_bits

__all__ = [
    "offset", "ntotal", "morton", "demorton", "haar", "to_zorder", "from_zorder", "encode",
    "decode", "significance", "significance_swe", "predict", "traverse", "traverse_recursive",
]


def offset(n: int) -> int:
    """Global index of the first cell of level ``n``."""
    return (4**n - 1) // 3


def ntotal(L: int) -> int:
    """Number of cells of levels 0..L."""
    return offset(L + 1)


# the Morton interleave of forestpy's quadrants, compiled; coordinates are below 2^16
# (L <= 14), so the narrow form (wide=False) serves
_spread = numba.njit(inline="always")(spread_bits)
_compact = numba.njit(inline="always")(compact_bits)


@numba.njit(cache=True, inline="always")
def morton(i, j):
    """Z-order code of column ``i``, row ``j`` (x in the even bits)."""
    return _spread(np.int64(i), False) | (_spread(np.int64(j), False) << 1)


@numba.njit(cache=True, inline="always")
def demorton(m):
    return _compact(m, False), _compact(m >> 1, False)


@numba.njit(cache=True, parallel=True)
def _zorder_copy(grid, z, to_z):
    """Copy ``grid[nfield, ny, nx]`` into the Morton-ordered ``z[nfield, 4^L]``
    (``to_z``) or back."""
    nf, ny, nx = grid.shape
    for c in numba.prange(nx * ny):
        j = c // nx
        i = c - j * nx
        m = morton(i, j)
        for f in range(nf):
            if to_z:
                z[f, m] = grid[f, j, i]
            else:
                grid[f, j, i] = z[f, m]


def _check_grid(a, name="array"):
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 3 or a.shape[1] != a.shape[2] or a.shape[1] & (a.shape[1] - 1):
        raise ValueError(f"{name} must have shape (nfield, 2^L, 2^L), got {a.shape}")
    return a, int(a.shape[1]).bit_length() - 1


def to_zorder(a):
    """``a[nfield, 2^L(y), 2^L(x)]`` -> ``[nfield, 4^L]`` in Morton order."""
    a, L = _check_grid(a)
    out = np.empty((a.shape[0], 4**L))
    _zorder_copy(np.ascontiguousarray(a), out, True)
    return out


def from_zorder(z):
    """Inverse of :func:`to_zorder`."""
    nf, n = z.shape
    L = (int(n).bit_length() - 1) // 2
    if 4**L != n:
        raise ValueError(f"Morton array length {n} is not a power of 4")
    out = np.empty((nf, 2**L, 2**L))
    _zorder_copy(out, np.asarray(z, dtype=np.float64), False)
    return out


@numba.njit(cache=True, inline="always")
def haar(c0, c1, c2, c3):
    """Haar analysis of four sibling values (child k = dx + 2 dy): the parent (their
    mean) and the x, y and diagonal details (differences / 4).  Every encoder (this
    module's, the O(tree nodes) CPU and GPU steps) computes them here."""
    return (0.25 * ((c0 + c1) + (c2 + c3)), 0.25 * ((c1 + c3) - (c0 + c2)),
            0.25 * ((c2 + c3) - (c0 + c1)), 0.25 * ((c0 + c3) - (c1 + c2)))


@numba.njit(cache=True, parallel=True)
def encode(s, d, L):
    """Fill levels L-1..0 of ``s`` (level L given) and the details ``d``: Haar analysis,
    parent = mean of the four children, details = x, y, diagonal differences / 4."""
    nf = s.shape[0]
    for n in range(L - 1, -1, -1):
        op = (4**n - 1) // 3
        oc = (4 ** (n + 1) - 1) // 3
        for m in numba.prange(4**n):
            c = oc + 4 * m
            for f in range(nf):
                s[f, op + m], d[f, 0, op + m], d[f, 1, op + m], d[f, 2, op + m] = haar(
                    s[f, c], s[f, c + 1], s[f, c + 2], s[f, c + 3])


@numba.njit(cache=True, parallel=True)
def decode(s, d, sig, L):
    """Haar synthesis from the root along the tree of significant details: children of a
    reached cell with a significant detail get ``parent +- details``, all others get the
    parent value (details treated as zero).  Overwrites levels 1..L of ``s``."""
    nf = s.shape[0]
    reach = np.zeros(s.shape[1], dtype=np.bool_)
    reach[0] = True
    for n in range(L):
        op = (4**n - 1) // 3
        oc = (4 ** (n + 1) - 1) // 3
        for m in numba.prange(4**n):
            p = op + m
            c = oc + 4 * m
            go = reach[p] and sig[p]
            for k in range(4):
                reach[c + k] = go
            for f in range(nf):
                a = d[f, 0, p] if go else 0.0
                b = d[f, 1, p] if go else 0.0
                g = d[f, 2, p] if go else 0.0
                v = s[f, p]
                s[f, c] = v - a - b + g
                s[f, c + 1] = v + a - b - g
                s[f, c + 2] = v - a + b - g
                s[f, c + 3] = v + a + b + g


@numba.njit(cache=True, parallel=True)
def significance(d, norm, eps, L, fields, sig):
    """``sig[p]`` for every cell of levels 0..L-1: some normalised detail
    ``|d| / norm[f]`` of the given fields exceeds ``2^(n-L) eps`` (always true for
    ``eps == 0``: full resolution)."""
    for n in range(L):
        op = (4**n - 1) // 3
        thr = eps * 2.0 ** (n - L)
        for m in numba.prange(4**n):
            p = op + m
            flag = eps == 0.0
            for f in fields:
                for k in range(3):
                    if abs(d[f, k, p]) > thr * norm[f]:
                        flag = True
            sig[p] = flag


@numba.njit(cache=True, parallel=True)
def significance_swe(s, d, eps, L, sig):
    """Significance for shallow water (fields h, qx, qy, z): details of the free surface
    eta = h + z and of both discharges, normalised by ``max(1, max|field|)`` over the
    finest level (same threshold rule as :func:`significance`)."""
    oL = (4**L - 1) // 3
    nfine = 4**L
    part = np.zeros((3, nfine))
    for m in numba.prange(nfine):
        part[0, m] = abs(s[0, oL + m] + s[3, oL + m])
        part[1, m] = abs(s[1, oL + m])
        part[2, m] = abs(s[2, oL + m])
    n0 = max(1.0, part[0].max())
    n1 = max(1.0, part[1].max())
    n2 = max(1.0, part[2].max())
    for n in range(L):
        op = (4**n - 1) // 3
        thr = eps * 2.0 ** (n - L)
        for m in numba.prange(4**n):
            p = op + m
            flag = eps == 0.0
            for k in range(3):
                if (abs(d[0, k, p] + d[3, k, p]) > thr * n0 or abs(d[1, k, p]) > thr * n1
                        or abs(d[2, k, p]) > thr * n2):
                    flag = True
            sig[p] = flag


@numba.njit(cache=True, parallel=True)
def _walk(sig, L, is_leaf, level):
    for m in numba.prange(4**L):
        n = 0
        while n < L and sig[(4**n - 1) // 3 + (m >> (2 * (L - n)))]:
            n += 1
        level[m] = n
        is_leaf[m] = (m & ((1 << (2 * (L - n))) - 1)) == 0


@numba.njit(cache=True)
def _compact_leaves(is_leaf, level, L):
    nleaf = 0
    for m in range(is_leaf.size):
        nleaf += is_leaf[m]
    lev = np.empty(nleaf, dtype=np.int64)
    code = np.empty(nleaf, dtype=np.int64)
    k = 0
    for m in range(is_leaf.size):
        if is_leaf[m]:
            lev[k] = level[m]
            code[k] = m >> (2 * (L - level[m]))
            k += 1
    return lev, code


def traverse(sig, L):
    """Parallel tree traversal: one walker per finest cell descends from the root while
    details are significant; the walker of the first finest cell under each leaf records
    it and stream compaction gathers the leaves.  Returns ``(level, morton)`` arrays of
    the leaves in Z-order."""
    is_leaf = np.empty(4**L, dtype=np.bool_)
    level = np.empty(4**L, dtype=np.int64)
    _walk(sig, L, is_leaf, level)
    return _compact_leaves(is_leaf, level, L)


def traverse_recursive(sig, L):
    """Reference depth-first recursion (pure Python, for tests)."""
    out = []

    def visit(n, m):
        if n < L and sig[offset(n) + m]:
            for k in range(4):
                visit(n + 1, 4 * m + k)
        else:
            out.append((n, m))

    visit(0, 0)
    return np.array([o[0] for o in out]), np.array([o[1] for o in out])


@numba.njit(cache=True, parallel=True)
def predict(raw, L, sig):
    """Harten-type prediction so that the grid follows moving features: a cell is kept
    significant if its own detail, a same-level neighbour's (8-neighbourhood) or its
    parent's detail is significant; then every ancestor of a significant cell is made
    significant so that the tree is graded from the root."""
    for n in range(L):
        op = (4**n - 1) // 3
        size = 1 << n
        for m in numba.prange(4**n):
            i, j = demorton(m)
            flag = False
            for dj in range(-1, 2):
                for di in range(-1, 2):
                    ii = i + di
                    jj = j + dj
                    if 0 <= ii < size and 0 <= jj < size and raw[op + morton(ii, jj)]:
                        flag = True
            if n > 0 and raw[(4 ** (n - 1) - 1) // 3 + (m >> 2)]:
                flag = True
            sig[op + m] = flag
    for n in range(L - 1, 0, -1):
        op = (4**n - 1) // 3
        opp = (4 ** (n - 1) - 1) // 3
        for m in numba.prange(4 ** (n - 1)):
            c = op + 4 * m
            if sig[c] or sig[c + 1] or sig[c + 2] or sig[c + 3]:
                sig[opp + m] = True
