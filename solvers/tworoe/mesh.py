"""Triangle meshes for the two-layer solver: connectivity, geometry, checks, ordering.

:class:`TriMesh` is immutable once built.  From nodes and triangles it derives, all
vectorised (no Python loop over cells or edges):

* ``edges`` (node pairs), ``edge_cells`` (left cell, right cell; ``-1`` on the
  boundary), ``normal`` (unit, from the left cell to the right one, outward on the
  boundary), ``length``;
* ``area``, ``centroid``, ``cell_edges`` (the three edges of each cell, in the order of
  its sides), ``cell_side`` (0 where the cell is the edge's left cell, 1 where it is the
  right one), ``neighbours`` (``-1`` across the boundary);
* ``edge_tag``: 0 for interior edges, the boundary tag (> 0) of each boundary edge.

Triangles are made counter-clockwise.  :class:`MeshError` (a ``ValueError``) names the
first offence of an invalid mesh: a degenerate triangle (area not above
``1e-12`` times the mean), an inverted one (orientation against the rest of the mesh),
a node index out of range, an unreferenced node, a non-manifold edge (shared by more
than two triangles), a repeated node within a triangle.

:meth:`TriMesh.reordered` renumbers cells for locality: ``"hilbert"`` (Hilbert curve
order of the centroids) or ``"rcm"`` (reverse Cuthill-McKee of the cell adjacency,
``scipy.sparse.csgraph``); edges are then sorted by their left cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["MeshError", "TriMesh", "hilbert_keys"]


class MeshError(ValueError):
    """An invalid triangle mesh: the message names the first offending entity."""


@dataclass(frozen=True, eq=False)
class TriMesh:
    """A conforming triangle mesh with its edge and neighbour tables (see the module).

    Build it with :meth:`from_triangles`; ``tag_names`` maps boundary tags to names.
    """

    nodes: np.ndarray
    tris: np.ndarray
    edges: np.ndarray
    edge_cells: np.ndarray
    normal: np.ndarray
    length: np.ndarray
    edge_tag: np.ndarray
    area: np.ndarray
    centroid: np.ndarray
    cell_edges: np.ndarray
    cell_side: np.ndarray
    neighbours: np.ndarray
    tag_names: dict = field(default_factory=dict)

    @property
    def num_cells(self) -> int:
        return len(self.tris)

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    @property
    def boundary_edges(self) -> np.ndarray:
        return np.flatnonzero(self.edge_cells[:, 1] < 0)

    @classmethod
    def from_triangles(cls, nodes, tris, boundary_tag=None, tag_names=None) -> TriMesh:
        """Check and connect a mesh.

        Parameters
        ----------
        nodes : (n, 2) float array (a third column of zeros is dropped).
        tris : (m, 3) int array of node indices (0-based).
        boundary_tag : callable, dict or None
            ``f(x, y) -> int array`` of the tag (> 0) of boundary edges from their
            midpoints; or ``{frozenset((a, b)): tag}`` for node pairs; default 1.
        tag_names : dict, optional
            ``{tag: name}``.
        """
        nodes = np.asarray(nodes, dtype=np.float64)
        tris = np.asarray(tris)
        if nodes.ndim != 2 or nodes.shape[1] not in (2, 3) or len(nodes) < 3:
            raise MeshError(f"nodes must be an (n, 2) array with n >= 3, got shape "
                            f"{nodes.shape}")
        if nodes.shape[1] == 3:
            if np.any(nodes[:, 2] != 0.0):
                raise MeshError("nodes have a non-zero z coordinate: the mesh is not planar")
            nodes = nodes[:, :2]
        nodes = np.ascontiguousarray(nodes)
        if not np.all(np.isfinite(nodes)):
            bad = int(np.flatnonzero(~np.isfinite(nodes).all(axis=1))[0])
            raise MeshError(f"node {bad} has a non-finite coordinate")
        if tris.ndim != 2 or tris.shape[1] != 3 or len(tris) == 0:
            raise MeshError(f"triangles must be an (m, 3) array with m >= 1, got shape "
                            f"{tris.shape}")
        if not np.issubdtype(tris.dtype, np.integer):
            raise MeshError(f"triangle node indices must be integers, not {tris.dtype}")
        tris = tris.astype(np.int64)
        n = len(nodes)
        out = (tris < 0) | (tris >= n)
        if out.any():
            c = int(np.flatnonzero(out.any(axis=1))[0])
            raise MeshError(f"triangle {c} refers to node {tris[c].tolist()}, outside "
                            f"0..{n - 1}")
        rep = ((tris[:, 0] == tris[:, 1]) | (tris[:, 1] == tris[:, 2])
               | (tris[:, 0] == tris[:, 2]))
        if rep.any():
            c = int(np.flatnonzero(rep)[0])
            raise MeshError(f"triangle {c} repeats a node: {tris[c].tolist()}")
        used = np.zeros(n, dtype=bool)
        used[tris.ravel()] = True
        if not used.all():
            k = int(np.flatnonzero(~used)[0])
            raise MeshError(f"{int((~used).sum())} unreferenced node(s), the first is "
                            f"node {k} at {nodes[k].tolist()}")
        p0, p1, p2 = nodes[tris[:, 0]], nodes[tris[:, 1]], nodes[tris[:, 2]]
        sarea = 0.5 * ((p1[:, 0] - p0[:, 0]) * (p2[:, 1] - p0[:, 1])
                       - (p1[:, 1] - p0[:, 1]) * (p2[:, 0] - p0[:, 0]))
        scale = np.abs(sarea).mean()
        degenerate = np.abs(sarea) <= 1e-12 * scale
        if degenerate.any():
            c = int(np.flatnonzero(degenerate)[0])
            raise MeshError(f"{int(degenerate.sum())} degenerate triangle(s) (zero area), "
                            f"the first is triangle {c} with nodes {tris[c].tolist()}")
        sign = 1.0 if (sarea > 0).sum() * 2 >= len(sarea) else -1.0
        inverted = sarea * sign < 0
        if inverted.any():
            c = int(np.flatnonzero(inverted)[0])
            raise MeshError(f"{int(inverted.sum())} inverted triangle(s) (orientation "
                            f"against the rest of the mesh), the first is triangle {c} "
                            f"with nodes {tris[c].tolist()}")
        if sign < 0:
            tris = tris[:, [0, 2, 1]]
        return cls._connect(nodes, np.ascontiguousarray(tris), np.abs(sarea),
                            boundary_tag, dict(tag_names or {}))

    @classmethod
    def _connect(cls, nodes, tris, area, boundary_tag, tag_names) -> TriMesh:
        m = len(tris)
        n = len(nodes)
        # side k of a triangle goes from node k to node k+1 (counter-clockwise)
        a = tris.ravel()
        b = tris[:, [1, 2, 0]].ravel()
        lo = np.minimum(a, b)
        hi = np.maximum(a, b)
        key = lo * n + hi
        order = np.argsort(key, kind="stable")
        ks = key[order]
        start = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        counts = np.diff(np.r_[start, len(ks)])
        if (counts > 2).any():
            e = int(np.flatnonzero(counts > 2)[0])
            h = order[start[e]]
            raise MeshError(f"non-manifold edge between nodes {int(lo[h])} and {int(hi[h])}: "
                            f"shared by {int(counts[e])} triangles")
        first = order[start]                      # half-edge of the left cell
        second = np.where(counts == 2, order[np.minimum(start + 1, len(ks) - 1)], -1)
        # edges in the order of their left cell (locality of the edge pass)
        by_cell = np.argsort(first // 3, kind="stable")
        first = first[by_cell]
        second = second[by_cell]
        counts = counts[by_cell]
        start = start[by_cell]
        # two triangles on one edge must traverse it in opposite directions
        both = second >= 0
        if np.any(a[first[both]] == a[second[both]]):
            e = int(np.flatnonzero(both)[np.flatnonzero(a[first[both]] == a[second[both]])[0]])
            raise MeshError(f"inverted triangle: triangles {first[e] // 3} and "
                            f"{second[e] // 3} traverse their shared edge the same way")
        ne = len(first)
        edges = np.stack([a[first], b[first]], axis=1)
        edge_cells = np.stack([first // 3, np.where(both, second // 3, -1)], axis=1)
        d = nodes[edges[:, 1]] - nodes[edges[:, 0]]
        length = np.hypot(d[:, 0], d[:, 1])
        # counter-clockwise triangle: its outward normal of side (a -> b) is (dy, -dx)
        normal = np.stack([d[:, 1], -d[:, 0]], axis=1) / length[:, None]
        cell_edges = np.empty(3 * m, dtype=np.int64)
        cell_side = np.empty(3 * m, dtype=np.int8)
        eid = np.arange(ne)
        cell_edges[first] = eid
        cell_side[first] = 0
        cell_edges[second[both]] = eid[both]
        cell_side[second[both]] = 1
        cell_edges = cell_edges.reshape(m, 3)
        cell_side = cell_side.reshape(m, 3)
        other = edge_cells[cell_edges, 1 - cell_side]
        centroid = nodes[tris].mean(axis=1)
        edge_tag = np.zeros(ne, dtype=np.int32)
        bnd = np.flatnonzero(~both)
        if len(bnd):
            if boundary_tag is None:
                edge_tag[bnd] = 1
            elif callable(boundary_tag):
                mid = 0.5 * (nodes[edges[bnd, 0]] + nodes[edges[bnd, 1]])
                tags = np.asarray(boundary_tag(mid[:, 0], mid[:, 1]), dtype=np.int64)
                edge_tag[bnd] = np.broadcast_to(tags, bnd.shape)
            else:
                lookup = {frozenset(map(int, k)): int(v) for k, v in boundary_tag.items()}
                edge_tag[bnd] = [lookup.get(frozenset((int(p), int(q))), 1)
                                 for p, q in edges[bnd]]
            if (edge_tag[bnd] <= 0).any():
                raise MeshError("boundary tags must be positive integers")
        arrays = dict(nodes=nodes, tris=tris, edges=edges, edge_cells=edge_cells,
                      normal=normal, length=length, edge_tag=edge_tag, area=area,
                      centroid=centroid, cell_edges=cell_edges, cell_side=cell_side,
                      neighbours=other)
        for v in arrays.values():
            v.setflags(write=False)
        return cls(**arrays, tag_names=tag_names)

    def with_tags(self, boundary_tag, tag_names=None) -> TriMesh:
        """The same mesh with its boundary edges tagged anew (see
        :meth:`from_triangles`)."""
        return TriMesh._connect(self.nodes, self.tris, self.area, boundary_tag,
                                dict(tag_names or self.tag_names))

    def reordered(self, order: str = "hilbert") -> TriMesh:
        """Cells renumbered for locality (``"hilbert"``, ``"rcm"`` or ``"none"``), edges
        sorted by their left cell; tags kept.  ``mesh.cell_order`` (the old index of
        each new cell) says how to carry cell data over."""
        perm = self.locality_order(order)
        inv = np.empty_like(perm)
        inv[perm] = np.arange(len(perm))
        tags = dict(zip(map(frozenset, self.edges[self.boundary_edges].tolist()),
                        self.edge_tag[self.boundary_edges].tolist()))
        new = TriMesh._connect(self.nodes, self.tris[perm], self.area[perm], tags,
                               self.tag_names)
        object.__setattr__(new, "cell_order", perm)
        return new

    def locality_order(self, order: str = "hilbert") -> np.ndarray:
        """The permutation (old index of each new cell) of :meth:`reordered`."""
        if order == "none":
            return np.arange(self.num_cells)
        if order == "hilbert":
            return np.argsort(hilbert_keys(self.centroid), kind="stable")
        if order == "rcm":
            from scipy.sparse import csr_matrix
            from scipy.sparse.csgraph import reverse_cuthill_mckee

            inner = self.edge_cells[:, 1] >= 0
            i, j = self.edge_cells[inner, 0], self.edge_cells[inner, 1]
            m = self.num_cells
            g = csr_matrix((np.ones(2 * len(i), dtype=np.int8),
                            (np.r_[i, j], np.r_[j, i])), shape=(m, m))
            return np.asarray(reverse_cuthill_mckee(g, symmetric_mode=True), dtype=np.int64)
        raise ValueError(f"order must be 'hilbert', 'rcm' or 'none', not {order!r}")

    def bandwidth(self) -> int:
        """Largest index distance between two neighbouring cells (a locality measure)."""
        inner = self.edge_cells[:, 1] >= 0
        return int(np.abs(self.edge_cells[inner, 0] - self.edge_cells[inner, 1]).max())


def hilbert_keys(points, bits: int = 16) -> np.ndarray:
    """Hilbert-curve index of each point on a ``2**bits`` grid over their bounding box
    (vectorised over points, one pass per bit)."""
    p = np.asarray(points, dtype=np.float64)
    lo = p.min(axis=0)
    span = max(float((p.max(axis=0) - lo).max()), 1e-300)
    side = 1 << bits
    xy = np.minimum(((p - lo) / span * side).astype(np.int64), side - 1)
    x = xy[:, 0].copy()
    y = xy[:, 1].copy()
    d = np.zeros(len(p), dtype=np.int64)
    s = side >> 1
    while s > 0:
        rx = (x & s) > 0
        ry = (y & s) > 0
        d += s * s * ((3 * rx) ^ ry)
        # rotate the quadrant
        flip = ~ry & rx
        x = np.where(flip, side - 1 - x, x)
        y = np.where(flip, side - 1 - y, y)
        swap = ~ry
        x, y = np.where(swap, y, x), np.where(swap, x, y)
        s >>= 1
    return d
