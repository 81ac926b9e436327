"""Compiled loops of the forest operations (host, Numba, cached on disk).

The forest's arrays are small (one entry per leaf, tens of thousands in a large run),
so the vectorised NumPy of :mod:`forestpy.forest.forest` spends most of its time making
temporaries.  These loops do the same work in one pass each: the refinement of flagged
leaves, the balance check of a set of leaves (eight point locations each, by binary
search on the sorted keys), and the location of one sorted key sequence in another (a
merge).  Each is checked against the NumPy operations it replaces
(``tests/core/forest/test_forest_kernels.py``).
"""

from __future__ import annotations

import numba
import numpy as np

from .quadrants import MAX_LEVEL, spread_bits

__all__ = ["coarse_neighbors", "coarsen_arrays", "family_starts", "locate_sorted",
           "refine_arrays"]

_spread = numba.njit(inline="always")(spread_bits)

# directions: the 4 faces then the 4 corners, as in forest._FACES + forest._CORNERS
_DIRS = np.array([[-1, 0], [1, 0], [0, -1], [0, 1], [-1, -1], [1, -1], [-1, 1], [1, 1]],
                 dtype=np.int64)


@numba.njit(cache=True)
def refine_arrays(tree, level, x, y, keys, flags):
    """Each flagged leaf replaced by its 4 children in Morton order: ``(tree, level, x,
    y, keys, new, counts)`` as :func:`forestpy.forest.forest._refine_arrays`."""
    n = tree.shape[0]
    counts = np.empty(n, dtype=np.int64)
    total = 0
    for i in range(n):
        c = 4 if flags[i] else 1
        counts[i] = c
        total += c
    t = np.empty(total, dtype=np.int64)
    lv = np.empty(total, dtype=np.int64)
    nx = np.empty(total, dtype=np.int64)
    ny = np.empty(total, dtype=np.int64)
    nk = np.empty(total, dtype=np.int64)
    new = np.zeros(total, dtype=np.bool_)
    o = 0
    for i in range(n):
        if flags[i]:
            l1 = level[i] + 1
            h = np.int64(1) << (MAX_LEVEL - l1)
            span = np.int64(1) << (2 * (MAX_LEVEL - l1))
            for p in range(4):
                t[o] = tree[i]
                lv[o] = l1
                nx[o] = x[i] + (p & 1) * h
                ny[o] = y[i] + (p >> 1) * h
                nk[o] = keys[i] + p * span
                new[o] = True
                o += 1
        else:
            t[o], lv[o], nx[o], ny[o], nk[o] = tree[i], level[i], x[i], y[i], keys[i]
            o += 1
    return t, lv, nx, ny, nk, new, counts


@numba.njit(inline="always")
def _locate(keys, g, gx, gy):
    """Leaf containing the global finest-unit point ``(gx, gy)``, -1 outside the brick;
    ``g``: (trees_x, trees_y, periodic_x, periodic_y)."""
    wx = g[0] << MAX_LEVEL
    wy = g[1] << MAX_LEVEL
    if g[2]:
        gx %= wx
    if g[3]:
        gy %= wy
    if gx < 0 or gx >= wx or gy < 0 or gy >= wy:
        return -1
    mask = (np.int64(1) << MAX_LEVEL) - 1
    tree = (gy >> MAX_LEVEL) * g[0] + (gx >> MAX_LEVEL)
    key = (tree << (2 * MAX_LEVEL)) + (_spread(gx & mask) | (_spread(gy & mask) << 1))
    lo, hi = 0, keys.shape[0]  # first key > key, minus one
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] <= key:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@numba.njit(cache=True)
def _coarse_table(keys, g, tree, level, x, y, sel, dirs, out):
    for r in range(sel.shape[0]):  # serial: usually few leaves, no thread wake-up
        i = sel[r]
        lv = level[i]
        h = np.int64(1) << (MAX_LEVEL - lv)
        gx = (tree[i] % g[0]) * (np.int64(1) << MAX_LEVEL) + x[i]
        gy = (tree[i] // g[0]) * (np.int64(1) << MAX_LEVEL) + y[i]
        for d in range(dirs.shape[0]):
            dx, dy = dirs[d, 0], dirs[d, 1]
            px = gx - 1 if dx < 0 else (gx + h if dx > 0 else gx)
            py = gy - 1 if dy < 0 else (gy + h if dy > 0 else gy)
            m = _locate(keys, g, px, py)
            out[r, d] = m if m >= 0 and level[m] < lv - 1 else -1


def coarse_neighbors(conn, keys, tree, level, x, y, sel):
    """``(coarse, fine)`` as :func:`forestpy.forest.forest._coarse_neighbors`: the
    leaves two or more levels coarser than a leaf of ``sel`` they touch (across a face
    or a corner), and the leaves of ``sel`` that see one; direction-major order."""
    g = np.array([conn.nx, conn.ny, int(conn.periodic_x), int(conn.periodic_y)],
                 dtype=np.int64)
    sel = np.ascontiguousarray(sel, dtype=np.int64)
    out = np.empty((sel.shape[0], 8), dtype=np.int64)
    _coarse_table(keys, g, tree, level, x, y, sel, _DIRS, out)
    hit = out.T >= 0
    return out.T[hit], np.broadcast_to(sel, (8, sel.shape[0]))[hit]


@numba.njit(cache=True)
def locate_sorted(keys, queries):
    """For increasing ``queries``: the index of the last of the increasing ``keys`` that
    is ``<= `` each query (``searchsorted(keys, queries, "right") - 1``), by one merge."""
    out = np.empty(queries.shape[0], dtype=np.int64)
    j = 0
    n = keys.shape[0]
    for i in range(queries.shape[0]):
        q = queries[i]
        while j < n and keys[j] <= q:
            j += 1
        out[i] = j - 1
    return out


@numba.njit(inline="always")
def _family_at(tree, level, x, y, i):
    """Whether leaves ``i..i+3`` (``i + 3 < n``) are the four children of one parent:
    child 0 at ``i`` (aligned to the parent), the same level and tree, child 3 at the
    opposite corner (sorted leaves tiling the tree: children 1 and 2 in between)."""
    lv = level[i]
    if lv < 1:
        return False
    h = np.int64(1) << (MAX_LEVEL - lv)
    if (x[i] & (2 * h - 1)) != 0 or (y[i] & (2 * h - 1)) != 0:
        return False
    for d in range(1, 4):
        if level[i + d] != lv or tree[i + d] != tree[i]:
            return False
    return x[i + 3] == x[i] + h and y[i + 3] == y[i] + h


@numba.njit(cache=True)
def family_starts(tree, level, x, y):
    """:func:`forestpy.forest.quadrants.family_starts`, one pass."""
    n = tree.shape[0]
    out = np.zeros(n, dtype=np.bool_)
    for i in range(n - 3):
        out[i] = _family_at(tree, level, x, y, i)
    return out


@numba.njit(cache=True)
def coarsen_arrays(tree, level, x, y, keys, new, flags):
    """Every family of four Morton siblings (leaves ``i..i+3`` of one parent, as
    :func:`~forestpy.forest.quadrants.family_starts` finds them) all flagged replaced by
    its parent, in the first child's place: ``(tree, level, x, y, keys, new, parents)``
    with ``new`` the input mask carried over and set at the parents, ``parents`` their
    positions in the result."""
    n = tree.shape[0]
    start = np.zeros(n, dtype=np.bool_)
    nfam = 0
    i = 0
    while i + 3 < n:
        ok = flags[i] and flags[i + 1] and flags[i + 2] and flags[i + 3]
        if ok and _family_at(tree, level, x, y, i):
            start[i] = True
            nfam += 1
            i += 4
        else:
            i += 1
    m = n - 3 * nfam
    t = np.empty(m, dtype=np.int64)
    lv2 = np.empty(m, dtype=np.int64)
    x2 = np.empty(m, dtype=np.int64)
    y2 = np.empty(m, dtype=np.int64)
    k2 = np.empty(m, dtype=np.int64)
    new2 = np.empty(m, dtype=np.bool_)
    parents = np.empty(nfam, dtype=np.int64)
    o = 0
    f = 0
    i = 0
    while i < n:
        t[o], x2[o], y2[o], k2[o] = tree[i], x[i], y[i], keys[i]
        if start[i]:
            lv2[o] = level[i] - 1
            new2[o] = True
            parents[f] = o
            f += 1
            i += 4
        else:
            lv2[o] = level[i]
            new2[o] = new[i]
            i += 1
        o += 1
    return t, lv2, x2, y2, k2, new2, parents
