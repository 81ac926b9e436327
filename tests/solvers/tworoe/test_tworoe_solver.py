"""solvers/tworoe/solver.py: conservation, well-balancing, symmetry, orientation
independence, determinism, the internal seiche against linear theory, the channel dam
break against a fine 1D solution, the GPU kernels (CUDA simulator) against the CPU, and
the errors of bad input."""

import math

import numba
import numpy as np
import pytest
from forestpy.solvers.tworoe import DepthError, TwoLayerSolver, disc_in_square, strip
from forestpy.solvers.tworoe.reference import solve_1d
from testsupport import load_demo

from forestpy.backend import cuda_simulator_enabled

G = 9.81


@pytest.fixture(scope="module")
def dam_mesh():
    return disc_in_square(4016, order="hilbert")


def _dam(mesh, shift=0.0, **kw):
    r = np.hypot(mesh.centroid[:, 0] - shift, mesh.centroid[:, 1])
    h1 = np.where(r > 1.5, 4.0, 0.5)
    kw.setdefault("r", 0.998)
    return TwoLayerSolver(mesh, h1=h1, h2=5.0 - h1, H=5.0, **kw)


@pytest.mark.parametrize("scheme", ["irroe", "ifcp"])
def test_seed_dam_break_conserves_each_layer(dam_mesh, scheme):
    sim = _dam(dam_mesh, scheme=scheme, r=0.9)
    st = sim.run(0.3)
    assert st["t"] == 0.3 and st["steps"] > 30
    assert max(st["mass_rel_change"]) <= 1e-13
    assert np.isfinite(sim.W).all()
    # something happened: the interface moved
    assert np.abs(sim.W[0] - _dam(dam_mesh).W[0]).max() > 0.05


def test_runs_are_deterministic_over_thread_counts(dam_mesh):
    ref = _dam(dam_mesh)
    ref.run(0.05)
    n = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _dam(dam_mesh)
        one.run(0.05)
    finally:
        numba.set_num_threads(n)
    again = _dam(dam_mesh)
    again.run(0.05)
    assert np.array_equal(ref.W, one.W) and np.array_equal(ref.W, again.W)
    assert ref.steps == one.steps


def test_cell_order_changes_round_off_only(dam_mesh):
    plain = disc_in_square(4016, order="none")
    a = _dam(plain, r=0.9)
    b = _dam(plain.reordered("rcm"), r=0.9)
    a.run(0.2)
    b.run(0.2)
    assert a.steps == b.steps
    assert np.abs(a.W[:, b.mesh.cell_order] - b.W).max() < 1e-11


@pytest.mark.parametrize("scheme", ["irroe", "ifcp"])
def test_two_layer_lake_at_rest_over_a_bump(scheme):
    """Surface 0.6, interface 0.5, bottom 0.2 (cos(4 pi r) + 1) for r < 0.2, densities
    0.9 / 1.0, walls: at rest to 1e-13 after 2000 steps.  The circle r = 0.2 is a mesh
    line (the bottom jumps there)."""
    mesh = disc_in_square(1500, half=0.5, radius=0.2, tol=0.05)
    rad = np.hypot(*mesh.centroid.T)
    b = np.where(rad < 0.2, 0.2 * (np.cos(4 * np.pi * rad) + 1.0), 0.0)
    sim = TwoLayerSolver(mesh, h1=0.1, h2=0.5 - b, H=-b, r=0.9, g=G, scheme=scheme)
    n = numba.get_num_threads()
    try:
        numba.set_num_threads(1)  # 6000 small parallel regions: one thread is quicker
        for _ in range(2000):
            sim.step()
    finally:
        numba.set_num_threads(n)
    f = sim.fields()
    assert np.abs(sim.W[[1, 2, 4, 5]]).max() <= 1e-13
    assert np.abs(f["surface"] - 0.6).max() <= 1e-13
    assert np.abs(f["interface"] - 0.5).max() <= 1e-13
    assert sim.t > 0.5


def test_radial_symmetry_of_the_internal_dam_break(dam_mesh):
    demo = load_demo("tworoe/circular_dam")
    sim = _dam(dam_mesh, r=0.8)
    sim.run(0.8)
    spread = demo.radial_spread(dam_mesh, sim.fields()["interface"])
    off = _dam(dam_mesh, shift=0.2, r=0.8)  # the same with the dam off-centre by 0.2
    off.run(0.8)
    spread_off = demo.radial_spread(dam_mesh, off.fields()["interface"])
    assert spread <= 0.04 * 3.5
    assert spread_off >= 2.5 * spread


def _rotated_run(angle):
    m = strip(24, 3, 6.0, 0.75, angle=angle, origin=(1.0, -2.0))
    ca, sa = math.cos(angle), math.sin(angle)
    lx = ca * (m.centroid[:, 0] - 1.0) + sa * (m.centroid[:, 1] + 2.0)
    h2 = np.where(lx < 3.0, 0.6, 0.4) + 0.05 * np.sin(lx)
    h1 = 1.0 - h2
    u = 0.05 * np.cos(lx)  # a flow along the strip in both layers
    q1 = np.stack([h1 * u * ca, h1 * u * sa], 1)
    q2 = np.stack([-h2 * u * ca, -h2 * u * sa], 1)
    sim = TwoLayerSolver(m, h1=h1, h2=h2, H=1.0 + 0.1 * np.cos(lx), q1=q1, q2=q2, r=0.9,
                         bc={1: "wall", 2: "open", 3: "wall"})
    sim.run(1.0)
    W = sim.W.copy()
    # momenta back into the strip's frame
    for k in (1, 4):
        W[k], W[k + 1] = ca * W[k] + sa * W[k + 1], -sa * W[k] + ca * W[k + 1]
    return W, sim.steps


def test_plane_wave_is_independent_of_mesh_orientation():
    """The same strip, mesh and flow rotated by 0, 30 and 45 degrees: identical to
    round-off in the strip's frame (the projected flux is rotation invariant)."""
    ref, steps = _rotated_run(0.0)
    for deg in (30.0, 45.0):
        W, s = _rotated_run(math.radians(deg))
        assert s == steps
        assert np.abs(W - ref).max() <= 1e-12


def test_bad_input_gives_clear_errors(dam_mesh):
    m = strip(4, 2, 4.0, 2.0)
    with pytest.raises(DepthError, match="layer 2 depth -0.1 below h_min .* initially"):
        TwoLayerSolver(m, h1=0.5, h2=-0.1, H=1.0)
    with pytest.raises(ValueError, match="h1 has a non-finite value at cell 0"):
        TwoLayerSolver(m, h1=np.r_[np.nan, np.ones(m.num_cells - 1)], h2=0.5, H=1.0)
    with pytest.raises(ValueError, match=r"r = rho1/rho2 must be in \(0, 1\)"):
        TwoLayerSolver(m, h1=0.5, h2=0.5, H=1.0, r=1.0)
    with pytest.raises(ValueError, match="gamma"):
        TwoLayerSolver(m, h1=0.5, h2=0.5, H=1.0, gamma=1.5)
    with pytest.raises(ValueError, match="scheme must be one of"):
        TwoLayerSolver(m, h1=0.5, h2=0.5, H=1.0, scheme="hll")
    with pytest.raises(ValueError, match=r"tag\(s\) \[3\]"):
        TwoLayerSolver(m, h1=0.5, h2=0.5, H=1.0, bc={1: "wall", 2: "open"})
    with pytest.raises(ValueError, match="one value per cell"):
        TwoLayerSolver(m, h1=np.ones(3), h2=0.5, H=1.0)
    with pytest.raises(ValueError, match="float64 or float32"):
        TwoLayerSolver(m, h1=0.5, h2=0.5, H=1.0, dtype=np.float16)
    with pytest.raises(TypeError, match="TriMesh"):
        TwoLayerSolver("mesh.msh", h1=0.5, h2=0.5, H=1.0)
    # a run that thins a layer below h_min stops with the cell and the time
    sim = _dam(dam_mesh, h_min=0.49999)
    with pytest.raises(DepthError, match=r"layer 1 depth 0.4999.* after step \d+ \(t = "):
        sim.run(0.1)


def _tiny(backend, dtype, scheme="irroe"):
    m = strip(6, 3, 6.0, 3.0, angle=0.2)
    x = m.centroid[:, 0]
    h1 = np.where(x > 3, 0.6, 0.4)
    return TwoLayerSolver(m, h1=h1, h2=1.1 - h1, H=1.0 + 0.05 * np.sin(x), r=0.95,
                          backend=backend, bc={1: "wall", 2: "open", 3: "wall"},
                          dtype=dtype, scheme=scheme, sync_every=4)


def _same(gpu, cpu):
    """Bitwise in FP64 in the simulator (the device code runs as Python doubles); on a
    GPU (fused multiply-adds) and in FP32 (the simulator's math functions are double)
    to round-off."""
    assert gpu.W.dtype == cpu.W.dtype
    if gpu.W.dtype == np.float64 and cuda_simulator_enabled():
        assert np.array_equal(gpu.W, cpu.W)
    else:
        tol = 1e-12 if gpu.W.dtype == np.float64 else 2e-5
        scale = np.abs(cpu.W).max(axis=1, keepdims=True)
        assert np.abs(gpu.W - cpu.W).max() <= tol * scale.max()
        assert (np.abs(gpu.W - cpu.W) <= tol * scale).all()


def test_gpu_kernels_match_cpu():
    cpu = _tiny("cpu", np.float64)
    gpu = _tiny("gpu", np.float64)
    cpu.run(0.3)
    gpu.run(0.3)
    assert gpu.steps == cpu.steps and gpu.t == cpu.t
    _same(gpu, cpu)
    # CUDA graphs need CuPy on a GPU (the simulator launches plainly)
    err = gpu._gpu.graph_error
    assert err is None or "cupy" in err.lower()


@pytest.mark.slow  # compiles the FP32 and IFCP CPU kernels (~10 s)
@pytest.mark.parametrize("scheme,dtype", [("irroe", np.float32), ("ifcp", np.float64),
                                          ("ifcp", np.float32)])
def test_gpu_kernels_match_cpu_other_variants(scheme, dtype):
    cpu = _tiny("cpu", dtype, scheme)
    gpu = _tiny("gpu", dtype, scheme)
    cpu.run(0.3)
    gpu.run(0.3)
    assert gpu.steps == cpu.steps
    _same(gpu, cpu)


@pytest.mark.slow  # compiles the FP32 CPU kernels
def test_fp32_agrees_with_fp64(dam_mesh):
    a = _dam(dam_mesh, r=0.9)
    b = _dam(dam_mesh, r=0.9, dtype=np.float32)
    a.run(0.1)
    b.run(0.1)
    assert b.W.dtype == np.float32
    assert abs(a.steps - b.steps) <= 1
    assert np.abs(b.W[0] - a.W[0]).max() <= 2e-4 * 4.0
    assert max(b.stats()["mass_rel_change"]) <= 1e-5


def _linear_internal_speed(h1, h2, r, g=G):
    """The slower root of the linearised two-layer system at rest."""
    s = h1 + h2
    return math.sqrt(g * (s - math.sqrt(s * s - 4 * (1 - r) * h1 * h2)) / 2)


@pytest.mark.slow  # ~20000 steps
def test_internal_seiche_period_matches_linear_theory():
    L, h1, h2, r = 1.0, 0.5, 0.5, 0.98
    m = strip(100, 1, L, 0.01)
    x = m.centroid[:, 0]
    eta = 1e-3 * np.cos(np.pi * x / L)  # interface raised at x = 0, the surface flat
    sim = TwoLayerSolver(m, h1=h1 - eta, h2=h2 + eta, H=1.0, r=r)
    w = m.area * np.cos(np.pi * x / L)
    period = 2 * L / _linear_internal_speed(h1, h2, r)
    ts, amp = [0.0], [float(w @ (sim.W[3] - 1.0))]
    while sim.t < 2.2 * period:
        sim.step()
        ts.append(sim.t)
        amp.append(float(w @ (sim.W[3] - 1.0)))
    ts, amp = np.array(ts), np.array(amp)
    k = np.flatnonzero(np.sign(amp[1:]) != np.sign(amp[:-1]))
    zeros = ts[k] - amp[k] * (ts[k + 1] - ts[k]) / (amp[k + 1] - amp[k])
    assert len(zeros) >= 4
    measured = 2 * np.mean(np.diff(zeros))
    assert measured == pytest.approx(period, rel=0.01)


def _channel_error(nx, ref_x, ref_h2, t_end):
    m = strip(nx, 3, 10.0, 30.0 / nx)
    x = m.centroid[:, 0]
    h2 = np.where(x < 5.0, 0.6, 0.4)
    sim = TwoLayerSolver(m, h1=1.0 - h2, h2=h2, H=1.0, r=0.98)
    sim.run(t_end)
    col = np.minimum((x / 10.0 * nx).astype(int), nx - 1)
    h2col = np.bincount(col, weights=sim.W[3] * m.area) / np.bincount(col, weights=m.area)
    # the fine solution averaged over each column
    fine = ref_h2.reshape(nx, -1).mean(axis=1)
    return np.abs(h2col - fine).mean(), np.abs(h2col - np.where(
        (np.arange(nx) + 0.5) * 10 / nx < 5, 0.6, 0.4)).mean()


@pytest.mark.slow  # a 2400-cell 1D reference and two channel runs
def test_channel_internal_dam_break_converges_to_a_fine_1d_solution():
    nf = 2400
    xf = (np.arange(nf) + 0.5) * 10.0 / nf
    h2 = np.where(xf < 5.0, 0.6, 0.4)
    t_end = 4.0
    ref = solve_1d(1.0 - h2, h2, np.ones(nf), 10.0, t_end, r=0.98)
    e50, moved50 = _channel_error(50, xf, ref[2], t_end)
    e100, moved100 = _channel_error(100, xf, ref[2], t_end)
    assert moved100 > 0.005  # the waves left the dam
    assert e100 < 0.25 * moved100
    # first order at discontinuities: the error falls about like sqrt(cell size)
    assert e100 < 0.85 * e50
