"""Repeated Red-Black ordering and the r1/r2/b1/b2 storage format.

A level's grid of ``nx x ny`` nodes ``(i, j)`` is split by the parities of ``i`` and
``j`` into four *quarters*, each stored as its own 2D array of shape
``(h, w) = (ceil(ny / 2), ceil(nx / 2))``:

====  ==============  =============================================
 q     node            role
====  ==============  =============================================
 0    (2I,   2J)      r1: red, kept; forms the next level's grid
 1    (2I+1, 2J+1)    r2: red, eliminated second (rotated stencil)
 2    (2I+1, 2J)      b1: black, eliminated first
 3    (2I,   2J+1)    b2: black, eliminated first
====  ==============  =============================================

Quarters that are shorter than ``(h, w)`` (odd ``nx`` or ``ny``) are padded; padded
entries carry an identity row (diagonal 1, no couplings) and zero vector values, so every
kernel runs over full rectangles without tests for odd sizes.  Each quarter's neighbours
in the 5-point stencil are quarter arrays shifted by at most one index, so a warp that
reads consecutive ``I`` reads consecutive addresses in every array it touches (the
coalescing argument of de Jong & Vuik).

The r1 nodes of level ``l`` are the whole grid of level ``l + 1`` (spacing doubled), so
level sizes are ``n_{l+1} = ceil(n_l / 2)``; the maximal number of levels is
``1 + floor(log2(max(nx, ny)))``, at which the last grid has at most 2 x 2 nodes.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "R1",
    "R2",
    "B1",
    "B2",
    "max_levels",
    "level_shapes",
    "quarter_shape",
    "to_quarters",
    "from_quarters",
    "rrb_permutation",
]

R1, R2, B1, B2 = 0, 1, 2, 3
# offsets (di, dj) of each quarter's node inside its 2 x 2 cell
OFFSETS = ((0, 0), (1, 1), (1, 0), (0, 1))


def max_levels(nx: int, ny: int) -> int:
    """Maximal number of RRB levels, ``1 + floor(log2(max(nx, ny)))``."""
    n = max(int(nx), int(ny))
    if n < 1:
        raise ValueError(f"grid must have at least one node, got {nx} x {ny}")
    return 1 + int(math.floor(math.log2(n)))


def quarter_shape(nx: int, ny: int) -> tuple[int, int]:
    """Shape ``(h, w)`` of each of the four (padded) quarter arrays of an ``nx x ny`` grid."""
    return (ny + 1) // 2, (nx + 1) // 2


def level_shapes(nx: int, ny: int, levels: int) -> list[tuple[int, int]]:
    """Grid sizes ``(nx_l, ny_l)`` of levels ``1 .. levels``."""
    out = [(int(nx), int(ny))]
    for _ in range(levels - 1):
        a, b = out[-1]
        out.append(((a + 1) // 2, (b + 1) // 2))
    return out


def to_quarters(a, pad=0.0, xp=np):
    """Natural ``(..., ny, nx)`` array -> ``(..., 4, h, w)`` quarters (r1, r2, b1, b2).

    Works on NumPy or CuPy arrays (``xp``); padded entries are set to ``pad``.
    """
    ny, nx = a.shape[-2:]
    h, w = quarter_shape(nx, ny)
    out = xp.full(a.shape[:-2] + (4, h, w), pad, dtype=a.dtype)
    for q, (di, dj) in enumerate(OFFSETS):
        src = a[..., dj::2, di::2]
        out[..., q, : src.shape[-2], : src.shape[-1]] = src
    return out


def from_quarters(qa, nx: int, ny: int, xp=np, out=None):
    """``(..., 4, h, w)`` quarters -> natural ``(..., ny, nx)`` array (inverse of
    :func:`to_quarters`; padding is dropped)."""
    if out is None:
        out = xp.empty(qa.shape[:-3] + (ny, nx), dtype=qa.dtype)
    for q, (di, dj) in enumerate(OFFSETS):
        dst = out[..., dj::2, di::2]
        dst[...] = qa[..., q, : dst.shape[-2], : dst.shape[-1]]
    return out


def rrb_permutation(nx: int, ny: int, levels: int) -> np.ndarray:
    """Natural node numbers (``j * nx + i``) in RRB elimination order.

    Level 1 black nodes, level 1 r2 nodes, level 2 black, level 2 r2, ..., and finally
    the nodes of level ``levels`` (factorised completely), each group in row-major order
    of its own level grid.  Used by tests and by the explicit reference factorisation.
    """
    idx = np.arange(nx * ny).reshape(ny, nx)
    order = []
    for _ in range(levels - 1):
        ii, jj = np.meshgrid(np.arange(idx.shape[1]), np.arange(idx.shape[0]))
        black = (ii + jj) % 2 == 1
        r2 = (ii % 2 == 1) & (jj % 2 == 1)
        order.append(idx[black])
        order.append(idx[r2])
        idx = idx[0::2, 0::2]
    order.append(idx.ravel())
    perm = np.concatenate(order)
    assert perm.size == nx * ny
    return perm
