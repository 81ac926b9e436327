"""demos/geoclaw/okushiri.py: the Monai valley tank against the measured gauges.

A reduced run (finest cells 0.112 m instead of 0.014, three levels, to 22.5 s:
``okushiri_reduced`` in tests/demos/conftest.py); its pinned values
(``tests/regression/okushiri.json``) are checked by test_regression.py.
"""

from pathlib import Path

import numpy as np
import pytest

from forestpy.options import OptionError


def test_bathymetry_is_node_registered_over_the_tank(okushiri):
    """393 x 244 survey points span the 5.488 m x 3.402 m tank exactly; the first column
    is the 13.5 cm deep wavemaker side x = 0.  The average over the first 0.014 m cell
    is the bilinear integral, the mean of its four corner points (it would be the
    single value z[0, 0] if the grid were cell-registered)."""
    topo = okushiri.bathymetry()
    assert topo.extent == pytest.approx((0.0, 5.488, 0.0, 3.402), abs=1e-12)
    assert topo.z[:, 0] == pytest.approx(-0.13535)
    domain, cells = okushiri.layout(0.014, 16, 2)
    stack = okushiri.topography(domain)
    avg = stack.cell_averages(0.0, 0.014, 0.0, 0.014)
    assert avg == pytest.approx(topo.z[:2, :2].mean(), rel=1e-13)
    assert avg != pytest.approx(topo.z[0, 0], rel=1e-6)
    # beyond the tank: the dry wall ground; inside: the survey
    assert stack.cell_averages(1.0, 1.014, 3.402, 3.416) == pytest.approx(okushiri.WALL_TOP)
    assert stack.cell_averages(5.488, 5.502, 1.0, 1.014) == pytest.approx(okushiri.WALL_TOP)
    assert stack(4.521, 1.196) == pytest.approx(float(topo(4.521, 1.196)))


def test_layout_has_finest_cells_of_the_survey_spacing(okushiri):
    for dx, mx, level in ((0.014, 16, 2), (0.014, 8, 3), (0.056, 8, 1)):
        domain, (nx, ny) = okushiri.layout(dx, mx, level)
        (x0, y0), (x1, y1) = domain.lower, domain.upper
        assert (x0, y0) == (0.0, 0.0)
        assert (x1 - x0) / nx == pytest.approx(dx) and (y1 - y0) / ny == pytest.approx(dx)
        assert x1 >= okushiri.TANK[0] and y1 >= okushiri.TANK[1]
        side = dx * mx * 2**level  # as few trees as cover the tank
        assert x1 - side < okushiri.TANK[0] and y1 - side < okushiri.TANK[1]


def test_tank_at_rest_stays_at_rest(okushiri):
    """Without the incident wave: over the survey, the island, the dry beach and the
    raised ground beyond the tank, on three levels, the still water does not move."""
    sim = okushiri.setup(dx_finest=0.056, mx=8, max_level=2, incident=False,
                         gauges=False, t_final=1.0).run()
    b = sim.mbc
    q = sim.q[:, :, b:-b, b:-b]
    bed = sim.aux[:, 0, b:-b, b:-b]
    assert sim.steps > 5 and len(sim.patches_per_level()) == 3
    assert np.abs(q[:, 1:]).max() < 1e-12
    wet = q[:, 0] > 0
    assert np.abs(q[:, 0] + bed)[wet].max() < 1e-12
    assert (q[:, 0][bed > 0.0] == 0.0).all()


def test_compare_measures_shifts_and_peaks(okushiri):
    t = np.arange(0.0, 22.5001, 0.05)
    meas = 0.03 * np.exp(-((t - 17.0) / 0.6) ** 2)
    tm = np.arange(0.0, 22.5001, 0.01)
    model = 0.8 * 0.03 * np.exp(-((tm - 17.3) / 0.6) ** 2)
    c = okushiri.compare(tm, model, t, meas)
    assert c["peak_time_error"] == pytest.approx(0.3, abs=1e-9)
    assert c["peak_error"] == pytest.approx(-0.006, abs=1e-9)
    assert c["peak_time_measured"] == pytest.approx(17.0)
    same = okushiri.compare(t, meas, t, meas)
    assert same["rms"] == 0.0 and same["peak_error"] == 0.0
    shift, rms = okushiri.best_shift(tm, 0.03 * np.exp(-((tm - 17.3) / 0.6) ** 2), t, meas)
    assert shift == pytest.approx(0.3, abs=1e-9) and rms < 1e-4
    with pytest.raises(ValueError, match="no model or measured samples"):
        okushiri.compare(tm[:10], model[:10], t, meas)


def test_bad_options(okushiri):
    with pytest.raises(OptionError):
        okushiri.setup(dx_finest=-1.0)
    with pytest.raises(KeyError, match="bogus"):
        okushiri.setup(bogus=1)
    with pytest.raises(ValueError, match="multiple of 4"):
        okushiri.setup(mx=6)


def test_reduced_run_follows_the_gauges(okushiri_report):
    """A coarse run to 22.5 s (finest 0.112 m): the gauges follow the measurement
    (RMS below 8 mm, peaks within 5 mm and 0.8 s; the full 0.014 m run: docs/okushiri.md)
    and the report writes the CSV (gauge errors, runup, mass and AMR counts are pinned:
    test_regression.py)."""
    sim, rep, out = okushiri_report
    assert sim.t == pytest.approx(22.5)
    rows = (out / "gauges.csv").read_text().splitlines()
    assert rows[0] == "t,ch5_model,ch5_measured,ch7_model,ch7_measured,ch9_model,ch9_measured"
    assert len(rows) == 1 + 451
    for g, e in rep["gauges"].items():
        assert e["rms"] < 0.008, g
        assert abs(e["peak_error"]) < 0.005, g
        assert abs(e["peak_time_error"]) < 0.8, g
    # the gauge points and the valley's fgmax for ParaView, in the frames' coordinates
    assert {"gauges.vtp", "fgmax.npz", "fgmax.vtp"} <= set(rep["files"])
    assert all((out / f).is_file() for f in rep["files"])
    assert "wave tank metres" in rep["coordinates"]


def test_report_plot(okushiri, okushiri_reduced, tmp_path):
    pytest.importorskip("pyvista")
    rep = okushiri.report(okushiri_reduced, tmp_path)
    png = Path(rep["png"])
    assert png.stat().st_size > 10_000
