"""Quadrant algebra on arrays.

A quadrant is ``(tree, level, x, y)``: ``x`` and ``y`` are the int64 coordinates of its
lower-left corner inside its tree, in units of the finest level ``MAX_LEVEL``.  A quadrant
of level ``l`` has side ``2**(MAX_LEVEL - l)`` and ``x``, ``y`` are multiples of it.

Every function here is vectorised: it takes scalars or NumPy arrays (broadcast together)
and returns int64 (or bool) arrays; nothing loops over quadrants in Python.  Functions
returning same-size neighbours may produce coordinates outside ``[0, 2**MAX_LEVEL)``: the
caller decides what leaving the tree means (see :class:`~forestpy.forest.Forest`).

The Morton (Z-order) index interleaves the bits of ``x`` (even bits) and ``y`` (odd
bits); the global key of a point or quadrant is ``tree * 4**MAX_LEVEL + morton(x, y)``.
A quadrant of level ``l`` covers the contiguous key range
``[key, key + 4**(MAX_LEVEL - l))``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "MAX_LEVEL",
    "ROOT_LEN",
    "TREE_KEYS",
    "morton_encode",
    "morton_decode",
    "spread_bits",
    "compact_bits",
    "quadrant_key",
    "quadrant_len",
    "key_span",
    "is_aligned",
    "parent",
    "child",
    "children",
    "sibling_id",
    "is_family",
    "family_starts",
    "face_neighbor",
    "corner_neighbor",
]

MAX_LEVEL = 20
"""Finest level; coordinates are integers in ``[0, 2**MAX_LEVEL)``."""
ROOT_LEN = 1 << MAX_LEVEL
"""Side of a tree (a level-0 quadrant) in finest units."""
TREE_KEYS = 1 << (2 * MAX_LEVEL)
"""Number of keys per tree, ``4**MAX_LEVEL``."""

_M1 = np.int64(0x5555555555555555)
_M2 = np.int64(0x3333333333333333)
_M4 = np.int64(0x0F0F0F0F0F0F0F0F)
_M8 = np.int64(0x00FF00FF00FF00FF)
_M16 = np.int64(0x0000FFFF0000FFFF)
_M32 = np.int64(0x00000000FFFFFFFF)


def _i64(a):
    return np.asarray(a, dtype=np.int64)


def spread_bits(v, wide=True):
    """Move bit ``k`` of a 32-bit ``v`` to bit ``2k`` (int64 scalars or arrays);
    ``wide=False``: of a ``v`` below ``2**16``, one stage less.

    Plain Python on purpose: Numba compiles these same functions for the scalar Morton
    codes of the compiled kernels (ghost plans; HWFV1's Z-order hierarchy, whose
    coordinates are below ``2**16``, with ``wide=False`` a constant)."""
    if wide:
        v = v & _M32
        v = (v | (v << 16)) & _M16
    v = (v | (v << 8)) & _M8
    v = (v | (v << 4)) & _M4
    v = (v | (v << 2)) & _M2
    return (v | (v << 1)) & _M1


def compact_bits(v, wide=True):
    """Inverse of :func:`spread_bits`: gather the even bits of ``v`` (below ``2**32``
    with ``wide=False``)."""
    v = v & _M1
    v = (v | (v >> 1)) & _M2
    v = (v | (v >> 2)) & _M4
    v = (v | (v >> 4)) & _M8
    v = (v | (v >> 8)) & _M16
    if wide:
        v = (v | (v >> 16)) & _M32
    return v


def morton_encode(x, y):
    """Morton index of ``(x, y)``: bits of ``x`` in the even, of ``y`` in the odd positions.

    Parameters
    ----------
    x, y : int or array_like of int
        Coordinates in ``[0, 2**MAX_LEVEL)`` (not checked).

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    >>> int(morton_encode(1, 0)), int(morton_encode(0, 1)), int(morton_encode(3, 3))
    (1, 2, 15)
    """
    return spread_bits(_i64(x)) | (spread_bits(_i64(y)) << 1)


def morton_decode(m):
    """Inverse of :func:`morton_encode`: return ``(x, y)`` int64 arrays.

    Examples
    --------
    >>> [int(v) for v in morton_decode(morton_encode(5, 9))]
    [5, 9]
    """
    m = _i64(m)
    return compact_bits(m), compact_bits(m >> 1)


def quadrant_key(tree, x, y):
    """Global space-filling-curve key ``tree * 4**MAX_LEVEL + morton(x, y)`` (int64)."""
    return _i64(tree) * TREE_KEYS + morton_encode(x, y)


def quadrant_len(level):
    """Side ``2**(MAX_LEVEL - level)`` of a quadrant of ``level``, in finest units."""
    return np.left_shift(np.int64(1), MAX_LEVEL - _i64(level))


def key_span(level):
    """Number of curve keys ``4**(MAX_LEVEL - level)`` covered by a quadrant of ``level``."""
    return np.left_shift(np.int64(1), 2 * (MAX_LEVEL - _i64(level)))


def is_aligned(level, x, y):
    """Whether ``0 <= level <= MAX_LEVEL``, ``(x, y)`` lies in the tree and is a multiple
    of the quadrant side."""
    level, x, y = _i64(level), _i64(x), _i64(y)
    ok_level = (level >= 0) & (level <= MAX_LEVEL)
    h = quadrant_len(np.clip(level, 0, MAX_LEVEL))
    inside = (x >= 0) & (x < ROOT_LEN) & (y >= 0) & (y < ROOT_LEN)
    return ok_level & inside & ((x & (h - 1)) == 0) & ((y & (h - 1)) == 0)


def parent(level, x, y):
    """Parent ``(level - 1, px, py)`` of quadrants with ``level >= 1`` (not checked)."""
    level, x, y = _i64(level), _i64(x), _i64(y)
    mask = ~(quadrant_len(level - 1) - 1)
    return level - 1, x & mask, y & mask


def sibling_id(level, x, y):
    """Child id in ``0..3`` of a quadrant within its parent: ``bx + 2 * by``.

    Level-0 quadrants get id 0.
    """
    level, x, y = _i64(level), _i64(x), _i64(y)
    h = quadrant_len(level)
    root = level == 0
    bx = np.where(root, 0, (x // np.where(root, 1, h)) & 1)
    by = np.where(root, 0, (y // np.where(root, 1, h)) & 1)
    return bx + 2 * by


def child(level, x, y, cid):
    """Child ``cid`` (``0..3``, Morton order) of quadrants with ``level < MAX_LEVEL``."""
    level, x, y, cid = _i64(level), _i64(x), _i64(y), _i64(cid)
    h = quadrant_len(level + 1)
    return level + 1, x + (cid & 1) * h, y + ((cid >> 1) & 1) * h


def children(level, x, y):
    """All four children, Morton order along a new last axis of length 4."""
    level, x, y = _i64(level), _i64(x), _i64(y)
    cid = np.arange(4, dtype=np.int64)
    out = child(level[..., None], x[..., None], y[..., None], cid)
    return tuple(np.ascontiguousarray(a) for a in np.broadcast_arrays(*out))


def is_family(level, x, y):
    """Whether the four quadrants along the last axis are the Morton-ordered children of
    one parent.

    Parameters
    ----------
    level, x, y : array_like, shape (..., 4)

    Returns
    -------
    numpy.ndarray of bool, shape (...)
    """
    level, x, y = _i64(level), _i64(x), _i64(y)
    l0 = level[..., 0]
    ok = (l0 >= 1) & np.all(level == l0[..., None], axis=-1)
    l0c = np.where(ok, l0, 1)
    _, px, py = parent(l0c, x[..., 0], y[..., 0])
    _, cx, cy = children(l0c - 1, px, py)
    return ok & np.all((cx == x) & (cy == y), axis=-1)


def family_starts(tree, level, x, y):
    """Mask of positions ``i`` in a curve-sorted leaf sequence where leaves ``i..i+3`` are
    the four children of one parent (in the same tree).

    Families never overlap, so the masked positions are disjoint groups of four.
    """
    tree, level, x, y = _i64(tree), _i64(level), _i64(x), _i64(y)
    n = tree.shape[0]
    out = np.zeros(n, dtype=bool)
    if n < 4:
        return out
    m = n - 3
    lv = level[:m]
    cand = (lv >= 1) & (sibling_id(level[:m], x[:m], y[:m]) == 0)
    cand &= (level[3:] == lv) & (level[1 : m + 1] == lv) & (level[2 : m + 2] == lv)
    cand &= (tree[3:] == tree[:m])
    # The last of the four must be child 3 of the same parent: its corner is (x+h, y+h).
    h = quadrant_len(np.where(cand, lv, 1))
    cand &= (x[3:] == x[:m] + h) & (y[3:] == y[:m] + h)
    out[:m] = cand
    return out


_FACE_DIR = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], dtype=np.int64)
_CORNER_DIR = np.array([[-1, -1], [1, -1], [-1, 1], [1, 1]], dtype=np.int64)


def face_neighbor(level, x, y, face):
    """Same-size neighbour across ``face`` (0 = -x, 1 = +x, 2 = -y, 3 = +y).

    Returns ``(level, nx, ny)``; the coordinates may lie outside the tree.
    """
    level, x, y = _i64(level), _i64(x), _i64(y)
    d = _FACE_DIR[_i64(face)]
    h = quadrant_len(level)
    return level, x + d[..., 0] * h, y + d[..., 1] * h


def corner_neighbor(level, x, y, corner):
    """Same-size diagonal neighbour across ``corner`` (0 = (-x,-y), 1 = (+x,-y),
    2 = (-x,+y), 3 = (+x,+y)).

    Returns ``(level, nx, ny)``; the coordinates may lie outside the tree.
    """
    level, x, y = _i64(level), _i64(x), _i64(y)
    d = _CORNER_DIR[_i64(corner)]
    h = quadrant_len(level)
    return level, x + d[..., 0] * h, y + d[..., 1] * h
