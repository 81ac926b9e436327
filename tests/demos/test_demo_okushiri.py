"""demos/geoclaw/okushiri.py: the Monai valley tank against the measured gauges.

Pinned values of a reduced run (finest cells 0.112 m instead of 0.014, three levels,
to 22.5 s): ``tests/regression/okushiri.json``; regenerate with
``FORESTPY_REGEN=1 pytest tests/demos/test_demo_okushiri.py`` after an intended change.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from testsupport import REGRESSION as REGRESSION_DIR
from testsupport import load_demo

from forestpy.options import OptionError

REGRESSION = REGRESSION_DIR / "okushiri.json"
REGEN = os.environ.get("FORESTPY_REGEN") == "1"
REDUCED = dict(dx_finest=0.112, mx=4, max_level=2)


@pytest.fixture(scope="module")
def okushiri():
    return load_demo("geoclaw/okushiri")


@pytest.fixture(scope="module")
def reduced_run(okushiri):
    return okushiri.setup(**REDUCED).run()


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


def test_reduced_run_regression(okushiri, reduced_run, tmp_path):
    """A coarse run to 22.5 s (finest 0.112 m): the gauges follow the measurement
    (RMS below 8 mm, peaks within 5 mm and 0.8 s; the full 0.014 m run: docs/okushiri.md),
    the report writes the CSV, and gauge errors, runup, mass and AMR counts are pinned."""
    sim = reduced_run
    rep = okushiri.report(sim, tmp_path, plot=False)
    assert sim.t == pytest.approx(22.5)
    rows = (tmp_path / "gauges.csv").read_text().splitlines()
    assert rows[0] == "t,ch5_model,ch5_measured,ch7_model,ch7_measured,ch9_model,ch9_measured"
    assert len(rows) == 1 + 451
    for g, e in rep["gauges"].items():
        assert e["rms"] < 0.008, g
        assert abs(e["peak_error"]) < 0.005, g
        assert abs(e["peak_time_error"]) < 0.8, g
    record = {
        "steps": sim.steps,
        "regrids": sim.regrids,
        "patches_per_level": {str(k): v for k, v in sim.patches_per_level().items()},
        "totals_final": sim.totals(),
        "gauges": {g: {k: e[k] for k in ("rms", "peak_error", "peak_time_error")}
                   for g, e in rep["gauges"].items()},
        "runup": rep["runup"],
    }
    if REGEN:
        REGRESSION.write_text(json.dumps(record, indent=2) + "\n")
        pytest.skip(f"regenerated {REGRESSION.name}")
    expected = json.loads(REGRESSION.read_text())
    assert record["steps"] == expected["steps"]
    assert record["regrids"] == expected["regrids"]
    assert record["patches_per_level"] == expected["patches_per_level"]
    for k, v in expected["totals_final"].items():
        assert record["totals_final"][k] == pytest.approx(v, rel=1e-8, abs=1e-10), k
    for g, e in expected["gauges"].items():
        for k, v in e.items():
            assert record["gauges"][g][k] == pytest.approx(v, rel=1e-6, abs=1e-9), (g, k)
    for k, v in expected["runup"].items():
        assert record["runup"][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_report_plot(okushiri, reduced_run, tmp_path):
    pytest.importorskip("pyvista")
    rep = okushiri.report(reduced_run, tmp_path)
    png = Path(rep["png"])
    assert png.stat().st_size > 10_000
