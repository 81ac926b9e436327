"""RRB-PCG GPU kernels agree with the CPU (in Numba's CUDA simulator without a GPU)."""

import numpy as np
import pytest
from forestpy.solvers import rrb


def _stencil(nx, ny, seed=0):
    rng = np.random.default_rng(seed)
    kx = rng.uniform(0.5, 2.0, (ny, nx))
    ky = rng.uniform(0.5, 2.0, (ny, nx))
    kx[:, -1] = 0.0
    ky[-1, :] = 0.0
    c = 0.2 + kx + ky
    c[:, 1:] += kx[:, :-1]
    c[1:, :] += ky[:-1, :]
    return c, -kx, -ky


# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
@pytest.mark.parametrize("nx,ny,level", [(9, 7, 3)])
def test_gpu_matches_cpu(nx, ny, level):
    st = _stencil(nx, ny)
    b = np.random.default_rng(1).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=level)
    gpu = rrb.RRBSolver(st, level=level, backend="gpu")
    xp = gpu.backend.xp
    # the preconditioner alone
    assert np.allclose(gpu.precondition(b), cpu.precondition(b), rtol=1e-12, atol=1e-13)
    xc, ic = cpu.solve(b, tol=1e-10)
    xg, ig = gpu.solve(xp.asarray(b), tol=1e-10)
    xg = gpu.backend.to_host(xg)
    assert ig["converged"] and ig["iterations"] == ic["iterations"]
    assert np.allclose(ig["history"], ic["history"], rtol=1e-8)
    assert np.abs(xg - xc).max() < 1e-11 * np.abs(xc).max()
    # warm start path
    xw, iw = gpu.solve(xp.asarray(b), x0=xp.asarray(xc), tol=1e-8)
    assert iw["iterations"] <= 1


# k = 3: chunks end before, at and after the stopping iteration (k = 1 is the old path,
# covered by test_gpu_matches_cpu); one k keeps the simulator time down (~35 s per k)
# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
@pytest.mark.parametrize("k", [3])
def test_gpu_check_every_k_iterations(k):
    """Checking convergence on the device every k iterations (iterations past the
    stopping point are gated no-ops) gives the CPU's count, history and iterate."""
    nx, ny = 33, 21  # 6 levels, stop at 5: several device levels
    st = _stencil(nx, ny, seed=3)
    b = np.random.default_rng(4).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=5)
    gpu = rrb.RRBSolver(st, level=5, backend="gpu")
    gpu._gpu.check_every = k
    xp = gpu.backend.xp
    xc, ic = cpu.solve(b, tol=1e-9)
    xg, ig = gpu.solve(xp.asarray(b), tol=1e-9)
    xg = gpu.backend.to_host(xg)
    assert ic["iterations"] > 3
    assert ig["converged"] and ig["iterations"] == ic["iterations"]
    assert int(gpu._gpu.st[1]) == ic["iterations"]  # counted on the device
    assert np.allclose(ig["history"], ic["history"], rtol=1e-10)
    assert np.abs(xg - xc).max() < 1e-12 * np.abs(xc).max()
    # stopped by maxiter inside a chunk: the iterate after exactly maxiter iterations
    xc2, ic2 = cpu.solve(b, tol=1e-14, maxiter=2)
    xg2, ig2 = gpu.solve(xp.asarray(b), tol=1e-14, maxiter=2)
    assert not ig2["converged"] and ig2["iterations"] == ic2["iterations"] == 2
    assert np.abs(gpu.backend.to_host(xg2) - xc2).max() < 1e-12 * np.abs(xc2).max()


@pytest.mark.parametrize("level", [2, 3, 5])
def test_every_stopping_level_matches_cpu(level):
    """Any stopping level: the levels above it level by level, the last one by the
    dense kernel over the whole device (a block per row; level 2: 216 columns, so the
    threads run the four-load rounds and the rest; level 5: 8); the preconditioner
    equals the CPU's."""
    nx, ny = 33, 21  # levels 17 x 11, 9 x 6, 5 x 3, 3 x 2
    st = _stencil(nx, ny, seed=13)
    b = np.random.default_rng(14).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=level)
    gpu = rrb.RRBSolver(st, level=level, backend="gpu")
    assert gpu._gpu.Minv.shape == cpu._lv["Minv"].shape
    assert np.allclose(gpu.precondition(b), cpu.precondition(b), rtol=1e-12, atol=1e-13)


# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
@pytest.mark.parametrize("nx,ny", [(2, 33), (33, 2), (1, 17)])
def test_thin_grids_match_cpu(nx, ny):
    """Grids one or two cells wide, every level down to the last: each level's quarter
    rectangle is one node wide (or high), so the branch-free kernels load every
    neighbour past that edge at the node itself before zeroing it; the preconditioner
    and a solve equal the CPU's."""
    levels = 1 + int(np.log2(max(nx, ny)))
    st = _stencil(nx, ny, seed=5)
    b = np.random.default_rng(6).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=levels)
    gpu = rrb.RRBSolver(st, level=levels, backend="gpu")
    assert gpu.levels == levels
    assert np.allclose(gpu.precondition(b), cpu.precondition(b), rtol=1e-12, atol=1e-13)
    xc, ic = cpu.solve(b, tol=1e-10)
    xg, ig = gpu.solve(gpu.backend.xp.asarray(b), tol=1e-10)
    assert ig["iterations"] == ic["iterations"]
    assert np.abs(gpu.backend.to_host(xg) - xc).max() < 1e-11 * np.abs(xc).max()


# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
def test_first_chunk_follows_the_last_solve():
    """The first graph of iterations is as long as the last solve took (no gated no-op
    iterations when solves are alike); whatever its length, the iterate, count and
    history are the CPU's."""
    nx, ny = 33, 21
    st = _stencil(nx, ny, seed=15)
    b = np.random.default_rng(16).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=5)
    gpu = rrb.RRBSolver(st, level=5, backend="gpu")
    xp = gpu.backend.xp
    xc, ic = cpu.solve(b, tol=1e-6)
    assert ic["iterations"] > 2
    gpu.solve(xp.asarray(b), tol=1e-6, maxiter=2)
    assert gpu._gpu._last_its == 2
    chunks, finishes = [], []
    real, real_finish = gpu._gpu._chunk, gpu._gpu._finish
    gpu._gpu._chunk = lambda parity, nit, first=False, final=False: (
        chunks.append(nit), real(parity, nit, first, final))
    gpu._gpu._finish = lambda out: (finishes.append(len(chunks)), real_finish(out))
    resumed, real_resume = [], gpu._gpu._resume
    gpu._gpu._resume = lambda parity: (resumed.append(len(chunks)), real_resume(parity))
    xg, ig = gpu.solve(xp.asarray(b), tol=1e-6)
    assert chunks[0] == 2 and sum(chunks) >= ic["iterations"]
    # its last iteration, predicted to be the solve's, skipped the back-substitution,
    # done afterwards by ``_resume`` before the next chunk
    assert resumed[0] == 1
    # the first chunk was predicted to end the solve: a speculative finish ran after it
    # and was discarded; the returned solution is the final one
    assert finishes[0] == 1 and finishes[-1] == len(chunks) > 1
    assert ig["iterations"] == ic["iterations"] == gpu._gpu._last_its
    assert np.allclose(ig["history"], ic["history"], rtol=1e-10)
    assert np.abs(gpu.backend.to_host(xg) - xc).max() < 1e-12 * np.abs(xc).max()


def test_default_stopping_level_per_backend():
    """The default level: the first with at most COARSE_NODES nodes (64 on the CPU,
    6400 on the GPU, where a dense solve is cheaper than a level's launches)."""
    st = rrb.stencil_poisson(127, 127)  # levels 127^2, 64^2 = 4096, 32^2, 16^2, 8^2 = 64
    assert rrb.RRBSolver(st).levels == 5
    assert rrb.RRBSolver(st, backend="gpu").levels == 2
    assert rrb.RRBSolver(st, level=3, backend="gpu").levels == 3


# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
def test_non_finite_input_is_refused_and_the_solver_stays_usable():
    """NaN or inf in rhs or x0: one clear error, on the CPU and on the GPU (flagged by
    the conversion kernel, read with the first chunk's state); the GPU's level buffers
    never see it, so the next solve is the CPU's."""
    nx, ny = 9, 7
    st = _stencil(nx, ny, seed=8)
    b = np.random.default_rng(9).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=3)
    gpu = rrb.RRBSolver(st, level=3, backend="gpu")
    # one bad value at each kind of node (b2, b1, r2; r1 in the last corner; the
    # GPU reads rhs and x0 in natural order, each thread four of their values)
    for j, i in ((3, 4), (2, 5), (5, 7), (ny - 1, nx - 1)):
        bad = b.copy()
        bad[j, i] = np.nan
        x0 = b.copy()
        x0[j, i] = -np.inf
        for s in (cpu, gpu):
            xp = s.backend.xp
            with pytest.raises(ValueError, match="rhs has non-finite"):
                s.solve(xp.asarray(bad))
            with pytest.raises(ValueError, match="non-finite"):
                s.solve(xp.asarray(b), x0=xp.asarray(x0))
    xc, ic = cpu.solve(b, tol=1e-10)
    xg, ig = gpu.solve(gpu.backend.xp.asarray(b), tol=1e-10)
    assert ig["iterations"] == ic["iterations"]
    assert np.abs(gpu.backend.to_host(xg) - xc).max() < 1e-11 * np.abs(xc).max()


@pytest.mark.parametrize("rows,blocks", [(None, None), (1, 2), (3, None)])
def test_column_walking_matvec_matches_the_pointwise_body(rows, blocks):
    """The GPU Schur matvec (each thread walks rows of one column, carrying the
    neighbouring rows in registers) gives the CPU body's ``S x`` and ``x . S x`` on
    a grid of two column tiles (40 quarter columns, the last tile partial) with
    row segments of 1 and 3 rows (14 rows: a short last segment) and as sized for
    the device; with 2 blocks (8 segments of 1 row) the threads stride over rows."""
    from forestpy.solvers.rrb import kernels as K

    nx, ny = 79, 27  # quarters 14 x 40
    gpu = rrb.RRBSolver(_stencil(nx, ny, seed=11), level=3, backend="gpu")
    g = gpu._gpu
    g.mv_rows = rows
    if blocks:
        g._wave["matvec_dot"] = blocks
    S = gpu.backend.to_host(g.S9)
    x = np.random.default_rng(12).standard_normal((2, g.h, g.w))
    y_cpu = np.zeros_like(x)
    d_cpu = K.schur_matvec_dot(S, x, y_cpu)
    y = g.xp.zeros_like(g.xp.asarray(x))
    g.sc[...] = 0.0
    g.matvec_dot(g.xp.asarray(x), y, slot=5)
    # the same terms in the same order (a real GPU may fuse multiply-adds)
    assert np.allclose(gpu.backend.to_host(y), y_cpu, rtol=1e-14, atol=1e-14)
    assert abs(float(g.sc[5]) - d_cpu) < 1e-12 * abs(d_cpu)


def test_level1_back_substitution_strides_with_wrapping_rows():
    """The level-1 r2 back-substitution + r.z (a grid-stride loop whose quarter index
    ``(J, I)`` steps by the stride, wrapping rows without a division) on 2 blocks for
    14 x 40 quarter nodes, so that the stride (512) wraps rows: the CPU body's ``o``
    and ``r . o``."""
    from forestpy.solvers.rrb import kernels as K

    nx, ny = 79, 27  # quarters 14 x 40
    gpu = rrb.RRBSolver(_stencil(nx, ny, seed=13), level=3, backend="gpu")
    g = gpu._gpu
    g._wave["r2_backward_dot"] = 2
    rng = np.random.default_rng(14)
    P = gpu.backend.to_host(g.P[0])
    r = rng.standard_normal((2, g.h, g.w))
    X = rng.standard_normal(g.W[1].shape)
    o_cpu = np.zeros_like(r)
    d_cpu = sum(K.body_r2_backward(P, r, X, o_cpu, J, I, g.h, g.w)
                for J in range(g.h) for I in range(g.w))
    o = g.xp.zeros_like(g.xp.asarray(r))
    g.sc[...] = 0.0
    g.level1_backward(g.xp.asarray(r), g.xp.asarray(X), o, g.v(g.nogate), slot=5)
    assert np.allclose(gpu.backend.to_host(o), o_cpu, rtol=1e-14, atol=1e-14)
    assert abs(float(g.sc[5]) - d_cpu) < 1e-12 * abs(d_cpu)


def test_next_chunk_is_a_power_of_two_not_past_the_prediction():
    from forestpy.solvers.rrb.gpu_kernels import _next_chunk

    h = [0.1**i for i in range(3)]  # rate 0.1 per iteration, at 1e-2
    assert _next_chunk(h, 1e-8, 8) == (4, False)  # 6 more predicted
    assert _next_chunk(h, 2e-6, 8) == (4, True)  # 4 more predicted: the last chunk
    assert _next_chunk(h, 5e-3, 8) == (1, True)  # 1 more predicted
    assert _next_chunk(h, 1e-30, 8) == (8, False)
    assert _next_chunk(h[:1], 1e-8, 8) == (8, False)  # no rate yet
    assert _next_chunk(h, 1e-8, 1) == (1, False)


# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
def test_fixed_point_last_level_matches_cpu(monkeypatch):
    """The int16 fixed-point dense inverse (forced here on a small level: 2 x 15 = 30
    red rows, so the int64 words of four entries end in a padded one) gives the CPU's
    preconditioner and solve."""
    import forestpy.solvers.rrb.build as B

    monkeypatch.setattr(B, "DENSE_F64_ROWS", 8)
    nx, ny = 33, 21  # level 3: 9 x 6 nodes, quarters of 3 x 5
    st = _stencil(nx, ny, seed=21)
    b = np.random.default_rng(22).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=3)
    gpu = rrb.RRBSolver(st, level=3, backend="gpu")
    assert cpu._lv["Minv"].dtype == np.int16 and gpu._gpu.fixed
    assert cpu._lv["Minv"].shape[0] % 4 != 0
    assert np.allclose(gpu.precondition(b), cpu.precondition(b), rtol=1e-12, atol=1e-13)
    xc, ic = cpu.solve(b, tol=1e-9)
    xg, ig = gpu.solve(gpu.backend.xp.asarray(b), tol=1e-9)
    assert ig["iterations"] == ic["iterations"]
    assert np.abs(gpu.backend.to_host(xg) - xc).max() < 1e-11 * np.abs(xc).max()


# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
def test_out_receives_the_solution_and_an_input_error_leaves_it_unchanged():
    """``out=`` gets the same bits as a returned x, on the CPU and the GPU, also when it
    is ``x0`` (in-place warm start) and when the same rhs / out come back solve after
    solve (on a real GPU their graphs then read and write them in place: ``_keyed``);
    NaN in rhs raises and leaves ``out`` as it was; a wrong ``out`` is refused."""
    nx, ny = 9, 7
    st = _stencil(nx, ny, seed=31)
    b = np.random.default_rng(32).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=3)
    gpu = rrb.RRBSolver(st, level=3, backend="gpu")
    xc, _ = cpu.solve(b, tol=1e-8)
    for s in (cpu, gpu):
        xp = s.backend.xp
        rhs = xp.asarray(b.copy())  # set to NaN below
        out = xp.zeros((ny, nx))
        sim = s._gpu is not None and s._gpu.sim
        fresh = s.backend.to_host(s.solve(rhs, tol=1e-8)[0])
        for _ in range(2 if sim else 4):  # copied, then captured in place, then replayed
            x, info = s.solve(rhs, tol=1e-8, out=out)
            assert x is out
            assert np.array_equal(s.backend.to_host(out), fresh)
        assert np.abs(s.backend.to_host(out) - xc).max() < 1e-11 * np.abs(xc).max()
        if s._gpu is not None and not s._gpu.sim:
            assert out.data.ptr in s._gpu._keyed and rhs.data.ptr in s._gpu._keyed
        # warm start in place: x0 is out
        psi = xp.asarray(0.5 * s.backend.to_host(out))
        for i in range(2 if sim else 3):
            y, iw = s.solve(rhs, x0=psi, tol=1e-8, out=psi)
            assert y is psi and iw["converged"] and (i == 0 or iw["iterations"] <= 1)
            assert np.abs(s.backend.to_host(psi) - xc).max() < 1e-6 * np.abs(xc).max()
        # NaN in the (same) rhs: refused, out untouched
        before = s.backend.to_host(out).copy()
        rhs[2, 3] = np.nan
        with pytest.raises(ValueError, match="rhs has non-finite"):
            s.solve(rhs, tol=1e-8, out=out)
        assert np.array_equal(s.backend.to_host(out), before)
        with pytest.raises(ValueError, match="out must be a float64"):
            s.solve(xp.asarray(b), out=xp.zeros((ny, nx + 1)))
        with pytest.raises(ValueError, match="out must be a float64"):
            s.solve(xp.asarray(b), out=np.zeros((ny, nx), dtype=np.float32))


def test_fixed_point_product_decodes_negative_and_extreme_entries():
    """``dense_last_fixed`` (int16 fields of int64 words, decoded without a conversion
    instruction) against NumPy for entries over the whole int16 range -- the inverse
    of the tests' M-matrices has none below zero -- and a padded last word."""
    from forestpy.solvers.rrb.gpu_kernels import (
        DENSE_ROWS,
        FSUM,
        fixed_point_words,
        gpu_kernels,
    )

    rng = np.random.default_rng(5)
    m = 10
    F = rng.integers(-32768, 32768, (m, m)).astype(np.int16)
    F[0, :4] = [-32768, 32767, -1, 0]
    words = fixed_point_words(F)
    assert words.shape == (m, 3)
    d = np.concatenate([rng.uniform(0.5, 2.0, m), np.zeros(4 * 3 - m)])
    X = np.zeros((4, 2, 3))  # the last level's quarters: 2 x 2 x 3 = 12 red slots >= m
    w = rng.standard_normal(X.size)
    # fs = 1: w . X summed into sc[FSUM] (st[0] = 1: done, so no stopping rule after it)
    sc, st, count = np.zeros(8), np.array([1.0] + [0.0] * 7), np.zeros(1, dtype=np.int32)
    gpu_kernels()["dense_last_fixed_sum"][-(-m // DENSE_ROWS), 4](
        words, d, w, X, np.zeros(1), sc, st, np.zeros(4), count, np.zeros(12)
    )
    want = d[:m] * (F.astype(np.float64) @ (d[:m] * w[:m]))
    assert np.allclose(X.reshape(-1)[:m], want, rtol=1e-13, atol=1e-12)
    assert abs(sc[FSUM] - w[:m] @ want) < 1e-12 * np.abs(w[:m] * want).sum()
    assert count[0] == 0  # the last block set it back


@pytest.mark.skipif(
    __import__("numba").config.ENABLE_CUDASIM, reason="programmatic launch: a real GPU only"
)
def test_programmatic_graph_edges_give_the_plain_graphs_solve():
    """On a real GPU the solve's graphs have programmatic kernel edges (every kernel
    waits for its predecessors before touching memory); the solve equals the one with
    plain edges (to the block sums' order)."""
    nx, ny = 257, 193
    st = _stencil(nx, ny, seed=3)
    b = np.random.default_rng(4).standard_normal((ny, nx))
    res = {}
    for pdl in (True, False):
        s = rrb.RRBSolver(st, backend="gpu")
        s._gpu.pdl = pdl
        rhs = s.backend.xp.asarray(b)
        for _ in range(3):  # plain launches, capture, replay
            x, info = s.solve(rhs, tol=1e-10)
        assert info["cuda_graph"] and info["pdl"] is pdl, (info, s._gpu._pdl_error)
        res[pdl] = (s.backend.to_host(x), info)
        # solves predicted to end in their first chunk: one graph for the whole solve
        for _ in range(6):  # the new chunk length: plain, captured; then the whole
            xl, il = s.solve(rhs, tol=1e-3)
        assert any(key[0] == "solve" and g for key, g in s._gpu._graphs.items())
        res[pdl] += (s.backend.to_host(xl), il)
    (x1, i1, xl1, il1), (x0, i0, xl0, il0) = res[True], res[False]
    assert i1["iterations"] == i0["iterations"]
    assert np.allclose(i1["history"], i0["history"], rtol=1e-9)
    assert np.abs(x1 - x0).max() < 1e-12 * np.abs(x0).max()
    cpu_x, cpu_i = rrb.RRBSolver(st, level=s.levels).solve(b, tol=1e-3)
    for xl, il in ((xl1, il1), (xl0, il0)):
        assert il["iterations"] == cpu_i["iterations"] and il["cuda_graph"]
        assert np.abs(xl - cpu_x).max() < 1e-12 * np.abs(cpu_x).max()


def test_forward_sweep_sum_is_r_dot_z():
    """In an iteration predicted to be the last, r.z is summed in the forward sweep
    (y^T D^-1 y: black and r2 pivots of every level and w . D Minv D w of the last),
    so that its back-substitution can be skipped: the same value as r . M^-1 r, on
    several levels of an odd-sized grid (padded quarters)."""
    from forestpy.solvers.rrb.gpu_kernels import FSUM

    nx, ny = 33, 21
    gpu = rrb.RRBSolver(_stencil(nx, ny, seed=17), level=5, backend="gpu")
    g = gpu._gpu
    assert len(g.P) >= 3
    r = g.xp.asarray(np.random.default_rng(18).standard_normal((2, g.h, g.w)))
    z = g.xp.zeros_like(r)
    g.sc[...] = 0.0
    g.st[0] = 1.0  # done: the dense product's last block runs no stopping rule after the sum
    g.precondition(r, z, slot=2)
    g.precondition(r, g.xp.zeros_like(r), final=True)
    rz = float(g.sc[2])
    assert rz > 0 and abs(float(g.sc[FSUM]) - rz) < 1e-13 * rz


# slow: whole solves in the CUDA simulator (~15-40 s each: 256 Python threads per launch)
@pytest.mark.slow
def test_predicted_last_iteration_skips_its_back_substitution():
    """A solve predicted to end in its first chunk (as long as the last solve): its
    last iteration runs only the forward sweep (one level-1 back-substitution fewer
    than a plain solve), with the CPU's count, history and iterate."""
    nx, ny = 33, 21
    st = _stencil(nx, ny, seed=19)
    b = np.random.default_rng(20).standard_normal((ny, nx))
    cpu = rrb.RRBSolver(st, level=5)
    gpu = rrb.RRBSolver(st, level=5, backend="gpu")
    g = gpu._gpu
    xp = gpu.backend.xp
    xc, ic = cpu.solve(b, tol=1e-5)
    kernels, launched = g.k, []

    class Launches:  # a kernel whose launches (kernel[config](...)) are counted
        def __init__(self, name):
            self.name = name

        def __getitem__(self, config):
            launched.append(self.name)
            return kernels[self.name][config]

        def __getattr__(self, attr):  # e.g. ``overloads`` (blocks_per_wave)
            return getattr(kernels[self.name], attr)

    class Counted(dict):
        def __getitem__(self, name):
            return Launches(name)

    g.k = Counted(kernels)
    g.use_graph = False  # plain launches, counted (a real GPU would replay graphs)
    for predicted in (False, True):
        launched.clear()
        xg, ig = gpu.solve(xp.asarray(b), tol=1e-5)
        assert ig["iterations"] == ic["iterations"] == g._last_its
        # the setup and every iteration end with the level-1 back-substitution, but
        # the last iteration of a predicted solve
        backs = ic["iterations"] + 1 - int(predicted)
        assert launched.count("r2_backward_dot") == backs
        assert np.allclose(ig["history"], ic["history"], rtol=1e-10)
        assert np.abs(gpu.backend.to_host(xg) - xc).max() < 1e-12 * np.abs(xc).max()
