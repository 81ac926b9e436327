"""Forest.adapt (a regrid's refine, coarsen and incremental 2:1 balance) and the compiled
forest loops of forestpy.forest.kernels.

``adapt`` is checked against the brute-force quadtree of ``test_forest.py`` (refine,
coarsen and balance by box intersection, point location by box containment) on random
balanced forests over every brick of that file (several trees, periodic in x, y and
both), and against the separate operations with the balance started from every leaf,
which it must reproduce leaf for leaf while looking only where the forest changed.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_forest import (
    BRICKS,
    as_list,
    deep_corner_forest,
    random_forest,
    ref_balance,
    ref_coarsen,
    ref_contains_global,
    ref_refine,
    ref_touch,
)

from forestpy.forest import MAX_LEVEL, Brick, Forest, kernels
from forestpy.forest.quadrants import family_starts, key_span, quadrant_len


def separate_ops(f, refine, coarsen):
    """The regrid's forest as the separate operations make it, balanced from every leaf
    (the balance cache of the result of coarsen is not trusted)."""
    g = f.refine(refine)
    gx, gy = g.global_xy()
    src = f.locate_global(gx, gy)
    g = g.coarsen(coarsen[src] & (f.level[src] == g.level))
    g._cache.pop("balanced", None)
    return g.balance()


def random_flags(f, rng, p_refine=0.15, p_coarsen=0.8, max_level=7):
    refine = (rng.random(f.n) < p_refine) & (f.level < max_level)
    coarsen = rng.random(f.n) < p_coarsen
    return refine, coarsen


@pytest.mark.parametrize("name", list(BRICKS))
@pytest.mark.parametrize("seed", [0, 1])
def test_adapt_matches_brute_force(name, seed):
    """Leaves and the new-to-old map equal the brute-force reference's, the old forest
    balanced (incremental balance) or not known to be (balance from every leaf)."""
    conn = BRICKS[name]
    rng = np.random.default_rng(100 + seed)
    f, ref = random_forest(conn, seed, rounds=3)
    f, ref = f.balance(), ref_balance(ref, conn)
    assert as_list(f) == ref
    undone = 0
    for _ in range(3):
        refine, coarsen = random_flags(f, rng)
        r = ref_refine(ref, refine)
        counts = np.where(refine, 4, 1)
        c = np.repeat(coarsen, counts) & ~np.repeat(refine, counts)
        unbalanced = ref_coarsen(r, c)
        want = ref_balance(unbalanced, conn)
        undone += want != unbalanced
        g, source = f.adapt(refine, coarsen)
        assert as_list(g) == want
        assert g.is_valid() and g._cache["balanced"] and g.is_balanced()
        gx, gy = g.global_xy()
        assert np.array_equal(source, ref_contains_global(ref, conn, gx, gy))
        f2 = Forest(conn, f.tree, f.level, f.x, f.y)  # balance not known: full check
        g2, source2 = f2.adapt(refine, coarsen)
        assert g2 == g and np.array_equal(source2, source)
        f, ref = g, want
    assert undone  # some coarsening met a finer neighbour and the balance undid it


@pytest.mark.parametrize("name", list(BRICKS))
def test_adapt_equals_separate_operations(name):
    """Larger forests and many flag draws: the incremental balance gives the forest of
    the balance from every leaf; unchanged forests come back as the same object."""
    conn = BRICKS[name]
    rng = np.random.default_rng(7)
    f = random_forest(conn, 3, rounds=5, p=0.3, max_level=8)[0].balance()
    for draw in range(8):
        refine, coarsen = random_flags(f, rng, p_refine=0.05 * (draw % 3), max_level=9)
        g, source = f.adapt(refine, coarsen)
        assert g == separate_ops(f, refine, coarsen)
        assert np.array_equal(source, f.locate_global(*g.global_xy()))
        f = g
    none = np.zeros(f.n, dtype=bool)
    assert f.adapt(none, none)[0] is f
    # the deep corner (a tree corner and, periodic, the wrap): coarsen all, refine some
    d = deep_corner_forest(conn, depth=6).balance()
    flags = d.level == d.level.max()
    g, _ = d.adapt(np.zeros(d.n, dtype=bool), flags)
    assert g == separate_ops(d, np.zeros(d.n, dtype=bool), flags) and g.is_balanced()
    g, _ = d.adapt(flags, ~flags)
    assert g == separate_ops(d, flags, ~flags) and g.is_balanced()


def test_adapt_max_level_and_errors():
    f = Forest.new(Brick(2, 1), 2).balance()
    flags = np.ones(f.n, dtype=bool)
    g, _ = f.adapt(flags, ~flags, max_level=2)
    assert g is f
    with pytest.raises(ValueError, match="shape"):
        f.adapt(flags[:-1], flags)
    with pytest.raises(ValueError, match="shape"):
        f.adapt(flags, flags[:-1])
    deep = Forest(Brick(), [0], [MAX_LEVEL - 1], [0], [0], check=False)
    with pytest.raises(ValueError, match="cannot refine"):
        deep.adapt([True], [False])


# --------------------------------------------------------------------------------------
# the compiled loops against the NumPy they replace
# --------------------------------------------------------------------------------------


def numpy_refine(tree, level, x, y, keys, flags):
    counts = np.where(flags, 4, 1)
    src = np.repeat(np.arange(tree.shape[0]), counts)
    pos = np.arange(src.shape[0]) - (np.cumsum(counts) - counts)[src]
    new = flags[src]
    lv = level[src] + new
    h = np.where(new, quadrant_len(lv), 0)
    return (tree[src], lv, x[src] + (pos & 1) * h, y[src] + (pos >> 1) * h,
            keys[src] + np.where(new, pos * key_span(lv), 0), new, counts)


@pytest.mark.parametrize("name", ["3x2", "per_xy"])
def test_kernels_match_numpy(name):
    conn = BRICKS[name]
    rng = np.random.default_rng(11)
    f = random_forest(conn, 5, rounds=4)[0]
    args = (f.tree, f.level, f.x, f.y, f.keys)
    flags = (rng.random(f.n) < 0.3) & (f.level < 8)
    for a, b in zip(kernels.refine_arrays(*args, flags), numpy_refine(*args, flags)):
        assert np.array_equal(a, b)
    # coarsen: the families of family_starts, all four flagged
    cf = rng.random(f.n) < 0.7
    new = rng.random(f.n) < 0.5
    t, lv, x, y, k, new2, parents = kernels.coarsen_arrays(*args, new, cf)
    want = f.coarsen(cf)
    assert np.array_equal(k, want.keys) and np.array_equal(lv, want.level)
    assert np.array_equal(t, want.tree) and np.array_equal(x, want.x) and np.array_equal(y, want.y)
    fam = family_starts(*args[:4])
    fam[: f.n - 3] &= cf[: f.n - 3] & cf[1 : f.n - 2] & cf[2 : f.n - 1] & cf[3:]
    assert len(parents) == fam.sum() > 0
    assert np.all(new2[parents]) and np.all(lv[parents] == f.level[fam] - 1)
    keep = np.ones(f.n, dtype=bool)
    for d in (1, 2, 3):
        keep[np.flatnonzero(fam) + d] = False
    others = np.ones(len(k), dtype=bool)
    others[parents] = False
    assert np.array_equal(new2[others], new[keep & ~fam])
    assert np.array_equal(kernels.family_starts(*args[:4]), family_starts(*args[:4]))
    # the merge against searchsorted, queries inside, before and after the keys
    q = np.sort(rng.integers(-5, int(f.keys[-1]) + key_span(0), 500))
    assert np.array_equal(kernels.locate_sorted(f.keys, q),
                          np.searchsorted(f.keys, q, side="right") - 1)
    # balance violations of every leaf: the brute-force touching pairs
    coarse, fine = kernels.coarse_neighbors(conn, f.keys, f.tree, f.level, f.x, f.y,
                                            np.arange(f.n))
    lv = f.level
    want = ref_touch(as_list(f), conn) & (lv[:, None] - lv[None, :] >= 2)
    assert len(coarse) > 0
    assert set(zip(fine.tolist(), coarse.tolist())) == set(zip(*np.nonzero(want)))
