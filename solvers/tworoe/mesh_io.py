"""Read triangle meshes: gmsh ``.msh`` (v2 and v4, through ``meshio``) and Triangle's
``.node``/``.ele`` pair.

:func:`read_mesh` returns a checked :class:`~forestpy.solvers.tworoe.mesh.TriMesh`.
Boundary tags come from the file where it has them: gmsh line elements with a physical
tag (``gmsh:physical``) tag the boundary edges they cover; Triangle's node boundary
markers tag an edge whose two nodes carry the same non-zero marker.  Other boundary
edges get tag 1.

A missing, unreadable or malformed file raises
:class:`~forestpy.errors.InputFileError` naming the file; a file that reads but holds an
invalid mesh raises :class:`~forestpy.solvers.tworoe.mesh.MeshError` with the file name
in front.  (meshio's own ``tetgen`` reader takes 3D ``.node`` files with tetrahedra only,
so Triangle's 2D files are parsed here.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from forestpy.errors import MAX_ARRAY_BYTES, InputFileError

from .mesh import MeshError, TriMesh

__all__ = ["read_mesh", "read_triangle_files", "write_triangle_files"]


def read_mesh(path, **kwargs) -> TriMesh:
    """Read a ``.msh`` (gmsh v2/v4) or a Triangle ``.node``/``.ele`` mesh (either name of
    the pair).  ``kwargs`` go to :meth:`TriMesh.from_triangles` (``tag_names``)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".node", ".ele"):
        return read_triangle_files(path, **kwargs)
    if suffix != ".msh":
        raise InputFileError(f"{path}: not a mesh file this reader knows (.msh, .node, "
                             f".ele)")
    if not path.is_file():
        raise InputFileError(f"{path}: no such file")
    try:
        import meshio
    except ImportError as e:  # pragma: no cover - the 'mesh' extra
        raise ImportError("reading .msh files needs meshio: pip install "
                          "'forestpy[mesh]'") from e
    try:
        m = meshio.read(path, file_format="gmsh")
    except Exception as e:  # meshio raises many kinds on a malformed file
        raise InputFileError(f"{path}: not a readable gmsh file ({type(e).__name__}: "
                             f"{e})") from None
    tri = [b.data for b in m.cells if b.type == "triangle"]
    if not tri:
        kinds = sorted({b.type for b in m.cells})
        raise InputFileError(f"{path}: no triangles in the file (cell kinds: {kinds})")
    tris = np.concatenate(tri)
    pts = np.asarray(m.points, dtype=np.float64)
    # gmsh files keep every node, also those of points and lines only: keep the
    # triangles' nodes (a node referenced by nothing at all is still an error)
    used_any = np.zeros(len(pts), dtype=bool)
    for b in m.cells:
        used_any[np.asarray(b.data).ravel()] = True
    if not used_any.all():
        k = int(np.flatnonzero(~used_any)[0])
        raise MeshError(f"{path}: {int((~used_any).sum())} unreferenced node(s), the "
                        f"first is node {k} at {pts[k].tolist()}")
    keep = np.zeros(len(pts), dtype=bool)
    keep[tris.ravel()] = True
    renum = np.cumsum(keep) - 1
    tags = {}
    phys = m.cell_data.get("gmsh:physical")
    if phys is not None:
        for b, t in zip(m.cells, phys):
            if b.type == "line":
                for (p, q), tag in zip(np.asarray(b.data), np.asarray(t)):
                    if keep[p] and keep[q] and tag > 0:
                        tags[(int(renum[p]), int(renum[q]))] = int(tag)
    try:
        return TriMesh.from_triangles(pts[keep], renum[tris], boundary_tag=tags or None,
                                      **kwargs)
    except MeshError as e:
        raise MeshError(f"{path}: {e}") from None


def _tokens(path: Path) -> list[list[str]]:
    if not path.is_file():
        raise InputFileError(f"{path}: no such file")
    size = path.stat().st_size
    if size > MAX_ARRAY_BYTES:
        raise InputFileError(f"{path}: {size} bytes, larger than any mesh this reader takes")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputFileError(f"{path}: cannot be read as text ({e})") from None
    rows = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            rows.append(line.split())
    if not rows:
        raise InputFileError(f"{path}: empty file")
    return rows


def _ints(path, row, what, lo=0):
    try:
        v = [int(x) for x in row]
    except ValueError:
        raise InputFileError(f"{path}: {what} must be integers, got {row}") from None
    if any(x < lo for x in v):
        raise InputFileError(f"{path}: {what} must be >= {lo}, got {row}")
    return v


def _table(path, rows, count, width, what, dtype):
    body = rows[1:1 + count]
    if len(body) < count:
        raise InputFileError(f"{path}: the header announces {count} {what}, the file has "
                             f"{len(body)}")
    bad = [i for i, r in enumerate(body) if len(r) < width]
    if bad:
        raise InputFileError(f"{path}: {what} line {bad[0] + 1} has {len(body[bad[0]])} "
                             f"fields, expected {width}")
    try:
        return np.array([r[:width] for r in body], dtype=dtype)
    except ValueError:
        raise InputFileError(f"{path}: a {what} line holds a value that is not a "
                             f"number") from None


def read_triangle_files(path, **kwargs) -> TriMesh:
    """Read Triangle's ``stem.node`` and ``stem.ele`` (either may be named).

    ``.node``: ``n dim=2 nattr nmarker`` then ``i x y [attrs] [marker]``; ``.ele``:
    ``m 3 nattr`` then ``i a b c [attrs]``; indices start at 0 or 1 (as the first node
    says)."""
    path = Path(path)
    node_path = path.with_suffix(".node")
    ele_path = path.with_suffix(".ele")
    rows = _tokens(node_path)
    n, dim, nattr, nmark = (_ints(node_path, rows[0][:4], "the header")
                            if len(rows[0]) >= 4 else (None,) * 4)
    if n is None:
        raise InputFileError(f"{node_path}: the header needs 4 integers, got {rows[0]}")
    if dim != 2:
        raise InputFileError(f"{node_path}: dimension {dim}, expected 2")
    if nmark > 1:
        raise InputFileError(f"{node_path}: {nmark} boundary markers, expected 0 or 1")
    tab = _table(node_path, rows, n, 3 + nattr + nmark, "node", np.float64)
    ids = tab[:, 0]
    base = int(ids[0]) if n else 0
    if base not in (0, 1) or not np.array_equal(ids, np.arange(base, base + n)):
        raise InputFileError(f"{node_path}: nodes must be numbered consecutively from 0 "
                             f"or 1")
    nodes = tab[:, 1:3]
    if not np.isfinite(nodes).all():
        raise InputFileError(f"{node_path}: a node coordinate is not finite")
    marker = tab[:, 3 + nattr].astype(np.int64) if nmark else None
    erows = _tokens(ele_path)
    if len(erows[0]) < 3:
        raise InputFileError(f"{ele_path}: the header needs 3 integers, got {erows[0]}")
    m, per, eattr = _ints(ele_path, erows[0][:3], "the header")
    if per != 3:
        raise InputFileError(f"{ele_path}: {per} nodes per triangle, expected 3 (linear "
                             f"triangles)")
    et = _table(ele_path, erows, m, 4, "triangle", np.int64)
    tris = et[:, 1:4] - base
    try:
        mesh = TriMesh.from_triangles(nodes, tris, **kwargs)
        if marker is not None:
            b = mesh.boundary_edges
            e = mesh.edges[b]
            mk = np.where(marker[e[:, 0]] == marker[e[:, 1]], marker[e[:, 0]], 1)
            mk = np.where(mk > 0, mk, 1)
            mesh = mesh.with_tags(dict(zip(map(tuple, e.tolist()), mk.tolist())))
        return mesh
    except MeshError as e:
        raise MeshError(f"{path}: {e}") from None


def write_triangle_files(stem, mesh: TriMesh) -> tuple[Path, Path]:
    """Write ``stem.node`` and ``stem.ele`` (0-based, the boundary tag of each node as
    its marker, 0 inside)."""
    stem = Path(stem)
    mark = np.zeros(len(mesh.nodes), dtype=np.int64)
    b = mesh.boundary_edges
    mark[mesh.edges[b, 0]] = mesh.edge_tag[b]
    mark[mesh.edges[b, 1]] = mesh.edge_tag[b]
    node_path = stem.with_suffix(".node")
    ele_path = stem.with_suffix(".ele")
    nn = len(mesh.nodes)
    with open(node_path, "w") as f:
        f.write(f"{nn} 2 0 1\n")
        cols = np.column_stack([np.arange(nn), mesh.nodes, mark]).astype(object)
        np.savetxt(f, cols, fmt=["%d", "%.17g", "%.17g", "%d"])
    with open(ele_path, "w") as f:
        f.write(f"{mesh.num_cells} 3 0\n")
        np.savetxt(f, np.column_stack([np.arange(mesh.num_cells), mesh.tris]), fmt="%d")
    return node_path, ele_path
