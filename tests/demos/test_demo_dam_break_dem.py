"""demos/geoclaw/dam_break_dem.py: a reservoir released over the 5 m Eden DEM.

Coarse versions (20 m finest cells, 240 s): the reservoir set-up, volume balance,
positivity, arrival times increasing down the channel, adaptive versus uniform flooded
area, the fgmax rasters and the picture.  The runs (``dam_runs``) are in
tests/demos/conftest.py; their pinned values (``tests/regression/dam_break_dem.json``)
are checked by test_regression.py.
"""

from pathlib import Path

import numpy as np
import pytest
from forestpy.extensions.geoclaw.rasters import read_esri_ascii, read_geotiff
from testsupport import check_figure, record_figures

from forestpy.options import OptionError


def test_reservoir_is_the_connected_water_body_behind_the_dam(dam):
    topo = dam.terrain()
    level = 28.0
    mask = dam.reservoir_mask(topo, level)
    X, Y = np.meshgrid(topo.x, topo.y)
    assert mask.sum() > 10000  # > 0.25 km^2 of 5 m points
    assert np.all(topo.z[mask] < level) and np.all(Y[mask] < dam.DAM[0][1])
    # closed: no point of the mask has a 4-neighbour that is below the level, south of
    # the dam and outside the mask (the flood fill is complete)
    allowed = (topo.z < level) & (Y < dam.DAM[0][1])
    grown = mask.copy()
    grown[1:] |= mask[:-1]
    grown[:-1] |= mask[1:]
    grown[:, 1:] |= mask[:, :-1]
    grown[:, :-1] |= mask[:, 1:]
    assert not (grown & allowed & ~mask).any()
    # it reaches the dam only between the dam's ends, and neither the west nor the
    # east edge of the window (the valley sides close it)
    row = mask[np.searchsorted(topo.y, dam.DAM[0][1]) - 1]
    xs = topo.x[row]
    assert len(xs) and xs.min() >= dam.DAM[0][0] and xs.max() <= dam.DAM[1][0]
    assert not mask[:, :3].any() and not mask[:, -3:].any()
    # the simulation's initial volume: the cell-averaged bed under the level (20 m
    # cells) against the DEM points (5 m)
    v_dem = float(np.sum(level - topo.z[mask])) * 25.0
    sim = dam.setup(min_level=2, max_level=2, t_final=0.0)
    assert sim.totals_initial["h"] == pytest.approx(v_dem, rel=0.05)
    with pytest.raises(ValueError, match="seed"):
        dam.reservoir_mask(topo, 12.0)


def test_bad_options(dam):
    with pytest.raises(OptionError, match="reservoir_level"):
        dam.setup(reservoir_level=40.0)
    with pytest.raises(KeyError, match="unknown option"):
        dam.setup(dam_height=3.0)
    with pytest.raises(ValueError, match="max_level"):
        dam.setup(min_level=3, max_level=2)


def test_flood_conserves_volume_and_follows_the_channel(dam, dam_runs):
    amr, uni = dam_runs
    for sim in dam_runs:
        assert abs(dam.volume_balance(sim)["volume_change_relative"]) < 1e-12
        assert sim.q[:, 0].min() >= 0.0
        assert dam.boundary_depth(sim) == 0.0  # the flood is far from the walls
        res = dam.flood_results(sim)
        t = np.array([np.nan if v is None else v for v in res["axis_arrival_s"]])
        reached = np.isfinite(t)
        assert reached[:4].all(), t  # the first 930 m of the channel
        assert np.all(np.diff(t[reached]) > 0), t  # later further down the channel
        assert not reached[-1]  # 2.25 km: not in 240 s
        assert res["max_depth_outside_reservoir"] < 28.0 - 10.0


def test_adaptive_flood_matches_uniform(dam, dam_runs):
    """AMR follows the front: the same flooded area (within 5 %) and arrival times
    (within 10 %) as the uniform finest grid, with fewer cell updates; refinement
    happened (the dam region and the front at level 2)."""
    amr, uni = dam_runs
    a, u = dam.flood_results(amr), dam.flood_results(uni)
    assert a["flooded_area_m2"] == pytest.approx(u["flooded_area_m2"], rel=0.05)
    ta = np.array([np.nan if v is None else v for v in a["axis_arrival_s"]], float)
    tu = np.array([np.nan if v is None else v for v in u["axis_arrival_s"]], float)
    both = np.isfinite(ta) & np.isfinite(tu)
    assert both.sum() >= 4 and np.allclose(ta[both], tu[both], rtol=0.1, atol=3.0), (ta, tu)
    assert amr.regrids >= 2 and set(amr.patches_per_level()) == {1, 2}
    assert amr.cell_updates < uni.cell_updates


def test_report_writes_rasters_and_picture(dam, dam_runs, tmp_path, monkeypatch):
    amr, _ = dam_runs
    figures = record_figures(monkeypatch)
    rec = dam.report(amr, tmp_path)
    res = amr.fgmax.results()
    assert rec["flooded_area_m2"] > 3e5
    for field in ("max_depth", "arrival_time", "max_speed"):
        tif = read_geotiff(tmp_path / f"fgmax_{field}.tif")
        asc = read_esri_ascii(tmp_path / f"fgmax_{field}.asc")
        want = res[field]
        for r, rtol in ((tif, 1e-6), (asc, 1e-5)):
            assert r.z.shape == want.shape
            assert np.array_equal(np.isnan(r.z), np.isnan(want))
            ok = ~np.isnan(want)
            assert np.allclose(r.z[ok], want[ok], rtol=rtol, atol=1e-5)
            assert r.x[0] == pytest.approx(res["x"][0, 0]) and r.y[0] == pytest.approx(
                res["y"][0, 0])
    assert np.load(tmp_path / "fgmax.npz")["max_depth"].shape == res["max_depth"].shape
    png = Path(rec["png"])
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # two maps with axes in metres, colour bars with units, the time span, and the
    # depth's colour range capped at its 99th percentile says so
    check_figure(figures, units=("m",), clipped=True)
    assert sum(r["kind"] == "map" for r in figures) == 2
