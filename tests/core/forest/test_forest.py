"""Tests of forestpy.forest against an obviously-correct brute-force quadtree.

The reference keeps leaves as Python tuples ``(tree, level, x, y)``, orders them with a
bit-by-bit Morton key, refines/coarsens with dictionaries, and finds neighbours, balance
violations and point locations by comparing closed boxes in global coordinates (shifted
by the brick extent in periodic directions).  It never uses searchsorted or the quadrant
algebra under test.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from forestpy.forest import MAX_LEVEL, Brick, Forest
from forestpy.forest import quadrants as qa

ML = MAX_LEVEL
R = 1 << ML

BRICKS = {
    "1x1": Brick(),
    "3x2": Brick(3, 2, lower=(-1.0, 0.5), upper=(2.0, 2.5)),
    "per_x": Brick(2, 2, periodic_x=True),
    "per_y": Brick(2, 3, periodic_y=True),
    "per_xy": Brick(2, 2, periodic_x=True, periodic_y=True),
    "per_xy_1x1": Brick(1, 1, periodic_x=True, periodic_y=True),
}


# --------------------------------------------------------------------------------------
# brute-force reference
# --------------------------------------------------------------------------------------


def ref_key(t, x, y):
    m = 0
    for b in range(ML):
        m |= ((x >> b) & 1) << (2 * b)
        m |= ((y >> b) & 1) << (2 * b + 1)
    return t * 4**ML + m


def ref_sort(leaves):
    return sorted(leaves, key=lambda q: ref_key(q[0], q[2], q[3]))


def ref_children(q):
    t, l, x, y = q
    h = R >> (l + 1)
    return [(t, l + 1, x, y), (t, l + 1, x + h, y), (t, l + 1, x, y + h), (t, l + 1, x + h, y + h)]


def ref_new(ntrees, level):
    leaves = [(t, 0, 0, 0) for t in range(ntrees)]
    for _ in range(level):
        leaves = [c for q in leaves for c in ref_children(q)]
    return ref_sort(leaves)


def ref_refine(leaves, flags):
    out = []
    for q, f in zip(leaves, flags):
        out.extend(ref_children(q) if f else [q])
    return ref_sort(out)


def ref_coarsen(leaves, flags):
    flagged = {q for q, f in zip(leaves, flags) if f}
    out = set(leaves)
    for q in leaves:
        t, l, x, y = q
        if l == 0:
            continue
        h = R >> (l - 1)
        p = (t, l - 1, x - x % h, y - y % h)
        kids = ref_children(p)
        if all(k in flagged for k in kids):
            out.difference_update(kids)
            out.add(p)
    return ref_sort(out)


def as_list(f):
    return list(zip(f.tree.tolist(), f.level.tolist(), f.x.tolist(), f.y.tolist()))


def boxes(leaves, conn):
    a = np.array(leaves, dtype=np.int64).reshape(-1, 4)
    t, l, x, y = a.T
    return (t % conn.nx) * R + x, (t // conn.nx) * R + y, R >> l, l


def shifts(conn):
    W, H = conn.nx * R, conn.ny * R
    sx = (-W, 0, W) if conn.periodic_x else (0,)
    sy = (-H, 0, H) if conn.periodic_y else (0,)
    return [(a, b) for a in sx for b in sy]


def ref_touch(leaves, conn):
    """n x n matrix: closed boxes of leaves i and j intersect (some periodic copy)."""
    gx, gy, s, _ = boxes(leaves, conn)
    T = np.zeros((len(gx), len(gx)), dtype=bool)
    for sx, sy in shifts(conn):
        jx, jy = gx[None, :] + sx, gy[None, :] + sy
        T |= (
            (gx[:, None] <= jx + s[None, :])
            & (jx <= gx[:, None] + s[:, None])
            & (gy[:, None] <= jy + s[None, :])
            & (jy <= gy[:, None] + s[:, None])
        )
    return T


def ref_balance(leaves, conn):
    while True:
        lv = np.array([q[1] for q in leaves])
        viol = ref_touch(leaves, conn) & (lv[:, None] - lv[None, :] >= 2)
        coarse = viol.any(axis=0)
        if not coarse.any():
            return leaves
        leaves = ref_refine(leaves, coarse)


def ref_is_balanced(leaves, conn):
    lv = np.array([q[1] for q in leaves])
    return not (ref_touch(leaves, conn) & (lv[:, None] - lv[None, :] >= 2)).any()


def ref_face_lists(leaves, conn):
    """{(q, face): sorted [(coordinate along face, j)]} of leaves sharing a segment of
    positive length with face ``face`` of leaf ``q``."""
    gx, gy, s, _ = boxes(leaves, conn)
    out = {}
    for sx, sy in shifts(conn):
        jx, jy = gx[None, :] + sx, gy[None, :] + sy
        qx, qy, qs, js = gx[:, None], gy[:, None], s[:, None], s[None, :]
        ovy = np.minimum(qy + qs, jy + js) - np.maximum(qy, jy) > 0
        ovx = np.minimum(qx + qs, jx + js) - np.maximum(qx, jx) > 0
        conds = [
            (jx + js == qx) & ovy,
            (jx == qx + qs) & ovy,
            (jy + js == qy) & ovx,
            (jy == qy + qs) & ovx,
        ]
        for f, c in enumerate(conds):
            for q, j in zip(*np.nonzero(c)):
                coord = (jy if f < 2 else jx)[0, j]
                out.setdefault((int(q), f), []).append((int(coord), int(j)))
    return {k: sorted(v) for k, v in out.items()}


def ref_corner_lists(leaves, conn):
    """{(q, corner): [j]} of leaves touching leaf ``q`` only at that corner point."""
    gx, gy, s, _ = boxes(leaves, conn)
    out = {}
    for sx, sy in shifts(conn):
        jx, jy = gx[None, :] + sx, gy[None, :] + sy
        qx, qy, qs, js = gx[:, None], gy[:, None], s[:, None], s[None, :]
        left, right = jx + js == qx, jx == qx + qs
        below, above = jy + js == qy, jy == qy + qs
        for c, cond in enumerate([left & below, right & below, left & above, right & above]):
            for q, j in zip(*np.nonzero(cond)):
                out.setdefault((int(q), c), []).append(int(j))
    return out


def ref_contains_global(leaves, conn, px, py):
    """Index of the leaf whose (periodic copy of its) half-open box contains each global
    point, -1 if none."""
    gx, gy, s, _ = boxes(leaves, conn)
    px, py = np.asarray(px)[:, None], np.asarray(py)[:, None]
    res = np.full(px.shape[0], -1)
    for sx, sy in shifts(conn):
        inside = (gx + sx <= px) & (px < gx + sx + s) & (gy + sy <= py) & (py < gy + sy + s)
        hit = inside.any(axis=1)
        assert np.all(inside.sum(axis=1) <= 1)
        res[hit] = np.argmax(inside[hit], axis=1)
    return res


def random_forest(conn, seed, rounds=4, p=0.35, max_level=6, start=1):
    rng = np.random.default_rng(seed)
    f = Forest.new(conn, start)
    ref = ref_new(conn.ntrees, start)
    for _ in range(rounds):
        flags = (rng.random(f.n) < p) & (f.level < max_level)
        f = f.refine(flags)
        ref = ref_refine(ref, flags)
    return f, ref


def deep_corner_forest(conn, depth=7):
    """Refine repeatedly towards the lower-left corner of the last tree (a tree boundary,
    and a periodic boundary where the brick wraps)."""
    f = Forest.new(conn, 1)
    t = conn.ntrees - 1
    for _ in range(depth):
        f = f.refine((f.tree == t) & (f.x == 0) & (f.y == 0))
    return f


# --------------------------------------------------------------------------------------
# Brick
# --------------------------------------------------------------------------------------


def test_brick_attributes_and_validation():
    b = Brick(3, 2, periodic_x=True, lower=(-1, 0), upper=(2, 4))
    assert (b.nx, b.ny, b.ntrees, b.periodic_x, b.periodic_y) == (3, 2, 6, True, False)
    assert b.tree_width == 1.0 and b.tree_height == 2.0
    assert b.tree_ij(5) == (2, 1)
    i, j = b.tree_ij(np.arange(6))
    assert i.tolist() == [0, 1, 2, 0, 1, 2] and j.tolist() == [0, 0, 0, 1, 1, 1]
    assert Brick(3, 2) == Brick(3, 2, lower=[0, 0], upper=[1, 1])
    for kw in (dict(nx=0), dict(ny=-1), dict(nx=1.5), dict(upper=(0.0, 1.0)),
               dict(lower=(0.0, 2.0)), dict(lower=(0.0,))):
        with pytest.raises(ValueError):
            Brick(**kw)
    with pytest.raises(ValueError):
        b.tree_ij(6)


# --------------------------------------------------------------------------------------
# quadrant algebra
# --------------------------------------------------------------------------------------


def test_morton_against_bitloop():
    rng = np.random.default_rng(1)
    x = rng.integers(0, R, 200)
    y = rng.integers(0, R, 200)
    m = qa.morton_encode(x, y)
    assert m.tolist() == [ref_key(0, a, b) for a, b in zip(x.tolist(), y.tolist())]
    dx, dy = qa.morton_decode(m)
    assert np.array_equal(dx, x) and np.array_equal(dy, y)
    assert int(qa.morton_encode(R - 1, R - 1)) == 4**ML - 1
    assert int(qa.quadrant_key(3, 0, 1)) == 3 * 4**ML + 2


def test_parent_child_sibling_family():
    rng = np.random.default_rng(2)
    level = rng.integers(0, ML - 1, 100)
    h = R >> level
    x = rng.integers(0, 1 << level) * h
    y = rng.integers(0, 1 << level) * h
    assert qa.is_aligned(level, x, y).all()
    cl, cx, cy = qa.children(level, x, y)
    assert cl.shape == (100, 4)
    for c in range(4):
        l1, x1, y1 = qa.child(level, x, y, c)
        assert np.array_equal(qa.sibling_id(l1, x1, y1), np.full(100, c))
        pl, px, py = qa.parent(l1, x1, y1)
        assert np.array_equal(pl, level) and np.array_equal(px, x) and np.array_equal(py, y)
        # Morton order: a child's key is the parent's plus c times the child's key span.
        k = qa.quadrant_key(0, x1, y1) - qa.quadrant_key(0, x, y)
        assert np.array_equal(k, c * qa.key_span(l1))
    assert qa.is_family(cl, cx, cy).all()
    assert not qa.is_family(cl[:, [1, 0, 2, 3]], cx[:, [1, 0, 2, 3]], cy[:, [1, 0, 2, 3]]).any()
    assert not qa.is_aligned(3, R >> 4, 0)
    for face, (ddx, ddy) in enumerate([(-1, 0), (1, 0), (0, -1), (0, 1)]):
        nl, nx_, ny_ = qa.face_neighbor(level, x, y, face)
        assert np.array_equal(nx_, x + ddx * h) and np.array_equal(ny_, y + ddy * h)
    for corner, (ddx, ddy) in enumerate([(-1, -1), (1, -1), (-1, 1), (1, 1)]):
        nl, nx_, ny_ = qa.corner_neighbor(level, x, y, corner)
        assert np.array_equal(nx_, x + ddx * h) and np.array_equal(ny_, y + ddy * h)


# --------------------------------------------------------------------------------------
# construction, refine, coarsen
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BRICKS))
def test_new_and_constructor(name):
    conn = BRICKS[name]
    f = Forest.new(conn, 2)
    assert as_list(f) == ref_new(conn.ntrees, 2)
    assert f.is_valid() and len(f) == f.n == 16 * conn.ntrees
    assert np.array_equal(f.keys, [ref_key(q[0], q[2], q[3]) for q in as_list(f)])
    perm = np.random.default_rng(0).permutation(f.n)
    g = Forest(conn, f.tree[perm], f.level[perm], f.x[perm], f.y[perm])
    assert g == f and g.checksum() == f.checksum()
    with pytest.raises(ValueError):
        Forest.new(conn, ML)


@pytest.mark.parametrize("name", list(BRICKS))
@pytest.mark.parametrize("seed", [0, 1])
def test_refine_coarsen_match_reference(name, seed):
    conn = BRICKS[name]
    f, ref = random_forest(conn, seed)
    assert as_list(f) == ref and f.is_valid()
    rng = np.random.default_rng(100 + seed)
    for p in (0.5, 0.9, 1.0):
        flags = rng.random(f.n) < p
        g = f.coarsen(flags)
        assert as_list(g) == ref_coarsen(ref, flags) and g.is_valid()
    counts = Counter(q[1] for q in ref)
    lc = f.levels_count()
    assert lc.shape == (ML + 1,) and all(lc[k] == counts.get(k, 0) for k in range(ML + 1))


def test_refine_children_contiguous_and_limits():
    conn = Brick(2, 1)
    f = Forest.new(conn, 1)
    flags = np.array([1, 0, 0, 1, 1, 0, 0, 0], dtype=bool)
    g = f.refine(flags)
    cnt = np.where(flags, 4, 1)
    off = np.cumsum(cnt) - cnt
    for i in np.flatnonzero(flags):
        kids = list(zip(*qa.children(f.level[i], f.x[i], f.y[i])))
        got = list(zip(g.level[off[i] : off[i] + 4], g.x[off[i] : off[i] + 4],
                       g.y[off[i] : off[i] + 4]))
        assert [tuple(map(int, k)) for k in kids] == [tuple(map(int, k)) for k in got]
        assert np.all(g.tree[off[i] : off[i] + 4] == f.tree[i])
    assert g.refine(np.zeros(g.n, bool)) is g
    assert f.refine(np.ones(f.n, bool), max_level=1) is f
    with pytest.raises(ValueError):
        f.refine(np.ones(3, bool))
    # refine one path down to MAX_LEVEL - 1; refining further must raise
    h = Forest.new(Brick(), 0)
    for _ in range(ML - 1):
        h = h.refine(h.x + h.y == 0)
    assert h.level.max() == ML - 1 and h.is_valid() and h.n == 1 + 3 * (ML - 1)
    deep = h.level == ML - 1
    with pytest.raises(ValueError):
        h.refine(deep)
    assert h.refine(deep, max_level=5) is h


def test_coarsen_rules():
    f = Forest.new(Brick(2, 1), 0)
    assert f.coarsen(np.ones(2, bool)) == f  # level 0 never coarsens
    g = Forest.new(Brick(2, 1), 2)
    assert g.coarsen(np.ones(g.n, bool)) == Forest.new(Brick(2, 1), 1)
    # a family with one refined member does not coarsen
    h = g.refine(np.arange(g.n) == 0)
    c = h.coarsen(np.ones(h.n, bool))
    assert as_list(c) == ref_coarsen(as_list(h), np.ones(h.n, bool))
    assert (0, 1, 0, 0) not in as_list(c) and (0, 2, 0, 0) in as_list(c)
    # one unflagged sibling blocks its family
    flags = np.ones(g.n, bool)
    flags[5] = False
    assert g.coarsen(flags).n == g.n - 3 * (g.n // 4 - 1)


def test_immutable():
    f = Forest.new(Brick(), 1)
    with pytest.raises(AttributeError):
        f.level = f.level
    with pytest.raises(ValueError):
        f.level[0] = 3
    g = f.refine(np.ones(4, bool))
    assert f.n == 4 and g.n == 16


# --------------------------------------------------------------------------------------
# balance
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BRICKS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_balance_matches_reference(name, seed):
    conn = BRICKS[name]
    f, ref = random_forest(conn, seed)
    assert f.is_balanced() == ref_is_balanced(ref, conn)
    b = f.balance()
    rb = ref_balance(ref, conn)
    assert as_list(b) == rb
    assert b.is_valid() and b.is_balanced()
    assert b.balance() is b


@pytest.mark.parametrize("name", list(BRICKS))
def test_balance_deep_corner(name):
    conn = BRICKS[name]
    f = deep_corner_forest(conn, depth=6)
    assert f.is_balanced() == ref_is_balanced(as_list(f), conn)
    b = f.balance()
    assert as_list(b) == ref_balance(as_list(f), conn)
    assert b.is_balanced() and b.is_valid()


def test_balance_corner_only():
    # two leaves touching only at a corner across a tree corner must be balanced too
    conn = Brick(2, 2)
    f = Forest.new(conn, 0)
    for _ in range(3):  # refine towards the brick centre in tree 0 only
        f = f.refine((f.tree == 0) & (f.x + (R >> f.level) == R) & (f.y + (R >> f.level) == R))
    b = f.balance()
    assert as_list(b) == ref_balance(as_list(f), conn)
    assert b.level[b.tree == 3].max() == 2


# --------------------------------------------------------------------------------------
# neighbour tables
# --------------------------------------------------------------------------------------


def expected_faces(leaves, conn):
    lists = ref_face_lists(leaves, conn)
    lv = [q[1] for q in leaves]
    n = len(leaves)
    kind = np.full((n, 4), -1, dtype=np.int8)
    index = np.full((n, 4, 2), -1, dtype=np.int64)
    for (q, f), lst in lists.items():
        js = [j for _, j in lst]
        if len(js) == 1:
            assert lv[js[0]] <= lv[q]
            kind[q, f] = 0 if lv[js[0]] == lv[q] else 1
            index[q, f] = js[0]
        else:
            assert len(js) == 2 and all(lv[j] == lv[q] + 1 for j in js)
            kind[q, f] = 2
            index[q, f] = js
    return kind, index, lists


def check_corners(f, conn, face_lists):
    leaves = as_list(f)
    lv = f.level
    cn = f.corner_neighbors()
    lists = ref_corner_lists(leaves, conn)
    gx, gy, s, _ = boxes(leaves, conn)
    W, H = conn.nx * R, conn.ny * R
    for c, (dx, dy) in enumerate([(-1, -1), (1, -1), (-1, 1), (1, 1)]):
        px = np.where(dx < 0, gx - 1, gx + s)
        py = np.where(dy < 0, gy - 1, gy + s)
        out = np.zeros(f.n, bool)
        if not conn.periodic_x:
            out |= (px < 0) | (px >= W)
        if not conn.periodic_y:
            out |= (py < 0) | (py >= H)
        diag = ref_contains_global(leaves, conn, px, py)
        faces = (0 if dx < 0 else 1, 2 if dy < 0 else 3)
        for q in range(f.n):
            js = sorted(set(lists.get((q, c), [])))
            k, i, fa = cn.kind[q, c], cn.index[q, c], cn.face_adjacent[q, c]
            if out[q]:
                assert (k, i, fa) == (-1, -1, False) and not js
            elif js:
                assert len(js) == 1
                j = js[0]
                expect = 0 if lv[j] == lv[q] else (1 if lv[j] < lv[q] else 2)
                assert (k, i, fa) == (expect, j, False)
            else:
                # hanging corner: the region beyond it belongs to a coarser face neighbour
                fn = {j for fc in faces for _, j in face_lists.get((q, fc), [])}
                assert fa and k == 1 and i == diag[q] and i in fn and lv[i] < lv[q]


@pytest.mark.parametrize("name", list(BRICKS))
@pytest.mark.parametrize("seed", [0, 1])
def test_neighbor_tables_match_geometry(name, seed):
    conn = BRICKS[name]
    f, _ = random_forest(conn, seed)
    for g in (f.balance(), deep_corner_forest(conn, 5).balance()):
        leaves = as_list(g)
        kind, index, face_lists = expected_faces(leaves, conn)
        fn = g.face_neighbors()
        assert fn.kind.dtype == np.int8 and fn.index.dtype == np.int64
        assert np.array_equal(fn.kind, kind)
        assert np.array_equal(fn.index, index)
        assert g.face_neighbors() is fn  # cached
        check_corners(g, conn, face_lists)
    # corner table is defined on unbalanced forests too
    check_corners(f, conn, ref_face_lists(as_list(f), conn))


def test_face_neighbors_small_periodic():
    conn = Brick(1, 1, periodic_x=True)
    f = Forest.new(conn, 0)
    fn = f.face_neighbors()
    assert fn.kind.tolist() == [[0, 0, -1, -1]]
    assert fn.index[0, :, 0].tolist() == [0, 0, -1, -1]
    cn = f.corner_neighbors()
    assert cn.kind.tolist() == [[-1, -1, -1, -1]]


# --------------------------------------------------------------------------------------
# point location, geometry
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BRICKS))
def test_locate(name):
    conn = BRICKS[name]
    f, ref = random_forest(conn, 7)
    rng = np.random.default_rng(3)
    m = 300
    t = rng.integers(0, conn.ntrees, m)
    x = rng.integers(0, R, m)
    y = rng.integers(0, R, m)
    # include leaf corners exactly
    k = min(20, f.n)
    t[:k], x[:k], y[:k] = f.tree[:k], f.x[:k], f.y[:k]
    gx, gy = (t % conn.nx) * R + x, (t // conn.nx) * R + y
    expect = ref_contains_global(ref, conn, gx, gy)
    assert np.array_equal(f.locate(t, x, y), expect)
    assert f.locate(0, -1, 0) == -1 and f.locate(conn.ntrees, 0, 0) == -1
    assert f.locate(0, R, 0) == -1
    W, H = conn.nx * R, conn.ny * R
    gx = rng.integers(-W, 2 * W, m)
    gy = rng.integers(-H, 2 * H, m)
    expect = ref_contains_global(ref, conn, gx, gy)
    assert np.array_equal(f.locate_global(gx, gy), expect)
    assert np.array_equal(f.locate_global(*f.global_xy()), np.arange(f.n))


def test_geometry_helpers():
    conn = BRICKS["3x2"]
    f, _ = random_forest(conn, 4)
    xlo, ylo = f.leaf_lower()
    w, h = f.leaf_size()
    assert np.isclose((w * h).sum(), 3.0 * 2.0)
    assert np.all(xlo >= -1.0) and np.all(xlo + w <= 2.0 + 1e-14)
    assert np.all(ylo >= 0.5) and np.all(ylo + h <= 2.5 + 1e-14)
    u = Forest.new(conn, 1)
    xlo, ylo = u.leaf_lower()
    w, h = u.leaf_size()
    i, j = conn.tree_ij(u.tree)
    assert np.allclose(xlo, -1.0 + i + u.x / R) and np.allclose(ylo, 0.5 + 2.0 * (j + u.y / R) / 2)
    assert np.allclose(w, 0.5) and np.allclose(h, 0.5)
    gx, gy = u.global_xy()
    assert np.array_equal(gx, i * R + u.x) and np.array_equal(gy, j * R + u.y)


# --------------------------------------------------------------------------------------
# partition, checksum, validity
# --------------------------------------------------------------------------------------


def ref_partition(w, p):
    """Leaf i goes to the first part q with S_i <= (q + 1) W / p (exact fractions)."""
    w = [Fraction(v) for v in w]
    total = sum(w)
    owner, s = [], Fraction(0)
    for v in w:
        s += v
        q = 0
        while s * p > (q + 1) * total:
            q += 1
        owner.append(q)
    return np.searchsorted(np.array(owner), np.arange(p + 1), side="left")


@pytest.mark.parametrize("nparts", [1, 2, 3, 7, 64, 500])
def test_partition(nparts):
    f, _ = random_forest(BRICKS["3x2"], 5)
    n = f.n
    off = f.partition(nparts)
    assert off.dtype == np.int64 and off.shape == (nparts + 1,)
    assert np.array_equal(off, (np.arange(nparts + 1) * n) // nparts)
    rng = np.random.default_rng(nparts)
    for w in (rng.integers(0, 10, n), rng.random(n) * 3.0, np.ones(n, dtype=np.int64)):
        off = f.partition(nparts, w)
        assert off[0] == 0 and off[-1] == n and np.all(np.diff(off) >= 0)
        if w.dtype.kind == "i":
            assert np.array_equal(off, ref_partition(w.tolist(), nparts))
        part_w = np.add.reduceat(np.append(w, 0), off[:-1]) * (np.diff(off) > 0)
        assert np.all(np.abs(part_w - w.sum() / nparts) <= w.max() + 1e-9)
    assert np.array_equal(f.partition(nparts, np.ones(n)), f.partition(nparts))
    assert np.array_equal(f.partition(nparts, np.zeros(n)), f.partition(nparts))
    with pytest.raises(ValueError):
        f.partition(0)
    with pytest.raises(ValueError):
        f.partition(2, -np.ones(n))


def test_checksum():
    conn = BRICKS["per_x"]
    f, _ = random_forest(conn, 6)
    c = f.checksum()
    assert isinstance(c, int)
    assert Forest(conn, f.tree[::-1], f.level[::-1], f.x[::-1], f.y[::-1]).checksum() == c
    for i in (0, f.n // 2, f.n - 1):
        flags = np.zeros(f.n, bool)
        flags[i] = True
        assert f.refine(flags).checksum() != c
    assert Forest.new(conn, 1).checksum() == Forest.new(conn, 0).refine(np.ones(4, bool)).checksum()
    assert hash(f) == hash(Forest(conn, f.tree, f.level, f.x, f.y))


def test_is_valid_catches_corruption():
    conn = Brick(2, 1)
    f, _ = random_forest(conn, 8, rounds=2)
    t, l, x, y = (np.array(a) for a in (f.tree, f.level, f.x, f.y))
    assert Forest(conn, t, l, x, y, check=False).is_valid()

    def bad(tt, ll, xx, yy):
        assert not Forest(conn, tt, ll, xx, yy, check=False).is_valid()
        with pytest.raises(ValueError):
            Forest(conn, tt, ll, xx, yy)

    i = int(np.argmax(l))  # a leaf at level >= 2
    bad(np.delete(t, i), np.delete(l, i), np.delete(x, i), np.delete(y, i))  # gap
    bad(np.append(t, t[i]), np.append(l, l[i]), np.append(x, x[i]), np.append(y, y[i]))  # dup
    bad(np.append(t, 0), np.append(l, 0), np.append(x, 0), np.append(y, 0))  # overlap
    l2 = l.copy()
    l2[i] -= 1  # grows over its siblings
    bad(t, l2, x, y)
    l3 = l.copy()
    l3[i] += 1  # shrinks, leaving a gap
    bad(t, l3, x, y)
    x2 = x.copy()
    x2[i] += 1  # misaligned
    bad(t, l, x2, y)
    t2 = t.copy()
    t2[t2 == 1] = 2  # tree out of range
    bad(t2, l, x, y)
    x3 = x.copy()
    x3[i] = R  # outside its tree
    bad(t, l, x3, y)
    with pytest.raises(ValueError):
        Forest(conn, t[:-1], l, x, y)


# --------------------------------------------------------------------------------------
# scale sanity (no timing assertion)
# --------------------------------------------------------------------------------------


def test_large_forest_runs():
    conn = Brick(3, 2, periodic_x=True)
    rng = np.random.default_rng(9)
    f = Forest.new(conn, 4)
    while f.n < 50_000:
        f = f.refine((rng.random(f.n) < 0.15) & (f.level < 14))
    b = f.balance()
    assert b.n >= 100_000 // 2 and b.is_balanced() and b.is_valid()
    fn = b.face_neighbors()
    cn = b.corner_neighbors()
    assert (fn.kind[:, :2] >= 0).all() and (cn.index.shape == (b.n, 4))
    # symmetry: a same-level face neighbour points back across the opposite face
    same = fn.kind[:, 1] == 0
    assert np.array_equal(fn.index[fn.index[same, 1, 0], 0, 0], np.flatnonzero(same))
    part = b.partition(16)
    assert part[-1] == b.n
