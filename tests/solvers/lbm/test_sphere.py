"""Flow past a sphere (solvers/lbm/sphere.py, forces.py, output.py): the on-device
momentum exchange against the host sum, symmetry, the Strouhal analysis on signals of
known frequency, the drag correlation, the ParaView output read back, the report; and
(slow) the steady drag at Re = 50 against the Clift-Grace-Weber correlation."""

import numpy as np
import pytest
from forestpy.solvers.lbm.forces import MomentumExchange, strouhal
from forestpy.solvers.lbm.sphere import REFERENCE_RE300, SphereFlow, drag_correlation

SMALL = dict(re=60, diameter=6, size=(4, 2, 2), center=1.5, speed=0.1)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_momentum_exchange_equals_host_sum_every_step(dtype):
    flow = SphereFlow(dtype=dtype, **SMALL)
    assert flow.forces.links > 0
    for _ in range(3):  # after an even step, an odd one, an even one
        flow.run(1)
        np.testing.assert_allclose(flow.force_history[-1], flow.sim.force_on(flow.body),
                                   rtol=1e-12, atol=1e-12)
    assert flow.force_history.shape == (3, 3)
    assert flow.force_history[-1][0] > 0  # drag downstream


def test_symmetric_setup_has_no_lift():
    # sphere on the channel's axis, no transverse start: mirror symmetry in y and z hold
    # in every step, to round-off
    flow = SphereFlow(**{**SMALL, "offset": 0.0, "eps": 0.0, "dtype": "float64"})
    flow.run(6)
    f = flow.force_history
    assert f[:, 0].mean() > 0
    assert np.abs(f[:, 1:]).max() <= 1e-12 * np.abs(f[:, 0]).max()
    # and the asymmetric start gives a lift
    flow = SphereFlow(**{**SMALL, "dtype": "float64"})
    flow.run(6)
    assert np.abs(flow.force_history[:, 1]).max() > 1e-4 * np.abs(flow.force_history[:, 0]).max()


def test_gpu_forces_equal_cpu():
    kw = dict(re=60, diameter=4, size=(3, 1.5, 1.5), center=1.5, speed=0.1, dtype="float32")
    cpu = SphereFlow(backend="cpu", **kw)
    gpu = SphereFlow(backend="gpu", **kw)  # CUDA simulator
    cpu.run(2)
    gpu.run(2)
    np.testing.assert_array_equal(cpu.sim.raw(), gpu.sim.raw())
    np.testing.assert_array_equal(gpu.force_history, cpu.force_history)


def test_strouhal_recovers_known_frequencies():
    rng = np.random.default_rng(2)
    t = np.arange(4000.0)
    for period in (137.0, 401.3):
        f = 1.0 / period
        phase = rng.uniform(0, 2 * np.pi)
        s = 0.3 + 0.05 * np.sin(2 * np.pi * f * t + phase) + 1e-3 * rng.standard_normal(t.size)
        # 2D: the oscillation along a direction at 30 degrees, plus a steady lift
        lift = np.column_stack([0.02 + s * np.cos(0.5), -0.01 + s * np.sin(0.5)])
        r = strouhal(lift, 1.0, diameter=24, speed=0.08)
        st = f * 24 / 0.08
        assert abs(r["St"] / st - 1) < 5e-3
        assert abs(r["St_zero_crossings"] / st - 1) < 2e-2
        assert abs(r["amplitude"] - 0.05) < 5e-3
    with pytest.raises(ValueError, match="at least 8"):
        strouhal(np.zeros(4), 1.0, 1.0, 1.0)


def test_analyse_on_a_synthetic_force_history():
    flow = SphereFlow(**SMALL)  # time unit D / U = 60 steps
    t = np.arange(6000.0)
    scale = flow.coefficient_scale()
    st = 0.137
    osc = np.sin(2 * np.pi * st / flow.time_unit * t)
    flow.force_history = scale * np.column_stack([0.66 + 0.001 * osc, 0.07 + 0.02 * osc,
                                                  0 * t])
    r = flow.analyse(0.5)
    # (means over a window that is not a whole number of periods)
    assert r["CD"] == pytest.approx(0.66, abs=1e-4) and r["CL"] == pytest.approx(0.07, 1e-2)
    assert r["St"] == pytest.approx(st, rel=5e-3) and r["periodic"]
    assert r["CL_amplitude"] == pytest.approx(0.02, rel=0.02)
    # a growing oscillation (the transient) is not the periodic regime
    flow.force_history[:, 1] = scale * (0.07 + 0.02 * np.exp(t / 1500) * osc)
    assert not flow.analyse(0.5)["periodic"]
    flow.force_history = flow.force_history[:10]
    with pytest.raises(ValueError, match="at least 16"):
        flow.analyse()


def test_drag_correlation():
    assert drag_correlation(100) == pytest.approx(1.087, abs=2e-3)
    assert drag_correlation(300) == pytest.approx(REFERENCE_RE300["CD"], rel=0.01)
    # the pieces meet (to the correlation's few per cent) at Re = 20 and 260
    for re in (20, 260):
        assert drag_correlation(re * (1 - 1e-9)) == pytest.approx(
            drag_correlation(re * (1 + 1e-9)), rel=0.03)
    assert drag_correlation(0.05) == pytest.approx(24 / 0.05, rel=0.02)  # Stokes
    with pytest.raises(ValueError, match="0.01 < Re <= 1500"):
        drag_correlation(3000)


def test_sphere_flow_bad_input():
    for kw, msg in ((dict(re=0), "re must be > 0"), (dict(speed=0.5), "speed must be"),
                    (dict(diameter=3), "diameter must be"),
                    (dict(size=(4, 1, 2)), "size must be"), (dict(center=3.5), "center must")):
        with pytest.raises(ValueError, match=msg):
            SphereFlow(**{**SMALL, **kw})
    flow = SphereFlow(**SMALL)
    with pytest.raises(ValueError, match="at least one step"):
        flow.forces.force()
    with pytest.raises(ValueError, match="mask of solid cells"):
        MomentumExchange(flow.sim, ~flow.body)


def test_frames_read_back(tmp_path):
    vtk = pytest.importorskip("vtk")
    from forestpy.solvers.lbm.output import FrameWriter, flow_fields, write_force_csv
    from vtk.util.numpy_support import vtk_to_numpy

    from forestpy.io.vtk import read_pvd

    flow = SphereFlow(**SMALL)
    flow.run(20)
    fields = flow_fields(flow.sim)
    # vorticity of the stored velocity by central differences
    u = flow.sim.velocity()
    np.testing.assert_allclose(fields["velocity"], u, rtol=0, atol=1e-15)
    np.testing.assert_allclose(fields["vorticity"][2],
                               np.gradient(u[1], axis=0) - np.gradient(u[0], axis=1),
                               rtol=0, atol=1e-15)
    level = float(np.percentile(fields["vorticity_magnitude"], 80))
    writer = FrameWriter(tmp_path, slices=[(2, 5), (0, 9)], iso=(level,))
    writer.write(flow.sim, 1.0, fields)
    flow.run(4)
    vtm = writer.write(flow.sim, 2.5)
    assert [t for t, _ in read_pvd(tmp_path / "wake.pvd")] == [1.0, 2.5]
    reader = vtk.vtkXMLMultiBlockDataReader()
    reader.SetFileName(str(vtm))
    reader.Update()
    mb = reader.GetOutput()
    assert mb.GetNumberOfBlocks() == 3
    last = flow_fields(flow.sim)
    z5 = mb.GetBlock(0)
    assert z5.GetDimensions() == (flow.shape[0] + 1, flow.shape[1] + 1, 2)
    speed = vtk_to_numpy(z5.GetCellData().GetArray("speed")).reshape(
        flow.shape[1], flow.shape[0]).T
    np.testing.assert_allclose(speed, last["speed"][:, :, 5], rtol=1e-6, atol=1e-9)
    vort = vtk_to_numpy(mb.GetBlock(1).GetCellData().GetArray("vorticity"))
    assert vort.shape == (flow.shape[1] * flow.shape[2], 3)
    np.testing.assert_allclose(vort[:, 0].reshape(flow.shape[2], flow.shape[1]).T,
                               last["vorticity"][0][9], rtol=1e-6, atol=1e-9)
    iso = mb.GetBlock(2)
    assert iso.GetNumberOfPoints() > 0
    # the surface interpolates |vorticity| = level (linear in the cells)
    pts = vtk_to_numpy(iso.GetPointData().GetArray("vorticity_magnitude"))
    np.testing.assert_allclose(pts, level, rtol=1e-5)
    csv = write_force_csv(tmp_path / "forces.csv", flow.coefficients(), flow.time_unit)
    data = np.loadtxt(csv, delimiter=",", skiprows=1)
    assert data.shape == (24, 5)
    np.testing.assert_allclose(data[:, 2:], flow.coefficients(), rtol=1e-8)
    with pytest.raises(ValueError, match="slice axis"):
        FrameWriter(tmp_path, slices=[(3, 0)])


def test_report_takes_whatever_records_exist():
    from testsupport import load_demo

    demo = load_demo("lbm/sphere")
    empty = demo.report({})
    assert empty["CD"] is None and empty["compression_ratio"] is None
    assert empty["vs_uncompressed"] is None
    a = dict(CD=0.70, St=0.13, CL=0.06)
    r = demo.report({"analysis": a, "re": 300, "compression_ratio": [12.0, 8.0, 9.5],
                     "nmse_density": [1e-8, 3e-7], "uncompressed": dict(CD=0.69, St=0.13)})
    assert r["rel_diff_CD"] == pytest.approx(0.70 / 0.656 - 1)
    assert r["rel_diff_St"] == pytest.approx(0.13 / 0.137 - 1)
    assert r["compression_ratio_min"] == 8.0 and r["nmse_density_max"] == 3e-7
    assert r["vs_uncompressed"]["rel_diff_CD"] == pytest.approx(0.70 / 0.69 - 1)
    assert r["vs_uncompressed"]["rel_diff_St"] == 0.0
    low = demo.report({"analysis": dict(CD=1.6), "re": 50})
    assert low["rel_diff_CD"] == pytest.approx(1.6 / drag_correlation(50) - 1)


@pytest.mark.slow  # 92k lattice updates x 1200 steps: 20-30 s on 2 cores
def test_steady_drag_at_re50_against_the_correlation():
    """Re = 50 (steady, axisymmetric wake): D = 8 cells, channel 6 x 5 x 5 D (periodic
    sides: 3.1 % blockage), inlet 2 D upstream, U = 0.1, TRT (magic 3/16), 15 D/U.  The
    drag coefficient over the last fifth against Clift, Grace & Weber's 1.574: measured
    1.79, +13.8 %.  That excess is the coarse grid and the small channel (the same run
    with a 4 D channel gives +18 %, with 3 D +26 %; with the magic parameter 1/12 +20 %,
    with BGK more: docs/lbm.md), so the tolerance is 15 %, one-sided."""
    flow = SphereFlow(re=50, diameter=8, size=(6, 5, 5), center=2, speed=0.1, collision="trt",
                      magic=3 / 16)
    flow.run(int(15 * flow.time_unit))
    res = flow.analyse(0.2)
    ref = drag_correlation(50)
    assert 0 < res["CD"] / ref - 1 < 0.15
    c = flow.coefficients()[:, 0]
    n = len(c) // 10
    assert abs(c[-n:].mean() / c[-2 * n:-n].mean() - 1) < 0.01  # steady
    # what is left moving is acoustic (measured std 1.9 % of the mean)
    assert res["CL"] < 0.03 and res["CD_std"] < 0.03 * res["CD"]
