"""The D3Q27 lattice: moment isotropy up to fourth order, opposites, equilibrium
moments."""

import itertools

import numpy as np
import pytest
from forestpy.solvers.lbm import CS2, OPP, C, Q, W, equilibrium


def test_velocity_set():
    assert C.shape == (Q, 3) and Q == 27
    # every vector of {-1,0,1}^3 exactly once, the rest velocity first
    assert sorted(map(tuple, C)) == sorted(itertools.product((-1, 0, 1), repeat=3))
    assert tuple(C[0]) == (0, 0, 0)
    np.testing.assert_array_equal(C[OPP], -C)
    np.testing.assert_array_equal(OPP[OPP], np.arange(Q))
    np.testing.assert_array_equal(OPP[1:14], np.arange(14, 27))
    # weights depend on |c|^2 only: 8/27, 2/27, 1/54, 1/216
    c2 = (C * C).sum(axis=1)
    for k, w in enumerate((8 / 27, 2 / 27, 1 / 54, 1 / 216)):
        np.testing.assert_allclose(W[c2 == k], w, rtol=0, atol=1e-17)
    assert np.array_equal(W[OPP], W)


def test_moment_isotropy():
    eye = np.eye(3)
    assert abs(W.sum() - 1) < 1e-15
    np.testing.assert_allclose(W @ C, 0, atol=1e-16)
    np.testing.assert_allclose(np.einsum("q,qa,qb->ab", W, C, C), CS2 * eye, atol=1e-16)
    np.testing.assert_allclose(np.einsum("q,qa,qb,qc->abc", W, C, C, C), 0, atol=1e-16)
    m4 = np.einsum("q,qa,qb,qc,qd->abcd", W, C, C, C, C)
    iso = CS2**2 * (np.einsum("ab,cd->abcd", eye, eye) + np.einsum("ac,bd->abcd", eye, eye)
                    + np.einsum("ad,bc->abcd", eye, eye))
    np.testing.assert_allclose(m4, iso, atol=1e-16)
    # D3Q27 is isotropic to fifth order too (odd moments vanish by symmetry), and the
    # sixth moment has the D1Q3 tensor-product value <c_x^2 c_y^2 c_z^2> = cs^6
    np.testing.assert_allclose(W @ (C[:, 0] ** 2 * C[:, 1] ** 2 * C[:, 2] ** 2), CS2**3,
                               atol=1e-17)


def test_equilibrium_moments():
    rng = np.random.default_rng(1)
    rho = 1 + 0.1 * rng.standard_normal((4, 3, 2))
    u = 0.05 * rng.standard_normal((3, 4, 3, 2))
    f = equilibrium(rho, u)
    np.testing.assert_allclose(f.sum(axis=0), rho, rtol=1e-14)
    np.testing.assert_allclose(np.tensordot(C.T, f, axes=(1, 0)), rho * u, atol=1e-15)
    pi = np.einsum("qa,qb,q...->ab...", C, C, f)
    expect = rho * (np.einsum("a...,b...->ab...", u, u)
                    + CS2 * np.eye(3).reshape(3, 3, 1, 1, 1))
    np.testing.assert_allclose(pi, expect, atol=1e-15)
    with pytest.raises(ValueError, match="u must have shape"):
        equilibrium(rho, u[:2])
