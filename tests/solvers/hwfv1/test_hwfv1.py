"""HWFV1: Haar MRA on the Z-order hierarchy, parallel traversal, FV1 update."""


import numpy as np
import pytest
from forestpy.solvers.hwfv1 import mra
from forestpy.solvers.hwfv1.solver import HWFV1, stoker
from hwfv1_states import beach_state, circular_state, tree_masks
from testsupport import load_demo


def load(name):
    return load_demo(f"hwfv1/{name}")


def hierarchy(a):
    L = int(a.shape[1]).bit_length() - 1
    s = np.zeros((a.shape[0], mra.ntotal(L)))
    s[:, mra.offset(L):] = mra.to_zorder(a)
    d = np.zeros((a.shape[0], 3, mra.offset(L)))
    mra.encode(s, d, L)
    return s, d, L


def test_zorder_round_trip_and_children_contiguous():
    a = np.random.default_rng(1).random((2, 16, 16))
    assert np.array_equal(mra.from_zorder(mra.to_zorder(a)), a)
    for n in range(4):
        for j in range(2**n):
            for i in range(2**n):
                m = int(mra.morton(i, j))
                assert tuple(int(v) for v in mra.demorton(m)) == (i, j)
                kids = sorted(mra.offset(n + 1) + int(mra.morton(2 * i + di, 2 * j + dj))
                              for di in (0, 1) for dj in (0, 1))
                assert kids == list(range(mra.offset(n + 1) + 4 * m, mra.offset(n + 1) + 4 * m + 4))


def test_encode_preserves_mass_and_decode_at_eps0_reproduces_data():
    a = np.random.default_rng(2).normal(size=(3, 32, 32))
    s, d, L = hierarchy(a)
    for n in range(L + 1):  # every level carries the same integral (cell area 4^-n)
        np.testing.assert_allclose(s[:, mra.offset(n):mra.offset(n + 1)].sum(axis=1) / 4**n,
                                   a.sum(axis=(1, 2)) / 4**L, rtol=0, atol=1e-12)
    sig = np.zeros(mra.offset(L), dtype=np.bool_)
    mra.significance(d, np.ones(3), 0.0, L, np.arange(3), sig)
    assert sig.all()
    rebuilt = s.copy()
    rebuilt[:, 1:] = np.nan  # only the root and the details may be used
    mra.decode(rebuilt, d, sig, L)
    np.testing.assert_allclose(rebuilt, s, rtol=0, atol=1e-13)
    # dropping a significant detail does change the data (the test can fail)
    sig[0] = False
    mra.decode(rebuilt, d, sig, L)
    assert np.abs(rebuilt[:, mra.offset(L):] - s[:, mra.offset(L):]).max() > 0.1


def test_significance_threshold_scales_with_level():
    a = np.zeros((1, 4, 4))
    a[0, 0, 0] = 1.0  # details 0.25 at level 1 and 1/16 at level 0
    s, d, L = hierarchy(a)
    sig = np.zeros(mra.offset(L), dtype=np.bool_)
    mra.significance(d, np.ones(1), 0.2, L, np.arange(1), sig)  # thresholds 0.05, 0.1
    assert sig[0] and sig[1] and not sig[2:].any()
    mra.significance(d, np.ones(1), 0.3, L, np.arange(1), sig)  # thresholds 0.075, 0.15
    assert not sig[0] and sig[1]


@pytest.mark.parametrize("seed", range(6))
def test_parallel_traversal_matches_recursive_reference(seed):
    rng = np.random.default_rng(seed)
    L = 5
    sig = rng.random(mra.offset(L)) < rng.uniform(0.3, 0.9)
    lev, code = mra.traverse(sig, L)
    rlev, rcode = mra.traverse_recursive(sig, L)
    assert np.array_equal(lev, rlev) and np.array_equal(code, rcode)
    # leaves tile the finest grid exactly once
    assert np.sum(4.0 ** (L - lev)) == 4**L
    pred = np.zeros_like(sig)
    mra.predict(sig, L, pred)
    assert np.all(pred[sig])  # prediction only adds cells
    plev, _ = mra.traverse(pred, L)
    assert plev.size >= lev.size


def test_uniform_flow_under_manning_friction_decays_implicitly():
    n = 8
    h = np.ones((n, n))
    sim = HWFV1(h, 2.0 * h, 0 * h, 0 * h, (0, 8, 0, 8), eps=None, bc="open", n_manning=0.03)
    dt = sim.step()
    expect = 2.0 / (1.0 + dt * sim.g * 0.03**2 * 2.0)
    np.testing.assert_allclose(sim.state()[1], expect, rtol=1e-13)
    np.testing.assert_allclose(sim.state()[0], 1.0, rtol=1e-14)


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_lake_at_rest_over_humps_with_wet_dry(eps):
    humps = load("humps")
    res = humps.main(L=5, eps=eps, t_final=3.0)
    assert res["max_discharge"] < 1e-10
    if eps is not None:
        assert res["leaves"] < 4**5


def test_adaptive_at_eps0_equals_uniform_and_converges_as_eps_shrinks():
    dam = load("dam_break_2d")
    ref = dam.setup(L=5, eps=None).run(1.0).state()[0]
    exact = dam.setup(L=5, eps=0.0).run(1.0).state()[0]
    assert np.array_equal(ref, exact)
    errs = [np.abs(dam.setup(L=5, eps=e).run(1.0).state()[0] - ref).max()
            for e in (1e-1, 1e-3, 1e-5)]
    assert errs[2] <= errs[1] <= errs[0] and errs[2] < 1e-4


def test_pseudo_2d_dam_break_first_order_against_stoker():
    dam = load("dam_break_2d")
    errs = [dam.main(L=L, t_final=1.0)["l1_error_h"] for L in (5, 6)]
    assert errs[1] < 0.12 and 1.3 < errs[0] / errs[1] < 2.6
    h, u = stoker(np.array([0.0, 9.0, 30.0]), 1.0, 6.0, 2.0, 10.0)
    assert h[0] == 6.0 and 2.0 < h[1] < 6.0 and h[2] == 2.0


def test_circular_dam_break_conserves_volume_with_walls():
    circ = load("circular_dam")
    sim = circ.setup(L=5, eps=None)
    v0 = sim.state()[0].sum()
    sim.run(1.0)
    assert sim.state()[0].sum() == pytest.approx(v0, rel=1e-13)
    h = sim.state()[0]
    np.testing.assert_allclose(h, h.T, atol=1e-12)  # symmetric under x <-> y


def test_bad_input_is_rejected():
    z = np.zeros((4, 4))
    with pytest.raises(ValueError, match="shape"):
        HWFV1(np.zeros((4, 5)), np.zeros((4, 5)), np.zeros((4, 5)), np.zeros((4, 5)), (0, 1, 0, 1))
    with pytest.raises(ValueError, match="non-negative"):
        HWFV1(z - 1, z, z, z, (0, 1, 0, 1))
    with pytest.raises(ValueError, match="bc"):
        HWFV1(z + 1, z, z, z, (0, 1, 0, 1), bc="periodic")
    with pytest.raises(ValueError, match="eps"):
        HWFV1(z + 1, z, z, z, (0, 1, 0, 1), eps=-1.0)


def test_inflow_boundary_keeps_lake_at_rest_and_generates_the_incident_state():
    oku = load("okushiri")
    z = oku.bed(4)  # the tank's bed padded with dry ground, 16 x 16 cells
    h = np.maximum(0.0, -z)
    zero = np.zeros_like(h)
    ext = (0.0, 7.168, 0.0, 7.168)
    for eps in (None, 1e-3):
        sim = HWFV1(h, zero, zero, z, ext, eps=eps, bc=("inflow", "wall", "wall", "wall"),
                    n_manning=0.01, inflow=lambda t: 0.0).run(5.0)
        assert max(np.abs(sim.state()[1]).max(), np.abs(sim.state()[2]).max()) < 1e-12
    # flat channel, still depth 1 m: a constant incident rise of 1 cm enters with the
    # simple-wave state (h0 + a, 2 (c_in - c0)) behind its front
    n = 32
    one = np.ones((n, n))
    sim = HWFV1(one, 0 * one, 0 * one, -one, (0.0, 32.0, 0.0, 32.0), eps=None,
                bc=("inflow", "open", "wall", "wall"), inflow=lambda t: 0.01).run(3.0)
    h, qx = sim.state()[0], sim.state()[1]
    c0, cin = np.sqrt(sim.g), np.sqrt(sim.g * 1.01)
    np.testing.assert_allclose(h[:, :5], 1.01, atol=3e-4)
    np.testing.assert_allclose(qx[:, :5], 1.01 * 2 * (cin - c0), rtol=0.05)
    assert np.abs(h[:, 20:] - 1.0).max() < 1e-6  # the front is near x = c0 t = 9.4 m
    with pytest.raises(ValueError, match="inflow"):
        HWFV1(one, 0 * one, 0 * one, -one, (0, 1, 0, 1), bc=("wall", "inflow", "wall", "wall"))
    with pytest.raises(ValueError, match="inflow"):
        HWFV1(one, 0 * one, 0 * one, -one, (0, 1, 0, 1), bc=("inflow", "wall", "wall", "wall"))


def test_okushiri_coarse_level_against_measured_gauges():
    """L = 5 (0.224 m cells, 7 per gauge spacing): the incident wave enters, reaches the
    gauges and peaks there within 1 cm and 1.5 s of the measurement."""
    res = load("okushiri").main(L=5)
    assert res["t"] == 22.5 and res["leaves"] < 4**5
    for g, r in res["gauges"].items():
        assert r["peak_model"] > 0.025, g  # a wave arrived (measured peaks 3.7-4.5 cm)
        assert abs(r["peak_error"]) < 0.01 and abs(r["peak_time_error"]) < 1.5, (g, r)
        assert r["rms"] < 0.008, (g, r)


@pytest.mark.parametrize("case, n, eps, t_final, sparse", [
    ("circular", 64, 1e-3, 1.0, True),  # wet, flat bed: every step after the first O(nodes)
    ("hump", 32, 1e-2, 1.5, True),      # wet/dry leaves with flat projections
    ("hump", 64, 5e-2, 1.5, False),     # clipped projections: full-finest fallback
    ("hump", 32, 0.0, 0.5, True),       # eps = 0: full tree, equals uniform
])
def test_tree_node_cpu_step_equals_the_full_finest_algorithm(case, n, eps, t_final, sparse):
    """``HWFV1Tree`` keeps coefficients only for the nodes of the tree (O(nodes) per
    step); ``HWFV1`` encodes all 4^L finest cells every step: same trees every step and
    the same states to round-off."""
    from forestpy.solvers.hwfv1.solver import HWFV1Tree

    h, z, ext = circular_state(n) if case == "circular" else beach_state(n)
    zero = np.zeros_like(h)
    kw = dict(extent=ext, eps=eps, bc="wall", n_manning=0.02)
    ref = HWFV1(h, zero, zero, z, **kw).run(t_final)
    tree = HWFV1Tree(h, zero, zero, z, **kw).run(t_final)
    assert tree.steps == ref.steps > 3
    assert [k for _, k in tree.leaf_history] == [k for _, k in ref.leaf_history]
    assert tree.full_steps >= 1 and tree.sparse_steps + tree.full_steps == tree.steps
    assert (tree.sparse_steps == tree.steps - 1) if sparse else tree.full_steps > 1
    for a, b in zip(ref.state(), tree.state()):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)


def test_tree_node_cpu_step_never_reads_nodes_outside_the_tree_and_keeps_inflow():
    """Okushiri at L = 5 (inflow boundary, wet/dry coast): poison every coefficient and
    leaf value outside the current tree after a few steps; the run still equals the
    full-finest algorithm."""
    from forestpy.solvers.hwfv1.solver import HWFV1Tree

    oku = load("okushiri")
    ref = oku.setup(L=5)
    tree = HWFV1Tree(*ref.state(), ref.extent, eps=ref.eps, bc=("inflow", "wall", "wall", "wall"),
                     n_manning=ref.n_manning, g=ref.g, cfl=ref.cfl, inflow=ref.inflow)
    ref.run(4.0)
    tree.run(4.0)
    L = tree.L
    sig = tree.sigs[0]
    in_tree, leaf = tree_masks(sig, L)
    assert 0 < leaf.sum() == tree.nleaves < 4**L
    tree.s[:3, ~in_tree] = np.nan
    tree.newv[:, ~leaf] = np.nan
    ref.run(8.0)
    tree.run(8.0)
    assert tree.steps == ref.steps and tree.full_steps == 1
    assert [k for _, k in tree.leaf_history] == [k for _, k in ref.leaf_history]
    for a, b in zip(ref.state(), tree.state()):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)


def test_steps_reported_to_an_open_progress_scope():
    # forestpy run shows progress for HWFV1 demos: every step reaches the display
    import io

    from forestpy.callbacks import Progress, progress_scope

    stream = io.StringIO()
    with progress_scope(Progress(stream, every=0.5)):
        humps = load("humps")
        humps.main(L=5, eps=None, t_final=0.5)
    lines = stream.getvalue().splitlines()
    assert lines and lines[-1].startswith("100%  t=0.5/0.5") and "cells/s" in lines[-1]


def test_frames_for_paraview(tmp_path):
    # forestpy run --vtk ... of an HWFV1 demo: the finest grid's frames, with times
    pytest.importorskip("vtkmodules")
    from vtkmodules.vtkIOXML import vtkXMLMultiBlockDataReader

    from forestpy.callbacks import progress_scope
    from forestpy.io.vtk import GridOutput, read_pvd

    frames = GridOutput(tmp_path, interval=0.25)
    with progress_scope(frames):
        load("humps").main(L=5, eps=None, t_final=0.5)
    entries = read_pvd(tmp_path / "frame.pvd")
    times = [t for t, _ in entries]
    assert times[0] == 0.0 and times[-1] == pytest.approx(0.5) and len(times) == 3
    assert 0.25 <= times[1] < 0.5  # the first step at or after 0.25 (no landing)
    reader = vtkXMLMultiBlockDataReader()
    reader.SetFileName(str(tmp_path / entries[-1][1]))
    reader.Update()
    grid = reader.GetOutput().GetBlock(0).GetBlock(0)
    assert grid.GetNumberOfCells() == 32 * 32
    names = [grid.GetCellData().GetArrayName(k)
             for k in range(grid.GetCellData().GetNumberOfArrays())]
    assert names == ["depth", "qx", "qy", "bed", "surface", "speed"]


def test_frames_leave_the_solution_unchanged(tmp_path):
    # a frame reads the tree's finest values (state()): the run must not notice
    pytest.importorskip("vtkmodules")
    from forestpy.callbacks import progress_scope
    from forestpy.io.vtk import GridOutput

    dam = load("circular_dam")
    plain = dam.setup(L=6, eps=1e-3).run(1.0)
    with progress_scope(GridOutput(tmp_path, every_steps=1)):
        framed = dam.setup(L=6, eps=1e-3).run(1.0)
    assert framed.steps == plain.steps and len(list(tmp_path.glob("*.vtm"))) > plain.steps
    for a, b in zip(plain.state(), framed.state()):
        np.testing.assert_array_equal(a, b)
