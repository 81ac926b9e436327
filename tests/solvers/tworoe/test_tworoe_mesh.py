"""solvers/tworoe/mesh.py, mesh_io.py, generate.py: connectivity and geometry against
first principles, the seed's cell counts, locality orders, readers and their errors."""

import meshio
import numpy as np
import pytest
from forestpy.solvers.tworoe import (
    SEED_CELLS,
    MeshError,
    TriMesh,
    disc_in_square,
    read_mesh,
    strip,
    write_triangle_files,
)
from forestpy.solvers.tworoe.mesh import hilbert_keys

from forestpy.errors import InputFileError


@pytest.fixture(scope="module")
def disc():
    return disc_in_square(SEED_CELLS[0])


def test_geometry_and_tables_are_consistent(disc):
    m = disc
    assert m.area.sum() == pytest.approx(100.0, rel=1e-13)
    assert m.length[m.boundary_edges].sum() == pytest.approx(40.0, rel=1e-13)
    # each cell is closed: sum of |edge| * outward normal vanishes
    sgn = np.where(m.cell_side == 0, 1.0, -1.0)
    closed = (m.length[m.cell_edges][..., None] * m.normal[m.cell_edges]
              * sgn[..., None]).sum(axis=1)
    assert np.abs(closed).max() < 1e-14
    # normals are unit and point from the left cell to the right one (outward at walls)
    assert np.allclose(np.hypot(*m.normal.T), 1.0, atol=1e-15)
    inner = m.edge_cells[:, 1] >= 0
    d = m.centroid[m.edge_cells[inner, 1]] - m.centroid[m.edge_cells[inner, 0]]
    assert ((d * m.normal[inner]).sum(axis=1) > 0).all()
    b = m.boundary_edges
    mid = 0.5 * (m.nodes[m.edges[b, 0]] + m.nodes[m.edges[b, 1]])
    assert ((mid - m.centroid[m.edge_cells[b, 0]]) * m.normal[b]).sum(axis=1).min() > 0
    # neighbour table is symmetric and agrees with the edge table
    c = np.repeat(np.arange(m.num_cells), 3)
    nb = m.neighbours.ravel()
    has = nb >= 0
    pairs = set(zip(c[has].tolist(), nb[has].tolist()))
    assert all((j, i) in pairs for i, j in pairs)
    assert len(pairs) == 2 * inner.sum()
    assert (m.edge_cells[m.cell_edges, m.cell_side] == np.arange(m.num_cells)[:, None]).all()
    # Euler: V - E + F = 1 for a disc-like domain (one boundary loop)
    assert len(m.nodes) - m.num_edges + m.num_cells == 1
    # the circle r = 1.5 is made of edges (the dam's discontinuity follows them)
    r = np.hypot(*m.nodes.T)
    on = np.abs(r - 1.5) < 1e-12
    assert (on[m.edges].all(axis=1)).sum() >= 16


@pytest.mark.parametrize("cells", SEED_CELLS[:4])
def test_seed_cell_counts_within_half_a_percent(cells):
    m = disc_in_square(cells)
    assert abs(m.num_cells / cells - 1) <= 0.005


@pytest.mark.slow  # ~5 s of triangulation per try on 2 cores
def test_seed_million_cell_mesh():
    m = disc_in_square(SEED_CELLS[4])
    assert abs(m.num_cells / SEED_CELLS[4] - 1) <= 0.005


def test_hilbert_keys_walk_the_grid_by_unit_steps():
    g = np.arange(16)
    X, Y = np.meshgrid(g, g, indexing="ij")
    pts = np.stack([X.ravel(), Y.ravel()], 1).astype(float)
    k = hilbert_keys(pts, bits=4)
    assert sorted(k.tolist()) == list(range(256))
    walk = pts[np.argsort(k)]
    assert (np.abs(np.diff(walk, axis=0)).sum(axis=1) == 1).all()


@pytest.mark.parametrize("order", ["hilbert", "rcm"])
def test_locality_orders_permute_cells_and_shorten_index_distances(disc, order):
    rng = np.random.default_rng(0)
    shuffled = TriMesh.from_triangles(disc.nodes, disc.tris[rng.permutation(disc.num_cells)])
    r = shuffled.reordered(order)
    perm = r.cell_order
    assert sorted(perm.tolist()) == list(range(disc.num_cells))
    assert np.array_equal(r.tris, shuffled.tris[perm])
    assert np.array_equal(r.area, shuffled.area[perm])

    def mean_gap(m):
        i = m.edge_cells[:, 1] >= 0
        return np.abs(m.edge_cells[i, 0] - m.edge_cells[i, 1]).mean()

    assert mean_gap(r) < 0.05 * mean_gap(shuffled)
    if order == "rcm":
        assert r.bandwidth() < 0.05 * shuffled.bandwidth()
    # edges sorted by their left cell
    assert (np.diff(r.edge_cells[:, 0]) >= 0).all()


def _square():
    nodes = [[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5]]
    tris = [[0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]]
    return np.array(nodes, float), np.array(tris)


def test_clockwise_meshes_are_reoriented():
    nodes, tris = _square()
    m = TriMesh.from_triangles(nodes, tris[:, ::-1])
    assert np.allclose(m.area, 0.25)
    assert m.num_edges == 8 and len(m.boundary_edges) == 4


@pytest.mark.parametrize("case,match", [
    ("degenerate", "degenerate triangle"),
    ("inverted", "inverted triangle"),
    ("unreferenced", "unreferenced node"),
    ("nonmanifold", "non-manifold edge"),
    ("outside", "outside 0..4"),
    ("repeat", "repeats a node"),
    ("float", "must be integers"),
    ("shape", r"\(m, 3\) array"),
    ("nan", "non-finite"),
])
def test_invalid_meshes_give_one_clear_error(case, match):
    nodes, tris = _square()
    if case == "degenerate":
        nodes = np.vstack([nodes, [[2.0, 0.0], [3.0, 0.0]]])
        tris = np.vstack([tris, [[1, 5, 6]]])
    elif case == "inverted":
        tris[1] = tris[1, ::-1]
    elif case == "unreferenced":
        nodes = np.vstack([nodes, [[5.0, 5.0]]])
    elif case == "nonmanifold":
        nodes = np.vstack([nodes, [[0.5, -1.0], [0.5, -2.0]]])
        tris = np.vstack([tris, [[1, 0, 5], [1, 0, 6]]])
    elif case == "outside":
        tris[0, 2] = 7
    elif case == "repeat":
        tris[0] = [0, 0, 4]
    elif case == "float":
        tris = tris.astype(float)
    elif case == "shape":
        tris = tris[:, :2]
    elif case == "nan":
        nodes[2, 0] = np.nan
    with pytest.raises(MeshError, match=match):
        TriMesh.from_triangles(nodes, tris)


def _tagged_meshio(m):
    b = m.boundary_edges
    return meshio.Mesh(
        np.column_stack([m.nodes, np.zeros(len(m.nodes))]),
        [("triangle", m.tris), ("line", m.edges[b])],
        cell_data={"gmsh:physical": [np.full(m.num_cells, 7), m.edge_tag[b]],
                   "gmsh:geometrical": [np.full(m.num_cells, 1), m.edge_tag[b]]})


def _msh41(path, m):
    """A gmsh 4.1 ASCII file written out by hand: boundary lines on curves whose
    physical tag is the edge tag, triangles on surface 1 (physical tag 7)."""
    b = m.boundary_edges
    tags = sorted(set(m.edge_tag[b].tolist()))
    box = "0 0 0 1 1 0"
    out = ["$MeshFormat", "4.1 0 8", "$EndMeshFormat", "$Entities",
           f"0 {len(tags)} 1 0"]
    out += [f"{t} {box} 1 {t} 0" for t in tags] + [f"1 {box} 1 7 0", "$EndEntities"]
    n = len(m.nodes)
    out += ["$Nodes", f"1 {n} 1 {n}", f"2 1 0 {n}"] + [str(i + 1) for i in range(n)]
    out += [f"{x!r} {y!r} 0" for x, y in m.nodes.tolist()] + ["$EndNodes"]
    ne = len(b) + m.num_cells
    out += ["$Elements", f"{len(tags) + 1} {ne} 1 {ne}"]
    k = 1
    for t in tags:
        ed = m.edges[b][m.edge_tag[b] == t]
        out.append(f"1 {t} 1 {len(ed)}")
        for p, q in ed.tolist():
            out.append(f"{k} {p + 1} {q + 1}")
            k += 1
    out.append(f"2 1 2 {m.num_cells}")
    for a, c, d in m.tris.tolist():
        out.append(f"{k} {a + 1} {c + 1} {d + 1}")
        k += 1
    out.append("$EndElements")
    path.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("fmt", ["v2-ascii", "v2-binary", "v4-ascii"])
def test_gmsh_files_round_trip_with_boundary_tags(tmp_path, fmt):
    m = strip(6, 3, 3.0, 1.5)
    path = tmp_path / "m.msh"
    if fmt == "v4-ascii":
        _msh41(path, m)
    else:
        meshio.write(path, _tagged_meshio(m), file_format="gmsh22",
                     binary=fmt == "v2-binary")
    r = read_mesh(path)
    assert np.array_equal(r.tris, m.tris) and np.allclose(r.nodes, m.nodes)
    key = {frozenset(e): t for e, t in zip(m.edges.tolist(), m.edge_tag.tolist())}
    got = {frozenset(e): t for e, t in zip(r.edges.tolist(), r.edge_tag.tolist())}
    assert got == key and set(m.edge_tag[m.boundary_edges]) == {1, 2, 3}


def test_triangle_files_round_trip_and_one_based(tmp_path):
    m = strip(5, 2, 5.0, 2.0)
    node, ele = write_triangle_files(tmp_path / "s", m)
    r = read_mesh(ele)
    assert np.array_equal(r.tris, m.tris) and np.array_equal(r.nodes, m.nodes)
    # markers: an edge whose nodes share a marker gets it (corners take one of theirs)
    assert set(r.edge_tag[r.boundary_edges]) <= {1, 2, 3}
    # the same mesh numbered from 1
    lines = node.read_text().splitlines()
    node.write_text("\n".join([lines[0]] + [" ".join([str(int(s.split()[0]) + 1)]
                                                     + s.split()[1:]) for s in lines[1:]]))
    el = ele.read_text().splitlines()
    ele.write_text("# a comment\n" + "\n".join(
        [el[0]] + [" ".join(str(int(v) + 1) for v in s.split()) for s in el[1:]]))
    r1 = read_mesh(node)
    assert np.array_equal(r1.tris, m.tris)


@pytest.mark.parametrize("mutation,match", [
    ("missing", "no such file"),
    ("suffix", "not a mesh file"),
    ("truncated", "announces"),
    ("word", "not a number"),
    ("header", "dimension 3"),
    ("per", "nodes per triangle"),
    ("numbering", "numbered consecutively"),
    ("empty", "empty file"),
    ("msh_garbage", "not a readable gmsh file"),
    ("msh_missing", "no such file"),
])
def test_bad_files_give_input_file_errors(tmp_path, mutation, match):
    m = strip(3, 2, 3.0, 2.0)
    node, ele = write_triangle_files(tmp_path / "s", m)
    target = node
    if mutation == "missing":
        ele.unlink()
    elif mutation == "suffix":
        target = tmp_path / "s.obj"
    elif mutation == "truncated":
        ele.write_text("\n".join(ele.read_text().splitlines()[:-2]))
    elif mutation == "word":
        t = node.read_text().splitlines()
        t[2] = t[2].split()[0] + " x " + " ".join(t[2].split()[2:])
        node.write_text("\n".join(t))
    elif mutation == "header":
        t = node.read_text().splitlines()
        node.write_text("\n".join([t[0].replace(" 2 0 1", " 3 0 1")] + t[1:]))
    elif mutation == "per":
        t = ele.read_text().splitlines()
        ele.write_text("\n".join([t[0].replace(" 3 0", " 6 0")] + t[1:]))
    elif mutation == "numbering":
        t = node.read_text().splitlines()
        t[2] = "7" + t[2][1:]
        node.write_text("\n".join(t))
    elif mutation == "empty":
        ele.write_text("# nothing\n")
    elif mutation == "msh_garbage":
        target = tmp_path / "g.msh"
        target.write_text("$MeshFormat\n4.1 0 8\n$EndMeshFormat\n$Nodes\n1 2\nbroken\n")
    elif mutation == "msh_missing":
        target = tmp_path / "none.msh"
    with pytest.raises(InputFileError, match=match) as err:
        read_mesh(target)
    assert str(target.with_suffix("")) in str(err.value) or target.name in str(err.value)


def test_invalid_mesh_in_a_file_names_the_file(tmp_path):
    nodes, tris = _square()
    path = tmp_path / "bad.msh"
    tris[1] = tris[1, ::-1]
    meshio.write(path, meshio.Mesh(np.column_stack([nodes, np.zeros(5)]),
                                   [("triangle", tris)]), file_format="gmsh22")
    with pytest.raises(MeshError, match="bad.msh: .*inverted"):
        read_mesh(path)
