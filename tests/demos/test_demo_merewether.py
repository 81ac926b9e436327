"""The Merewether urban flash-flood demo (demos/geoclaw/merewether.py).

A coarse version (8 m / 4 m AMR, 150 s, walls on all sides: ``merewether_coarse`` in
tests/demos/conftest.py) is pinned in ``tests/regression/merewether.json`` (steps,
regrids, patches per level, the volume balance and the peak stages at the observation
points), checked by test_regression.py.
"""

import csv
import json
import math

import numpy as np
import pytest
from forestpy.extensions.geoclaw import datasets
from forestpy.extensions.geoclaw.rasters import read_geotiff
from testsupport import check_figure, record_figures

from forestpy.options import OptionError


def test_local_grid_is_the_dem_without_its_first_column(merewether):
    bed, rough, (x0, y0) = merewether.local_grid(3.0)
    dem = datasets.merewether_dem()
    topo = datasets.merewether_topography(3.0)
    assert bed.z.shape == (416, 320)
    # the origin is the lower-left corner of the DEM's second column
    assert x0 == pytest.approx(382249.79174463 + 0.99993681000029, abs=1e-6)
    assert y0 == pytest.approx(6354265.4322858, abs=1e-6)
    np.testing.assert_array_equal(bed.z, topo.z[:, 1:])
    raised = bed.z - dem.z[:, 1:]
    houses = topo.meta["houses"][:, 1:]
    assert houses.sum() > 5000  # 60 buildings of ~100 m^2 on the 1 m grid
    np.testing.assert_allclose(raised[houses], 3.0, atol=1e-12)
    np.testing.assert_array_equal(raised[~houses], 0.0)
    # Manning raster: the road polygon at the DEM cell centres
    X, Y = np.meshgrid(dem.x[1:], dem.y)
    n = merewether.manning_raster(rough, 0.02, 0.04)(X - x0, Y - y0)
    np.testing.assert_array_equal(n, datasets.merewether_manning(X, Y))
    assert 0.05 < np.mean(n == 0.02) < 0.2  # the road: ~8 % of the rectangle


def test_setup_grid_bed_and_manning(merewether):
    sim = merewether.setup(mx=16, min_level=1, max_level=1, t_final=0.0)
    b = sim.mbc
    assert sim.patches_per_level() == {1: 4 * 130}  # 10 x 13 trees
    assert np.allclose(sim.geom.dx, 0.99993681000029, rtol=0, atol=1e-12)
    # finest cells coincide with the DEM cells: the exact average of the bilinear
    # interpolant is a 3x3 smoothing of the DEM values (1/64 [1 6 1]^2 ... 36/64 centre)
    bed, _, _ = merewether.local_grid(3.0)
    x, y = sim.geom.cell_centers(ghosts=False)
    i = np.floor(x / bed.dx).astype(int)
    j = np.floor(y / bed.dy).astype(int)
    inner = (i > 0) & (i < 319) & (j > 0) & (j < 415)
    z = bed.z
    w = np.array([1.0, 6.0, 1.0]) / 8.0
    smooth = sum(w[a] * w[c] * z[np.clip(j + a - 1, 0, 415), np.clip(i + c - 1, 0, 319)]
                 for a in range(3) for c in range(3))
    aux = sim.aux[:, 0, b:-b, b:-b]
    np.testing.assert_allclose(aux[inner], smooth[inner], rtol=0, atol=1e-9)
    n = sim.aux[:, 1, b:-b, b:-b]
    assert set(np.unique(n)) == {0.02, 0.04}
    assert float(sim.q[:, 0].max()) == 0.0  # dry bed


def test_coarse_run_conserves_volume(merewether, merewether_coarse):
    sim = merewether_coarse
    injected = sim.geoclaw_sources.volume_added
    assert injected == pytest.approx(19.7 * 150.0, rel=1e-13)
    stored = sim.totals()["h"]
    # walls on all four sides: everything injected is still in the domain
    assert abs(stored - injected) <= 1e-12 * injected
    assert float(sim.q[:, 0].min()) >= 0.0
    assert sim.regrids > 0 and set(sim.patches_per_level()) == {0, 1}


def test_report_writes_table_and_map(merewether, merewether_coarse, tmp_path, monkeypatch):
    figures = record_figures(monkeypatch)
    result = merewether.report(merewether_coarse, tmp_path)
    rows = list(csv.DictReader(open(tmp_path / "peak_stages.csv")))
    obs = datasets.merewether_observations()
    assert [int(r["id"]) for r in rows] == obs["id"].tolist()
    assert [float(r["observed"]) for r in rows] == obs["stage_observed"].tolist()
    assert [float(r["tuflow"]) for r in rows] == obs["stage_tuflow"].tolist()
    peaks = merewether_coarse.merewether["peaks"].results()["max_surface"]
    for row, p, r in zip(rows, peaks, result["peak_stages"]):
        assert float(row["x"]) == pytest.approx(r["x"], abs=1e-3)
        assert math.isnan(p) == math.isnan(r["modelled_at_point"])
        if not math.isnan(p):  # wet at the point: its own peak, distance 0
            assert r["modelled_at_point"] == p == r["modelled"] and r["distance_m"] == 0.0
            assert float(row["modelled"]) == pytest.approx(p, abs=1e-4)
        if not math.isnan(r["modelled"]):
            assert r["modelled_minus_observed"] == r["modelled"] - r["observed"]
            assert r["distance_m"] <= merewether.NEAR_RADIUS
    assert result["volume_injected"] == pytest.approx(19.7 * 150.0, rel=1e-13)
    assert abs(result["volume_outflow"]) <= 1e-12 * result["volume_injected"]
    assert (tmp_path / "fgmax.npz").is_file() and (tmp_path / "fgmax_max_depth.asc").is_file()
    assert all((tmp_path / f).is_file() for f in result["files"])
    # one system per kind of file, said in the report: the rasters in UTM 56 (the DEM's),
    # same values as the local fgmax map; the .npz in local metres with its origin
    geo = read_geotiff(tmp_path / "fgmax_max_depth.tif")
    res = merewether_coarse.merewether["flood"].results()
    x0, y0 = merewether_coarse.merewether["origin"]
    assert result["coordinates"]["origin_utm56"] == [x0, y0]
    assert result["coordinates"]["epsg"] == 32756 == geo.meta["epsg"]
    npz = np.load(tmp_path / "fgmax.npz")
    assert tuple(npz["origin"]) == (x0, y0) and "local metres" in str(npz["crs"])
    np.testing.assert_array_equal(npz["x"], res["x"])
    for row, r in zip(rows, result["peak_stages"]):
        assert float(row["x_local"]) == pytest.approx(r["x"] - x0, abs=1e-3)
    assert geo.x[0] == pytest.approx(res["x"][0, 0] + x0, abs=1e-6)
    assert geo.y[0] == pytest.approx(res["y"][0, 0] + y0, abs=1e-6)
    np.testing.assert_allclose(geo.z, res["max_depth"], rtol=1e-6, atol=1e-6)
    if "max_depth.png" in result["files"]:
        assert (tmp_path / "max_depth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # capped at the 99th percentile of the flooded cells: the picture says so
        check_figure(figures, clipped=True)
    json.dumps(result)  # the CLI writes it as JSON


def test_peak_at_points_takes_the_nearest_wet_peak(merewether):
    class Maxima:  # the results() of an FGMax
        def __init__(self, **fields):
            self.fields = fields

        def results(self):
            return self.fields

    X, Y = np.meshgrid(np.arange(10) + 0.5, np.arange(8) + 0.5)
    surface = np.where(X + Y > 9.0, 20.0 + 0.1 * X + 0.01 * Y, np.nan)  # wet upper right
    flood = Maxima(x=X, y=Y, max_surface=surface)
    x = np.array([9.2, 4.0, 0.5, 7.0])
    y = np.array([7.1, 4.0, 0.5, 6.0])
    at_point = np.array([21.5, np.nan, np.nan, np.nan])
    stage, dist = merewether.peak_at_points(Maxima(max_surface=at_point), flood, x, y, radius=3.0)
    assert stage[0] == 21.5 and dist[0] == 0.0
    assert np.isnan(stage[2]) and np.isnan(dist[2])  # nothing wet within 3 m
    for k in (1, 3):  # brute force over the wet points
        d = np.hypot(X - x[k], Y - y[k])
        d[np.isnan(surface)] = np.inf
        n = np.unravel_index(np.argmin(d), d.shape)
        assert dist[k] == pytest.approx(d[n]) and stage[k] == surface[n]


def test_peak_tracker_sees_the_surface_maximum(merewether, merewether_coarse):
    """The fgmax at the observation points equals the surface of the wet cell there when
    the flow is steady (the last sample is below the running maximum)."""
    sim = merewether_coarse
    obs = merewether.observations()
    q, aux = sim.sample(obs["x"], obs["y"], aux=True)
    peaks = sim.merewether["peaks"].results()["max_surface"]
    wet = q[:, 0] > 1e-3
    assert wet.any()
    assert np.all(peaks[wet] >= q[wet, 0] + aux[wet, 0] - 1e-12)


def test_uniform_option_and_bad_input(merewether):
    sim = merewether.setup(mx=4, min_level=0, max_level=1, uniform=True, t_final=0.0)
    assert sim.patches_per_level() == {1: 520}
    with pytest.raises(KeyError, match="unknown option"):
        merewether.setup(house_heigth=2.0)
    with pytest.raises(OptionError, match="boundary"):
        merewether.setup(boundary="open")
    with pytest.raises(OptionError, match="discharge"):
        merewether.setup(discharge=-1.0)
