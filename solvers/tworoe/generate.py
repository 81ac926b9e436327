"""Meshes for the two-layer solver's cases.

* :func:`disc_in_square`: the seed's internal circular dam break mesh, the square
  ``[-L, L]^2`` with the circle of radius ``R`` as an internal boundary (so that the
  initial discontinuity follows edges), quality triangles from Shewchuk's Triangle (the
  PyPI ``triangle`` wheel; the seed made its meshes with Triangle too).  The maximum
  area is adjusted until the cell count is within ``tol`` (0.5 %) of the request:
  :data:`SEED_CELLS` are the seed's counts (its Tables 1 and 2).
* :func:`strip`: a structured strip of right triangles (each rectangle cut along one
  diagonal, alternating), optionally rotated; tags 1 (x = 0 end), 2 (x = length end),
  3 (the long sides), in the strip's own coordinates.
"""

from __future__ import annotations

import math

import numpy as np

from .mesh import TriMesh

__all__ = ["SEED_CELLS", "disc_in_square", "strip"]

#: the seed's meshes (triangles), Tables 1 and 2 of de la Asunción et al. (2012)
SEED_CELLS = (4016, 16040, 64052, 256576, 1001898, 2000608, 3000948)


def _triangulate(half, radius, area, quality):
    import triangle

    side = math.sqrt(4.0 * area / math.sqrt(3.0))  # an equilateral triangle of this area
    nc = max(16, int(round(2.0 * math.pi * radius / side)))
    ang = 2.0 * math.pi * np.arange(nc) / nc
    circle = radius * np.stack([np.cos(ang), np.sin(ang)], axis=1)
    ns = max(2, int(round(2.0 * half / side)))
    t = np.linspace(-half, half, ns + 1)[:-1]
    square = np.concatenate([
        np.stack([t, np.full_like(t, -half)], axis=1),
        np.stack([np.full_like(t, half), t], axis=1),
        np.stack([-t, np.full_like(t, half)], axis=1),
        np.stack([np.full_like(t, -half), -t], axis=1),
    ])
    ks = len(square)
    seg = np.concatenate([
        np.stack([np.arange(ks), (np.arange(ks) + 1) % ks], axis=1),
        ks + np.stack([np.arange(nc), (np.arange(nc) + 1) % nc], axis=1),
    ])
    geo = {"vertices": np.concatenate([square, circle]), "segments": seg}
    # fixed-point area: Triangle's switch parser stops at an exponent's 'e'
    out = triangle.triangulate(geo, f"pq{quality}a{area:.15f}Q")
    return out["vertices"], out["triangles"]


def disc_in_square(cells: int = 4016, half: float = 5.0, radius: float = 1.5,
                   tol: float = 0.005, quality: float = 30.0, order: str = "none"
                   ) -> TriMesh:
    """The seed's dam-break mesh with ``cells`` triangles within ``tol`` (relative).

    ``order`` renumbers the cells (:meth:`TriMesh.reordered`; ``"none"`` keeps
    Triangle's order, as the seed did).  All boundary edges have tag 1 (walls).
    """
    if cells < 64:
        raise ValueError(f"cells must be at least 64, got {cells}")
    area = (2.0 * half) ** 2 / cells * 0.97
    best = None
    for _ in range(10):
        nodes, tris = _triangulate(half, radius, area, quality)
        n = len(tris)
        err = n / cells - 1.0
        if best is None or abs(err) < abs(best[0]):
            best = (err, nodes, tris)
        if abs(err) <= 0.5 * tol:
            break
        area *= (n / cells) ** (0.9 if abs(err) > 4 * tol else 1.0)
    err, nodes, tris = best
    if abs(err) > tol:
        raise RuntimeError(f"could not reach {cells} cells within {tol:.1%} (closest "
                           f"{len(tris)})")
    mesh = TriMesh.from_triangles(nodes, tris, tag_names={1: "wall"})
    return mesh if order == "none" else mesh.reordered(order)


def strip(nx: int, ny: int, length: float, width: float, angle: float = 0.0,
          origin=(0.0, 0.0)) -> TriMesh:
    """``nx`` by ``ny`` rectangles of a ``length`` x ``width`` strip, each cut in two
    triangles (diagonals alternating), rotated by ``angle`` (radians) about
    ``origin``.  Tags: 1 at the start (x = 0), 2 at the end (x = length), 3 the sides."""
    x = np.linspace(0.0, length, nx + 1)
    y = np.linspace(0.0, width, ny + 1)
    X, Y = np.meshgrid(x, y, indexing="ij")
    ids = np.arange((nx + 1) * (ny + 1)).reshape(nx + 1, ny + 1)
    a = ids[:-1, :-1].ravel()
    b = ids[1:, :-1].ravel()
    c = ids[1:, 1:].ravel()
    d = ids[:-1, 1:].ravel()
    alt = ((np.arange(nx)[:, None] + np.arange(ny)[None, :]) % 2 == 0).ravel()
    t1 = np.where(alt[:, None], np.stack([a, b, c], 1), np.stack([a, b, d], 1))
    t2 = np.where(alt[:, None], np.stack([a, c, d], 1), np.stack([b, c, d], 1))
    tris = np.stack([t1, t2], axis=1).reshape(-1, 3)
    ca, sa = math.cos(angle), math.sin(angle)
    px = X.ravel()
    py = Y.ravel()
    nodes = np.stack([origin[0] + ca * px - sa * py, origin[1] + sa * px + ca * py], 1)
    eps = 1e-9 * max(length, width)

    def tags(mx, my):
        lx = ca * (mx - origin[0]) + sa * (my - origin[1])
        return np.where(lx < eps, 1, np.where(lx > length - eps, 2, 3))

    return TriMesh.from_triangles(nodes, tris, boundary_tag=tags,
                                  tag_names={1: "start", 2: "end", 3: "side"})
