"""indicator_wavelet: normalised Haar details as the patch-forest refinement flag."""

import types

import numpy as np
import pytest

from forestpy import Domain, Simulation
from forestpy.indicators import haar_details, indicator_wavelet


def patches(values, mbc=2):
    """q[npatch, 1, 8 + 2 mbc, 8 + 2 mbc] with the given interiors (ghosts garbage)."""
    q = np.full((len(values), 1, 8 + 2 * mbc, 8 + 2 * mbc), 1e6)
    for p, v in enumerate(values):
        q[p, 0, mbc:-mbc, mbc:-mbc] = v
    return q, types.SimpleNamespace(mbc=mbc)


def test_haar_details_match_brute_force():
    f = np.random.default_rng(0).normal(size=(3, 8, 8))
    got = haar_details(f)
    assert [lev for lev, _ in got] == [2, 1, 0]
    g = f.copy()
    for _lev, dmax in got:
        n = g.shape[1] // 2
        expect = np.zeros(3)
        coarse = np.zeros((3, n, n))
        for p in range(3):
            for a in range(n):
                for b in range(n):
                    blk = g[p, 2 * a:2 * a + 2, 2 * b:2 * b + 2]
                    coarse[p, a, b] = blk.mean()
                    d = [blk[1].sum() - blk[0].sum(), blk[:, 1].sum() - blk[:, 0].sum(),
                         blk[0, 0] + blk[1, 1] - blk[0, 1] - blk[1, 0]]
                    expect[p] = max(expect[p], max(abs(x) for x in d) / 4)
        np.testing.assert_allclose(dmax, expect, rtol=1e-13)
        g = coarse


def test_flags_follow_the_level_scaled_threshold():
    spike = np.zeros((8, 8))
    spike[3, 5] = 0.4  # finest detail 0.1; threshold there eps / 2
    step = np.zeros((8, 8))
    step[:, 4:] = 1e-3
    q, geom = patches([np.full((8, 8), 0.7), spike, step])
    assert indicator_wavelet(0, 0.19)(q, None, geom, 0.0).tolist() == [False, True, False]
    assert indicator_wavelet(0, 0.21)(q, None, geom, 0.0).tolist() == [False, False, False]
    # the step's only detail, 2.5e-4 at patch level 0 (threshold eps / 8)
    assert indicator_wavelet(0, 1.9e-3)(q, None, geom, 0.0).tolist() == [False, True, True]


def test_normalisation_is_the_domain_maximum_under_mpi():
    """On one rank of a distributed run the largest depth may be on another rank: the
    criterion takes the maximum over the ranks from its context (``ctx.allreduce``)."""

    class OtherRankHoldsTheMaximum:
        def allreduce(self, value, op):
            assert op == "max"
            return max(value, 4.0)

    spike = np.zeros((8, 8))
    spike[3, 5] = 0.4
    q, geom = patches([np.full((8, 8), 0.7), spike])
    tag = indicator_wavelet(0, 0.19)
    assert tag.takes_context
    assert tag(q, None, geom, 0.0, ctx=None).tolist() == [False, True]
    # normalised by 4 the spike's detail is below the threshold
    assert tag(q, None, geom, 0.0, ctx=OtherRankHoldsTheMaximum()).tolist() == [False, False]
    # a rank without patches still takes part in the reduction
    assert tag(q[:0], None, geom, 0.0, ctx=OtherRankHoldsTheMaximum()).tolist() == []


def test_wavelet_tagging_drives_the_forest_to_the_front():
    r0 = 0.5

    def qinit(x, y):
        h = np.where(np.hypot(x, y) < r0, 2.0, 1.0)
        return np.stack([h, np.zeros_like(x), np.zeros_like(x)])

    sim = Simulation("shallow_roe", qinit=qinit, tag=indicator_wavelet(0, 1e-2),
                     domain=Domain((-2.5, -2.5), (2.5, 2.5)), bc="wall", mx=8,
                     min_level=1, max_level=3)
    g = sim.geom
    fine = g.level == 3
    cx = g.xlower + 0.5 * g.mx * g.dx
    cy = g.ylower + 0.5 * g.my * g.dy
    half = 0.5 * g.mx * g.dx * np.sqrt(2)
    dist = np.abs(np.hypot(cx, cy) - r0)
    # refined patches come as 4 siblings: each lies within its parent that the front crosses
    assert fine.any() and (~fine).any() and np.all(dist[fine] <= 3 * half[fine])
    crossing = dist <= half
    assert np.all(g.level[crossing] == 3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="eps"):
        indicator_wavelet(0, 0.0)
    with pytest.raises(ValueError, match="field"):
        indicator_wavelet(-1)
    q, geom = patches([np.zeros((8, 8))])
    with pytest.raises(ValueError, match="out of range"):
        indicator_wavelet(3)(q, None, geom, 0.0)
    with pytest.raises(ValueError, match="power-of-two"):
        haar_details(np.zeros((1, 6, 6)))


def test_threshold_tagging_gives_both_flags_from_one_indicator():
    from forestpy.indicators import indicator_undivided_difference, threshold_tagging

    q = np.zeros((3, 1, 8, 8))
    q[1, 0, 4:, :] = 0.05  # a small jump inside patch 1
    q[2, 0, 4:, :] = 1.0  # a large one inside patch 2
    geom = types.SimpleNamespace(mbc=2)
    refine, coarsen = threshold_tagging(indicator_undivided_difference(0), 0.1, 0.01)
    assert refine(q, None, geom, 0.0).tolist() == [False, False, True]
    assert coarsen(q, None, geom, 0.0).tolist() == [True, False, False]
    assert threshold_tagging(indicator_undivided_difference(0), 0.1, None)[1] is None
