"""RRB-PCG: ordering, storage, factorisation against an explicit L D L^T, Poisson
convergence and iterations, agreement with a direct sparse solve, bad input."""

import numpy as np
import pytest
from forestpy.solvers import rrb
from forestpy.solvers.rrb.build import dense_matrix

scipy = pytest.importorskip("scipy")
from scipy.sparse import csr_matrix  # noqa: E402
from scipy.sparse.linalg import cg, spsolve  # noqa: E402


def random_stencil(nx, ny, seed=0, mass=0.1):
    """Variable-coefficient diffusion + mass, zero-flux walls: an SPD M-matrix."""
    rng = np.random.default_rng(seed)
    kx = rng.uniform(0.2, 2.0, (ny, nx))
    ky = rng.uniform(0.2, 2.0, (ny, nx))
    kx[:, -1] = 0.0
    ky[-1, :] = 0.0
    c = mass * rng.uniform(0.5, 1.5, (ny, nx)) + kx + ky
    c[:, 1:] += kx[:, :-1]
    c[1:, :] += ky[:-1, :]
    return c, -kx, -ky


def explicit_ldlt(stencil, levels, lumping="stencil"):
    """Brute-force reference: dense elimination in RRB order with the lumping rule
    applied to whole matrices; returns (L D L^T, A) in natural ordering."""
    c, e, n = stencil
    ny, nx = c.shape
    A = dense_matrix(c, e, n, order="natural")
    N = nx * ny
    jj, ii = np.divmod(np.arange(N), nx)
    S, L, D = A.copy(), np.eye(N), np.zeros(N)
    rem = np.ones(N, bool)
    order = []

    def eliminate(E):
        order.extend(E)
        D[E] = S[E, E]
        rem[E] = False
        R = np.nonzero(rem)[0]
        L[np.ix_(R, E)] = S[np.ix_(R, E)] / D[E]
        S[np.ix_(R, R)] -= S[np.ix_(R, E)] @ (S[np.ix_(E, R)] / D[E][:, None])

    def lump(allowed):
        R = np.nonzero(rem)[0]
        for a, b in [(a, b) for a in R for b in R if a < b and S[a, b] != 0 and not allowed(a, b)]:
            f = S[a, b]
            S[a, b] = S[b, a] = 0.0
            mids = [m for m in R if allowed(a, m) and allowed(m, b)] if lumping == "stencil" else []
            if not mids:
                S[a, a] += f
                S[b, b] += f
            for m in mids:
                g = f / len(mids)
                S[a, m] += g
                S[m, a] += g
                S[m, b] += g
                S[b, m] += g
                S[m, m] -= 2 * g

    s = 1
    for _ in range(levels - 1):
        on = rem & (ii % s == 0) & (jj % s == 0)
        I, J = ii // s, jj // s
        eliminate(np.nonzero(on & ((I + J) % 2 == 1))[0])
        lump(lambda a, b, s=s: abs(ii[a] - ii[b]) == s and abs(jj[a] - jj[b]) == s)
        eliminate(np.nonzero(on & (I % 2 == 1) & (J % 2 == 1))[0])
        s *= 2
        lump(
            lambda a, b, s=s: (
                (abs(ii[a] - ii[b]) == s and jj[a] == jj[b])
                or (abs(jj[a] - jj[b]) == s and ii[a] == ii[b])
            )
        )
    for k in np.nonzero(rem)[0]:
        eliminate(np.array([k]))
    assert sorted(order) == list(range(N))
    assert not np.triu(L[np.ix_(order, order)], 1).any()  # unit lower triangular in RRB order
    return L @ np.diag(D) @ L.T, A


def sparse(stencil):
    return csr_matrix(dense_matrix(*stencil, order="natural"))


# ----------------------------------------------------------------- ordering, storage


@pytest.mark.parametrize(
    "nx,ny,expect",
    [
        (64, 64, 7),
        (100, 37, 7),
        (5, 3, 3),
        (2, 1, 2),
        (1, 9, 4),
        (4096, 4096, 13),
        (1224, 1224, 11),
    ],
)
def test_max_levels(nx, ny, expect):
    assert rrb.max_levels(nx, ny) == expect
    shapes = rrb.level_shapes(nx, ny, expect)
    assert max(shapes[-1]) <= 2 and max(shapes[-2]) > 1 or max(nx, ny) <= 2


@pytest.mark.parametrize("nx,ny", [(8, 8), (7, 5), (1, 6), (13, 2), (33, 17)])
def test_quarter_round_trip(nx, ny):
    a = np.random.default_rng(1).standard_normal((3, ny, nx))
    q = rrb.to_quarters(a, pad=-7.0)
    assert q.shape == (3, 4, (ny + 1) // 2, (nx + 1) // 2)
    assert np.array_equal(rrb.from_quarters(q, nx, ny), a)
    # every natural value sits in exactly one quarter; the rest is padding
    assert np.count_nonzero(q != -7.0) == a.size
    assert q[0, 0, 0, 0] == a[0, 0, 0]  # r1 (0, 0)
    if nx > 1 and ny > 1:
        assert q[0, 1, 0, 0] == a[0, 1, 1]  # r2 (1, 1)
        assert q[0, 2, 0, 0] == a[0, 0, 1]  # b1 (1, 0)
        assert q[0, 3, 0, 0] == a[0, 1, 0]  # b2 (0, 1)


def test_rrb_permutation_is_a_permutation():
    for nx, ny, k in [(8, 8, 4), (9, 5, 3), (16, 3, 5)]:
        p = rrb.rrb_permutation(nx, ny, k)
        assert np.array_equal(np.sort(p), np.arange(nx * ny))
        # level-1 black nodes come first
        nb = sum(1 for j in range(ny) for i in range(nx) if (i + j) % 2)
        jj, ii = np.divmod(p[:nb], nx)
        assert np.all((ii + jj) % 2 == 1)


# ----------------------------------------------------------------- factorisation


@pytest.mark.parametrize("lumping", ["stencil", "diagonal"])
@pytest.mark.parametrize("nx,ny,k", [(4, 4, 2), (7, 5, 3), (8, 8, 4), (9, 6, 3), (11, 11, 4)])
def test_preconditioner_matches_explicit_ldlt(nx, ny, k, lumping):
    st = random_stencil(nx, ny, seed=nx * ny)
    M, A = explicit_ldlt(st, k, lumping)
    s = rrb.RRBSolver(st, level=k, lumping=lumping, factors="float64")
    b = np.random.default_rng(2).standard_normal((ny, nx))
    z = s.precondition(b)
    assert np.allclose(z.ravel(), np.linalg.solve(M, b.ravel()), rtol=1e-11, atol=1e-12)
    # lumping keeps row sums: R 1 = (M - A) 1 = 0
    assert np.abs((M - A).sum(axis=1)).max() < 1e-12 * np.abs(A).max()


def test_float32_factors_keep_the_preconditioner_symmetric_positive_definite():
    """The default float32 factors: a preconditioner within float32 rounding of the
    float64 one, still exactly symmetric (the two sweeps read the same stored entries)
    and positive definite, and CG takes the same iterations to the same solution."""
    nx, ny, k = 23, 17, 4
    st = random_stencil(nx, ny, seed=7)
    s32 = rrb.RRBSolver(st, level=k)
    s64 = rrb.RRBSolver(st, level=k, factors="float64")
    assert s32._lv["P"][0].dtype == np.float32 and s32._lv["BL"][1].dtype == np.float32
    assert s32._lv["BL"][0].dtype == np.float64  # level-1 black step: exact elimination
    assert s64._lv["P"][0].dtype == np.float64
    N = nx * ny
    M32 = np.column_stack([s32.precondition(e).ravel() for e in np.eye(N).reshape(N, ny, nx)])
    M64 = np.column_stack([s64.precondition(e).ravel() for e in np.eye(N).reshape(N, ny, nx)])
    assert 0 < np.abs(M32 - M64).max() < 1e-6 * np.abs(M64).max()
    assert np.abs(M32 - M32.T).max() < 1e-14 * np.abs(M32).max()
    assert np.linalg.eigvalsh(0.5 * (M32 + M32.T)).min() > 0
    b = np.random.default_rng(1).standard_normal((ny, nx))
    x32, i32 = s32.solve(b, tol=1e-10)
    x64, i64 = s64.solve(b, tol=1e-10)
    assert i32["iterations"] == i64["iterations"]
    assert np.abs(x32 - x64).max() < 1e-8 * np.abs(x64).max()


def test_factors_beyond_float32_range_stay_float64():
    """A stencil scaled by 1e-40: its 1/d (~1e40) would overflow float32, so those
    factors are kept in float64 and the solve is unaffected."""
    c, e, n = rrb.stencil_poisson(15, 15)
    s = rrb.RRBSolver((c * 1e-40, e * 1e-40, n * 1e-40), level=3)
    assert s._lv["P"][0].dtype == np.float64 and s._lv["BL"][1].dtype == np.float64
    b = np.ones((15, 15))
    x, info = s.solve(b * 1e-40, tol=1e-10)
    ref, _ = rrb.RRBSolver((c, e, n), level=3).solve(b, tol=1e-10)
    assert info["converged"] and np.abs(x - ref).max() < 1e-8 * np.abs(ref).max()


def test_stencil_lumping_keeps_poisson_well_conditioned():
    """Diagonal lumping loses a factor ~4 of the smooth-mode energy per level (condition
    number ~ N^2); stencil lumping keeps it nearly level independent."""
    from scipy.linalg import eigh

    kappa = {}
    for mode in ("stencil", "diagonal"):
        for N in (7, 15):
            M, A = explicit_ldlt(rrb.stencil_poisson(N, N), rrb.max_levels(N, N), mode)
            ev = eigh(A, M, eigvals_only=True)
            kappa[mode, N] = ev.max() / ev.min()
    assert kappa["stencil", 15] < 3.5 and kappa["stencil", 15] / kappa["stencil", 7] < 1.5
    assert kappa["diagonal", 15] / kappa["diagonal", 7] > 2.5


# ----------------------------------------------------------------- PCG


def poisson_problem(N):
    """u = x(x-1)y(y-1)exp(xy) on the unit square, N cells, (N-1)^2 unknowns."""
    h = 1.0 / N
    x = np.arange(1, N) * h
    X, Y = np.meshgrid(x, x)
    E = np.exp(X * Y)
    Xp, Yp = X * X - X, Y * Y - Y
    u = Xp * Yp * E
    uxx = Yp * E * (2 + 2 * Y * (2 * X - 1) + Y * Y * Xp)
    uyy = Xp * E * (2 + 2 * X * (2 * Y - 1) + X * X * Yp)
    return rrb.stencil_poisson(N - 1, N - 1, h), -(uxx + uyy), u


def test_poisson_second_order_and_slow_iteration_growth():
    errs, its = [], []
    for N in (16, 32, 64, 128):
        st, f, u = poisson_problem(N)
        x, info = rrb.solve(st, f, tol=1e-10)
        assert info["converged"]
        errs.append(np.abs(x - u).max())
        its.append(info["iterations"])
    rates = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(rates > 1.9) and np.all(rates < 2.1), rates
    assert its[-1] <= 26 and its[-1] - its[1] <= 6, its


def test_agrees_with_direct_sparse_solve_and_warm_start():
    nx, ny = 37, 22
    st = random_stencil(nx, ny, seed=5, mass=0.05)
    b = np.random.default_rng(3).standard_normal((ny, nx))
    ref = spsolve(sparse(st).tocsc(), b.ravel()).reshape(ny, nx)
    s = rrb.RRBSolver(st)
    x, info = s.solve(b, tol=1e-12)
    assert info["converged"]
    assert np.abs(x - ref).max() < 1e-9 * np.abs(ref).max()
    # the stopping rule is the relative M^-1 norm: a looser tol stops earlier
    x6, info6 = s.solve(b, tol=1e-6)
    assert info6["iterations"] < info["iterations"] and info6["residual"] <= 1e-6
    # warm start from a nearby solution needs fewer iterations
    xw, infow = s.solve(b * 1.001, x0=x, tol=1e-8)
    _, infoc = s.solve(b * 1.001, tol=1e-8)
    assert infow["iterations"] < infoc["iterations"]
    assert np.abs(xw - 1.001 * ref).max() < 1e-6 * np.abs(ref).max()


def test_linear_operator_views_with_scipy_cg():
    nx, ny = 40, 31
    st = random_stencil(nx, ny, seed=9)
    s = rrb.RRBSolver(st)
    A = sparse(st)
    b = np.random.default_rng(4).standard_normal(nx * ny)
    Aop = s.aslinearoperator("operator")
    assert np.allclose(Aop @ b, A @ b)
    counts = {}
    for name, M in (("rrb", s.aslinearoperator()), ("none", None)):
        k = [0]
        x, flag = cg(
            A, b, rtol=1e-10, M=M, callback=lambda _, k=k: k.__setitem__(0, k[0] + 1), maxiter=2000
        )
        assert flag == 0
        counts[name] = k[0]
    assert counts["rrb"] * 3 < counts["none"]
    xs = s.aslinearoperator("solve") @ b
    assert np.allclose(A @ xs, b, atol=1e-7)


@pytest.mark.parametrize("nx,ny", [(5, 5), (6, 4), (7, 9), (8, 8)])
def test_red_schur_matrix_is_the_exact_schur_complement(nx, ny):
    """The last level's dense part: the black nodes eliminated exactly from the 5-point
    operator, in red quarter order (padding identity)."""
    from forestpy.solvers.rrb.build import red_schur_matrix

    st = random_stencil(nx, ny, seed=nx + 10 * ny)
    M = dense_matrix(*st)  # quarter order: r1, r2, b1, b2 (pads: identity)
    m = M.shape[0] // 2
    R, B = slice(0, m), slice(m, 2 * m)
    S = M[R, R] - M[R, B] @ np.diag(1.0 / np.diag(M[B, B])) @ M[B, R]
    np.testing.assert_allclose(red_schur_matrix(*st), S, rtol=1e-13, atol=1e-13)


def test_large_last_level_inverse_is_fixed_point_and_as_good(monkeypatch):
    """Above DENSE_F64_ROWS red nodes the dense inverse is stored as ``D F D`` with ``F``
    in int16 fixed point (unit diagonal = 32767): within its rounding of the float64
    inverse, the same CG iterations, and the same solution to the tolerance.  The
    threshold is lowered so that a 33 x 33 grid crosses it (the rule is the same at
    1024 rows and a 129 x 129 grid, whose dense inverse costs seconds to build)."""
    import forestpy.solvers.rrb.build as B

    monkeypatch.setattr(B, "DENSE_F64_ROWS", 100)
    st = random_stencil(33, 33, seed=3)  # level 2: 17^2 nodes, 2 x 9^2 red rows
    b = np.random.default_rng(4).standard_normal((33, 33))
    sq = rrb.RRBSolver(st, level=2)
    F = sq._lv["Minv"]
    assert F.dtype == np.int16 and F.shape[0] == 162 > B.DENSE_F64_ROWS
    assert (np.diag(F) == B.FIXED_ONE).all()
    monkeypatch.setattr(B, "DENSE_F64_ROWS", 10**9)
    s64 = rrb.RRBSolver(st, level=2)
    assert s64._lv["Minv"].dtype == np.float64 and (s64._lv["Dlast"] == 1).all()
    dense = F * np.outer(sq._lv["Dlast"], sq._lv["Dlast"])
    rel = np.abs(dense - s64._lv["Minv"]).max() / np.abs(s64._lv["Minv"]).max()
    assert 0 < rel < 1e-4
    zq, z64 = sq.precondition(b), s64.precondition(b)
    assert 0 < np.abs(zq - z64).max() < 1e-3 * np.abs(z64).max()
    xq, iq = sq.solve(b, tol=1e-10)
    x64, i64 = s64.solve(b, tol=1e-10)
    assert iq["converged"] and abs(iq["iterations"] - i64["iterations"]) <= 1
    assert np.abs(xq - x64).max() < 1e-8 * np.abs(x64).max()


def test_last_level_inverse_stays_float64_when_rounding_would_break_spd(monkeypatch):
    """A nearly singular operator (zero-flux walls, mass 1e-12): its coarse inverse has
    one huge eigenvalue, fixed-point or float32 rounding would make it indefinite, so the
    build keeps float64 and CG still converges (threshold lowered as above)."""
    import forestpy.solvers.rrb.build as B

    monkeypatch.setattr(B, "DENSE_F64_ROWS", 100)
    st = random_stencil(33, 33, seed=3, mass=1e-12)
    s = rrb.RRBSolver(st, level=2)
    assert s._lv["Minv"].dtype == np.float64 and s._lv["Minv"].shape[0] == 162
    b = np.random.default_rng(4).standard_normal((33, 33))
    x, info = s.solve(b, tol=1e-8)
    assert info["converged"]


def test_bad_input_messages():
    c, e, n = rrb.stencil_poisson(8, 8)
    with pytest.raises(ValueError, match="east coupling"):
        e2 = e.copy()
        e2[:, -1] = -1.0
        rrb.RRBSolver((c, e2, n))
    with pytest.raises(ValueError, match="one shape"):
        rrb.RRBSolver((c, e[:, :-1], n))
    with pytest.raises(ValueError, match="diagonal must be positive"):
        rrb.RRBSolver((-c, e, n))
    with pytest.raises(ValueError, match=r"stopping level must be an integer in \[2, 4\]"):
        rrb.RRBSolver((c, e, n), level=9)
    with pytest.raises(ValueError, match="rhs has shape"):
        rrb.RRBSolver((c, e, n)).solve(np.zeros((7, 8)))
    with pytest.raises(ValueError, match="non-positive pivot|not positive definite"):
        rrb.RRBSolver((c, 3 * e, 3 * n))  # indefinite: 4 - 3*... < 0 modes
    with pytest.raises(ValueError, match="unknown lumping"):
        rrb.RRBSolver((c, e, n), lumping="corner")
    with pytest.raises(ValueError, match="unknown factor precision"):
        rrb.RRBSolver((c, e, n), factors="int8")
