"""The vendored demo data parse, with the values their documentation states."""

import numpy as np
import pytest
from forestpy.extensions.geoclaw import datasets as ds
from forestpy.extensions.geoclaw.rasters import Raster, fill_nodata
from forestpy.extensions.geoclaw.topography import TopographyStack

pytestmark = pytest.mark.skipif(not ds.DATA_DIR.is_dir(), reason="vendored data missing")


def test_okushiri():
    bathy = ds.okushiri_bathymetry()
    assert bathy.shape == (244, 393) and bathy.corner == pytest.approx((0.0, 0.0))
    assert not np.isnan(bathy.z).any()
    stack = TopographyStack(bathy)  # cell-registered: covers the tank to its walls
    stack.check_covers(0.0, 5.488, 0.0, 3.402)
    assert stack.cell_averages(0.0, 0.007, 0.0, 0.007) == bathy.z[0, 0]  # constant corner
    assert bathy.z.min() < -0.1 and bathy.z.max() > 0.05  # sea and dry valley
    t, eta = ds.okushiri_input_wave()
    assert t[0] == 0 and t[-1] == pytest.approx(22.5) and len(t) == len(eta) == 451
    assert np.all(np.diff(t) > 0) and -0.02 < eta.min() < 0 < eta.max() < 0.03
    tg, gauges = ds.okushiri_gauges()
    assert list(gauges) == ["ch5", "ch7", "ch9"] and tg[1] == pytest.approx(0.05)
    assert gauges["ch5"][0] == pytest.approx(0.00234)  # file: 0.234 cm
    for eta_g in gauges.values():  # main wave at 15-19 s, some centimetres
        peak = tg[np.argmax(eta_g[tg < 22.5])]
        assert 15.0 < peak < 19.0 and 0.02 < eta_g.max() < 0.06


def test_merewether():
    dem = ds.merewether_dem(fill=False)
    assert dem.shape == (416, 321) and dem.dx == pytest.approx(1.0, abs=1e-3)
    assert np.isnan(dem.z).sum() == 73
    topo = ds.merewether_topography(house_height=3.0)
    houses = topo.meta["houses"]
    assert not np.isnan(topo.z).any() and 3000 < houses.sum() < 10000
    filled = ds.merewether_dem()
    assert np.array_equal(topo.z[houses], filled.z[houses] + 3.0)
    assert np.array_equal(topo.z[~houses], filled.z[~houses])
    assert len(ds.merewether_houses()) == 60
    ext = ds.merewether_extent()
    TopographyStack(Raster(topo.z, topo.x0, topo.y0, topo.dx, topo.dy)).check_covers(
        ext[:, 0].min() + 1, ext[:, 0].max() - 1, ext[:, 1].min() + 1, ext[:, 1].max() - 1)
    obs = ds.merewether_observations()
    assert len(obs["x"]) == 5 and np.allclose(obs["stage_observed"], [23.01, 23.14, 19.98,
                                                                       18.38, 23.36])
    n = ds.merewether_manning(*np.meshgrid(topo.x, topo.y))
    assert set(np.unique(n)) == {0.02, 0.04} and 0.02 < (n == 0.02).mean() < 0.3
    cx, cy = ds.MEREWETHER_INFLOW["centre"]
    assert topo.x[0] < cx < topo.x[-1] and topo.y[0] < cy < topo.y[-1]


def test_points_in_polygon_and_fill():
    square = [(0, 0), (2, 0), (2, 2), (0, 2)]
    notch = [(0, 0), (3, 0), (3, 3), (2, 3), (2, 1), (1, 1), (1, 3), (0, 3)]  # a U
    x, y = np.array([1.0, 3.0, 0.5, 1.5, 1.5]), np.array([1.0, 1.0, 2.5, 2.5, 0.5])
    assert ds.points_in_polygon(x, y, square).tolist() == [True, False, False, False, True]
    assert ds.points_in_polygon(x, y, notch).tolist() == [False, False, True, False, True]
    z = np.arange(12.0).reshape(3, 4)
    z[:, 0] = np.nan  # a border column: each from its right neighbour
    z[1, 2] = np.nan  # a hole: the mean of its four neighbours
    f = fill_nodata(Raster(z, 0, 0, 1, 1))
    assert np.array_equal(f.z[:, 0], [1.0, 5.0, 9.0])
    assert f.z[1, 2] == (2 + 10 + 5 + 7) / 4 and f.meta["filled_nodata"] == 4


def test_eden_dem():
    dem = ds.eden_dem()
    assert dem.shape == (1855, 1813) and dem.meta["epsg"] == 27700
    assert 5.0 < np.nanmin(dem.z) < np.nanmax(dem.z) < 76.2
