"""solvers/tworoe/physics.py: the projected fluxes against a brute-force NumPy
construction (eigen-decomposition of the Roe matrix, IFCP's parabola by polyfit), the
Roe property, well-balancing, hyperbolicity loss, the entropy fix, FP32 typing."""

import numpy as np
import pytest
from forestpy.solvers.tworoe import physics as P

G = 9.81


def _random_states(rng, n, r):
    """Depths, velocities (a common part up to 0.5 and a shear kept well inside the
    hyperbolic range), bottom depths."""
    h = rng.uniform(0.3, 1.5, (n, 4))
    shear = 0.3 * np.sqrt((1 - r) * G * 0.6)
    u = rng.uniform(-0.5, 0.5, (n, 1)) + rng.uniform(-shear, shear, (n, 4))
    H = rng.uniform(1.0, 2.0, (n, 2))
    return h, u, H


def _roe_reference(h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, Hl, Hr, r):
    hb1, hb2 = (h1l + h1r) / 2, (h2l + h2r) / 2

    def ut(hl, hr, ql, qr):
        return (ql / np.sqrt(hl) + qr / np.sqrt(hr)) / (np.sqrt(hl) + np.sqrt(hr))

    u1, u2 = ut(h1l, h1r, q1l, q1r), ut(h2l, h2r, q2l, q2r)
    A = np.array([[0, 1, 0, 0], [G * hb1 - u1**2, 2 * u1, G * hb1, 0], [0, 0, 0, 1],
                  [r * G * hb2, 0, G * hb2 - u2**2, 2 * u2]])
    dW = np.array([h1r - h1l, q1r - q1l, h2r - h2l, q2r - q2l])
    S = np.array([0, G * hb1, 0, G * hb2])
    return A, dW, S, Hr - Hl, u1, u2, hb1, hb2


@pytest.mark.parametrize("r", [0.5, 0.9, 0.98, 0.998])
def test_irroe_and_ifcp_match_a_brute_force_construction(r):
    rng = np.random.default_rng(int(r * 1000))
    h, u, H = _random_states(rng, 40, r)
    checked = 0
    for k in range(40):
        h1l, h1r, h2l, h2r = h[k]
        q1l, q1r, q2l, q2r = h1l * u[k, 0], h1r * u[k, 1], h2l * u[k, 2], h2r * u[k, 3]
        Hl, Hr = H[k]
        A, dW, S, dH, u1, u2, hb1, hb2 = _roe_reference(h1l, q1l, h2l, q2l, h1r, q1r,
                                                        h2r, q2r, Hl, Hr, r)
        R = A @ dW - S * dH
        args = (h1l, q1l, h2l, q2l, h1r, q1r, h2r, q2r, (h2r - Hr) - (h2l - Hl), dH, G, r)
        scale = np.abs(R).max() + 1e-3
        lam, K = np.linalg.eig(A)
        assert np.abs(lam.imag).max() == 0.0  # subcritical, hyperbolic states
        ev = P.eigenvalues_roe(u1, u2, hb1, hb2, G, r)
        assert ev[4] == 1.0
        assert np.allclose(np.sort(lam.real), ev[:4], rtol=0, atol=1e-12 * G)
        out = P.fluctuation_irroe(*args)
        assert np.allclose(out[4:8], R, rtol=0, atol=1e-13 * scale)
        # IR-Roe is sgn(A) where the entropy fix is inactive (|lambda| >= delta)
        la = P.speeds_first_order(h1l, q1l / h1l, h2l, q2l / h2l, G, r)
        lb = P.speeds_first_order(h1r, q1r / h1r, h2r, q2r / h2r, G, r)
        delta = np.maximum(0, np.maximum(np.array(ev[:4]) - la, np.array(lb) - ev[:4]))
        if (np.abs(ev[:4]) < delta).any():
            continue
        checked += 1
        assert np.allclose(out[4:8], R, rtol=0, atol=1e-13 * scale)
        Dm = 0.5 * (K @ np.diag(1 - np.sign(lam.real)) @ np.linalg.solve(K, R)).real
        assert np.allclose(out[:4], Dm, rtol=0, atol=1e-11 * scale)
        assert out[8] == pytest.approx(np.abs(lam).max(), rel=1e-12)
        # IFCP: P(A) with P the parabola through the first-order speeds
        l1, l2, l3, l4 = P.speeds_first_order(hb1, u1, hb2, u2, G, r)
        chi = max(abs(l2), abs(l3)) * (1.0 if l2 + l3 >= 0 else -1.0)
        c2, c1, c0 = np.polyfit([l1, l4, chi], np.abs([l1, l4, chi]), 2)
        Q = c2 * A @ A + c1 * A + c0 * np.eye(4)
        Dm2 = 0.5 * (R - Q @ (dW - np.linalg.solve(A, S) * dH))
        out2 = P.fluctuation_ifcp(*args)
        assert np.allclose(out2[:4], Dm2, rtol=0, atol=1e-11 * scale)
    assert checked >= 20


@pytest.mark.parametrize("flux", [P.flux_edge_irroe, P.flux_edge_ifcp])
def test_edge_flux_consistency_and_well_balance(flux):
    r = 0.9
    # equal states: the cell's own flux leaves, nothing else
    s = (0.4, 0.1, -0.05, 0.7, -0.2, 0.03, 1.1)
    out = flux(*s, *s, G, r)
    assert out[0] == 0.1 and out[1] == -0.2
    assert out[2:10] == (0.0,) * 8
    # water at rest over a step of the bottom, both layers: no flux, no fluctuation
    for Hl, Hr in ((1.0, 1.5), (0.75, 0.25)):
        left = (0.25, 0.0, 0.0, 0.5 + Hl, 0.0, 0.0, Hl)
        right = (0.25, 0.0, 0.0, 0.5 + Hr, 0.0, 0.0, Hr)
        out = flux(*left, *right, G, r)
        assert np.abs(out[:10]).max() == 0.0
    # D^- + D^+ = R on the normal momenta; the tangential fluctuations add up to the
    # jump of q_n * v, the mass fluxes are those of the left state plus D^-
    L = (0.4, 0.1, 0.02, 0.7, -0.2, 0.03, 1.1)
    R_ = (0.5, 0.05, -0.04, 0.6, -0.1, 0.01, 1.0)
    f1, f2, m1n, m1t, m2n, m2t, n1n, n1t, n2n, n2t, smax, hyp = flux(*L, *R_, G, r)
    jump = P.fluctuation_irroe(0.4, 0.1, 0.7, -0.2, 0.5, 0.05, 0.6, -0.1,
                               (0.6 - 1.0) - (0.7 - 1.1), -0.1, G, r)[4:8]
    assert m1n + n1n == pytest.approx(jump[1], abs=1e-15)
    assert m2n + n2n == pytest.approx(jump[3], abs=1e-15)
    assert m1t + n1t == pytest.approx(0.05 * (-0.04 / 0.5) - 0.1 * (0.02 / 0.4), abs=1e-15)
    assert m2t + n2t == pytest.approx(-0.1 * (0.01 / 0.6) - (-0.2) * (0.03 / 0.7), abs=1e-15)
    assert hyp == 1.0 and smax > np.sqrt(G * 1.1)


def test_mirror_symmetry_of_the_flux():
    """Swapping the sides and reversing the normal gives the mirrored flux."""
    r = 0.95
    L = (0.4, 0.1, 0.02, 0.7, -0.2, 0.03, 1.1)
    R_ = (0.5, 0.05, -0.04, 0.6, -0.1, 0.01, 1.0)

    def mirror(s):
        return (s[0], -s[1], -s[2], s[3], -s[4], -s[5], s[6])

    a = P.flux_edge_irroe(*L, *R_, G, r)
    b = P.flux_edge_irroe(*mirror(R_), *mirror(L), G, r)
    # mass fluxes reverse; the right side's normal fluctuations become the left's
    assert b[0] == pytest.approx(-a[0], abs=1e-14) and b[1] == pytest.approx(-a[1], abs=1e-14)
    assert b[2] == pytest.approx(-a[6], abs=1e-13) and b[4] == pytest.approx(-a[8], abs=1e-13)
    assert b[3] == pytest.approx(-a[7], abs=1e-13) and b[5] == pytest.approx(-a[9], abs=1e-13)


def test_loss_of_hyperbolicity_falls_back_to_ifcp_matrix():
    r = 0.98
    gp = (1 - r) * G
    du = 2.0 * np.sqrt(gp * 1.0)  # (u1 - u2)^2 = 4 g' (h1 + h2): complex internal pair
    h1 = h2 = 0.5
    u1, u2 = du / 2, -du / 2
    A = np.array([[0, 1, 0, 0], [G * h1 - u1**2, 2 * u1, G * h1, 0], [0, 0, 0, 1],
                  [r * G * h2, 0, G * h2 - u2**2, 2 * u2]])
    lam = np.linalg.eigvals(A)
    assert np.abs(lam.imag).max() > 0.01
    ev = P.eigenvalues_roe(u1, u2, h1, h2, G, r)
    assert ev[4] == 0.0
    ext = np.sort(lam[np.abs(lam.imag) < 1e-12].real)
    assert ev[0] == pytest.approx(ext[0], abs=1e-12) and ev[3] == pytest.approx(ext[1],
                                                                               abs=1e-12)
    cplx = lam[np.abs(lam.imag) > 1e-12]
    assert ev[1] == pytest.approx(cplx[0].real, abs=1e-9)
    assert np.sqrt(ev[5]) == pytest.approx(np.abs(cplx[0]), rel=1e-9)
    # the flux stays finite and dissipative: a small jump across the shear
    L = (h1, h1 * u1, 0.0, h2, h2 * u2, 0.0, 1.0)
    R_ = (h1 + 0.01, h1 * u1, 0.0, h2 - 0.01, h2 * u2, 0.0, 1.0)
    out = P.flux_edge_irroe(*L, *R_, G, r)
    assert out[11] == 0.0 and np.isfinite(out).all()


def test_entropy_fix_smooths_the_sign_through_a_transonic_rarefaction():
    # lam between lam_l < 0 < lam_r: lam / |lam|_delta is continuous and in (-1, 1)
    s = [P._sgn_fixed(lam, -0.2, 0.3) for lam in np.linspace(-0.05, 0.05, 11)]
    assert all(-1 < v < 1 for v in s) and np.all(np.diff(s) > 0)
    assert P._sgn_fixed(0.0, -0.2, 0.3) == 0.0
    assert P._sgn_fixed(0.5, 0.4, 0.6) == 1.0 and P._sgn_fixed(-0.5, -0.6, -0.4) == -1.0


def test_fp32_specialisation_computes_in_fp32():
    f32 = P.specialised(P.flux_edge_irroe, np.float32)
    args = [np.float32(v) for v in (0.5, 0.1, 0.0, 0.5, -0.1, 0.0, 1.0, 0.4, 0.1, 0.0,
                                    0.6, 0.0, 0.0, 1.0, 9.81, 0.98)]
    got = f32(*args)
    (sig,) = f32.nopython_signatures
    assert all(str(t) == "float32" for t in sig.return_type.types)
    ref = P.flux_edge_irroe(*[float(a) for a in args])
    assert np.allclose(got, ref, rtol=2e-5, atol=2e-6)
    assert not np.array_equal(got, ref)  # FP32 rounding shows
    with pytest.raises(ValueError, match="float64 or float32"):
        P.specialised(P.flux_edge_irroe, np.float16)
