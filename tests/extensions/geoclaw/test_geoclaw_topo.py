"""Topography formats, precedence stacks, exact cell averages and seafloor deformation."""

from types import SimpleNamespace

import numpy as np
import pytest
from forestpy.extensions.geoclaw.dtopo import (
    DTopography,
    make_dtopo_b4step,
    read_dtopo,
    write_dtopo,
)
from forestpy.extensions.geoclaw.rasters import (
    Raster,
    RasterError,
    read_esri_ascii,
    read_geotiff,
    read_raster,
    read_topotype,
    write_esri_ascii,
    write_geotiff,
    write_topotype,
)
from forestpy.extensions.geoclaw.topography import (
    Topography,
    TopographyError,
    TopographyStack,
    cell_averages,
    make_setaux,
)
from testsupport import ROOT

from forestpy.backend import get_backend

SHARED = ROOT / ".." / "shared" / "data"
VENDORED = ROOT / "demos" / "geoclaw" / "data"


def _sample(name):
    for base in (VENDORED / "geoclaw_samples", SHARED / "geoclaw_samples"):
        if (base / name).exists():
            return base / name
    pytest.skip(f"{name} not available")


def _raster(rng, ny=7, nx=9, x0=0.3, y0=-1.2, dx=0.5, dy=0.25, reg="node"):
    return Raster(rng.normal(size=(ny, nx)), x0, y0, dx, dy, reg)


# ------------------------------------------------------------------ sample files
def test_kahului_tt2_matches_header():
    path = _sample("kahului_sample_1s.tt2")
    r = read_raster(path)
    assert r.shape == (46, 65)
    assert r.x0 == 2.035190431845593e02 and r.y0 == 2.089008745587743e01
    assert r.dx == r.dy == 2.803377563230000e-04
    values = np.array(path.read_text().split()[12:], dtype=float)
    assert values.size == 65 * 46
    assert r.z[-1, 0] == values[0] == 3.339  # first value: north-west corner
    assert np.array_equal(r.z[::-1].ravel(), values)
    t = Topography(r)
    assert t.extent == pytest.approx((r.x0, r.x0 + 64 * r.dx, r.y0, r.y0 + 45 * r.dy))


def test_tohoku_tt3_dtopo():
    path = _sample("tohoku_test_data.tt3")
    d = read_dtopo(path)
    assert d.dz.shape == (10, 25, 25)
    assert (d.x0, d.y0, d.dx, d.dy) == (140.0, 35.0, 0.25, 0.25)
    assert np.allclose(d.t, 2.14651688888889e01 * np.arange(10))
    values = np.array(" ".join(path.read_text().splitlines()[9:]).split(), float)
    assert np.array_equal(d.dz[:, ::-1].ravel(), values)
    assert np.all(d.dz[0] == 0) and np.abs(d.dz[-1]).max() > 1.0  # uplift by the end


def test_okushiri_asc_is_cell_registered():
    path = SHARED / "okushiri" / "Benchmark_2_Bathymetry.asc"
    if not path.exists():
        path = VENDORED / "okushiri" / "Benchmark_2_Bathymetry.asc"
    r = read_esri_ascii(path)
    assert r.shape == (244, 393) and r.dx == 0.014 and r.registration == "cell"
    assert r.x0 == pytest.approx(0.007) and r.corner == pytest.approx((0.0, 0.0))
    first = [float(v) for v in path.read_text().splitlines()[6].split()[:3]]
    assert np.array_equal(r.z[-1, :3], first)


def test_eden_dem_geotiff_lzw_tiles():
    path = VENDORED / "eden_dem" / "DEM.tif"
    r = read_geotiff(path)
    assert r.shape == (1855, 1813) and r.dx == r.dy == 5.0
    assert r.meta["epsg"] == 27700
    assert r.corner[0] == pytest.approx(335016.0) and r.corner[1] + 1855 * 5 == pytest.approx(
        560412.0)
    assert np.nanmin(r.z) == pytest.approx(5.047, abs=1e-3)
    assert np.nanmax(r.z) == pytest.approx(76.177, abs=1e-3)
    try:  # an independent decoder of the LZW tiles, where installed
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        assert np.array_equal(np.asarray(im), r.z[::-1].astype(np.float32), equal_nan=True)


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("tt", [1, 2, 3])
def test_topotype_round_trip(tmp_path, tt):
    r = _raster(np.random.default_rng(tt))
    r.z[2, 3] = np.nan
    write_topotype(tmp_path / "a.tt", r, tt)
    back = read_topotype(tmp_path / "a.tt", tt)
    assert back.shape == r.shape and (back.x0, back.y0) == pytest.approx((r.x0, r.y0))
    assert (back.dx, back.dy) == pytest.approx((r.dx, r.dy))
    assert np.array_equal(np.isnan(back.z), np.isnan(r.z))
    assert np.array_equal(np.nan_to_num(back.z), np.nan_to_num(r.z))


def test_esri_ascii_round_trip(tmp_path):
    r = _raster(np.random.default_rng(5), dy=0.5, reg="cell")
    r.z[0, 0] = np.nan
    write_esri_ascii(tmp_path / "a.asc", r)
    back = read_raster(tmp_path / "a.asc")
    assert (back.x0, back.y0, back.dx) == (r.x0, r.y0, r.dx)
    assert np.array_equal(np.nan_to_num(back.z, nan=-1e9), np.nan_to_num(r.z, nan=-1e9))


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_geotiff_round_trip(tmp_path, compress, dtype):
    r = _raster(np.random.default_rng(7), ny=300, nx=90, reg="cell")  # several strips
    r.z[5, 7] = np.nan
    write_geotiff(tmp_path / "a.tif", r, dtype=dtype, compress=compress, epsg=32756)
    back = read_raster(tmp_path / "a.tif")
    assert back.meta["epsg"] == 32756 and back.registration == "cell"
    assert (back.x0, back.y0, back.dx, back.dy) == pytest.approx((r.x0, r.y0, r.dx, r.dy))
    expect = r.z.astype(dtype)
    assert np.array_equal(np.nan_to_num(back.z, nan=7.0), np.nan_to_num(expect, nan=7.0))


def test_geotiff_readable_by_pillow(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    r = _raster(np.random.default_rng(8), ny=40, nx=30, reg="cell")
    write_geotiff(tmp_path / "a.tif", r)
    with Image.open(tmp_path / "a.tif") as im:
        assert im.size == (30, 40)
        assert np.array_equal(np.asarray(im), r.z[::-1].astype(np.float32))


@pytest.mark.parametrize("dtt", [1, 3])
def test_dtopo_round_trip(tmp_path, dtt):
    rng = np.random.default_rng(dtt)
    d = DTopography(rng.normal(size=(3, 5, 6)), [0.0, 2.0, 4.0], 1.0, 2.0, 0.5, 0.25)
    write_dtopo(tmp_path / "d.tt", d, dtt)
    back = read_dtopo(tmp_path / "d.tt", dtt)
    assert np.array_equal(back.dz, d.dz) and np.allclose(back.t, d.t)
    assert (back.x0, back.y0, back.dx, back.dy) == pytest.approx((1.0, 2.0, 0.5, 0.25))


# ------------------------------------------------------------------ errors
def test_malformed_files(tmp_path):
    bad = tmp_path / "bad.asc"
    bad.write_text("ncols 3\nnrows 2\nxllcorner 0\nyllcorner 0\ncellsize 1\n1 2 3\n4 5\n")
    with pytest.raises(RasterError, match="bad.asc.*5 values, header says 6"):
        read_raster(bad)
    bad.write_text("ncols 3\nnrows 2\nxllcorner 0\ncellsize 1\n1 2 3\n4 5 6\n")
    with pytest.raises(RasterError, match="bad.asc.*lacks xllcorner"):
        read_raster(bad)
    bad.write_text("ncols 3.5\nnrows 2\nxllcorner 0\nyllcorner 0\ncellsize 1\n1 2 3\n4 5 6\n")
    with pytest.raises(RasterError, match="ncols=3.5 is not a positive integer"):
        read_raster(bad)
    tt = tmp_path / "bad.tt3"
    tt.write_text("3 ncols\n2 nrows\n0 xlower\n0 ylower\n")
    with pytest.raises(RasterError, match="bad.tt3.*header ends"):
        read_raster(tt)
    tt.write_text("2 ncols\n2 nrows\n0 xlower\n0 ylower\n1 cellsize\n-9999 nodata\n1 x\n2 3\n")
    with pytest.raises(RasterError, match="bad.tt3.*non-numeric"):
        read_raster(tt)
    tif = tmp_path / "bad.tif"
    tif.write_bytes(b"GIF89a....")
    with pytest.raises(RasterError, match="bad.tif.*not a TIFF"):
        read_raster(tif)
    with pytest.raises(RasterError, match="no such file"):
        read_raster(tmp_path / "missing.asc")


def test_coverage_and_nodata_errors():
    rng = np.random.default_rng(2)
    a = Topography(Raster(rng.normal(size=(5, 5)), 0, 0, 1, 1), "a.tt3")
    b = Topography(Raster(rng.normal(size=(5, 5)), 3, 0, 1, 1), "b.tt3")
    stack = TopographyStack([a, b])
    stack.check_covers(0, 7, 0, 4)
    with pytest.raises(TopographyError, match=r"does not cover.*\[7, 8\]"):
        stack.check_covers(0, 8, 0, 4)
    a.raster.z[2, 1] = np.nan
    with pytest.raises(TopographyError, match=r"a.tt3: NODATA value at \(1, 2\)"):
        make_setaux([a, b], domain=(0, 7, 0, 4))
    # a hole under a finer file does not matter
    nodes = Topography(Raster(np.ones((5, 5)), 0, 0, 1, 1), "nodes.tt3")
    cells = Topography(Raster(np.zeros((4, 2)), 3.5, 0.5, 1, 1, "cell"), "cells.asc")
    TopographyStack([nodes, cells]).check_covers(0, 5, 0, 4)  # cell edges reach x = 5
    with pytest.raises(TopographyError, match="does not cover"):
        TopographyStack([nodes, cells]).check_covers(0, 5.1, 0, 4)
    fine = Topography(Raster(np.zeros((21, 21)), 0, 0, 0.25, 0.25), "fine")
    TopographyStack([a, fine]).check_covers(0, 4, 0, 4)


# ------------------------------------------------------------------ exact averages
def test_average_of_bilinear_function_is_its_centre_value():
    f = lambda x, y: 1.5 - 0.3 * x + 0.7 * y + 0.2 * x * y  # noqa: E731
    t = Topography.from_function(f, -1, 3, 0, 2, 9, 5)
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 3, 500), rng.uniform(0, 2, 500)
    dx, dy = rng.uniform(0.01, 0.4, 500), rng.uniform(0.01, 0.4, 500)
    x, y = np.clip(x, -1 + dx / 2, 3 - dx / 2), np.clip(y, dy / 2, 2 - dy / 2)
    assert np.allclose(cell_averages(t, x, y, dx, dy), f(x, y), rtol=0, atol=1e-13)


def _brute_average(stack, a, b, c, d):
    """Midpoint rule on the partition by every grid line and file edge: exact for a
    piecewise-bilinear function."""
    xs, ys = [a, b], [c, d]
    for t in stack.topos:
        xs += list(t.x) + list(t.coverage[:2])
        ys += list(t.y) + list(t.coverage[2:])
    xs = np.unique(np.clip(xs, a, b))
    ys = np.unique(np.clip(ys, c, d))
    X, Y = np.meshgrid(0.5 * (xs[1:] + xs[:-1]), 0.5 * (ys[1:] + ys[:-1]))
    W = np.outer(np.diff(ys), np.diff(xs))
    return (stack(X, Y) * W).sum() / ((b - a) * (d - c))


def test_stack_precedence_and_exact_integration():
    rng = np.random.default_rng(3)
    coarse = Topography(Raster(rng.normal(size=(11, 13)), 0, 0, 1.0, 1.0), "coarse")
    fine = Topography(Raster(rng.normal(size=(15, 17)), 2.3, 3.1, 0.3, 0.25), "fine")
    stack = TopographyStack([coarse, fine])
    assert stack.topos[0] is fine  # finest first
    assert stack(3.0, 4.0) == pytest.approx(fine(3.0, 4.0))
    assert stack(9.0, 9.0) == pytest.approx(coarse(9.0, 9.0))
    for _ in range(30):
        a, c = rng.uniform(0, 10, 2)
        b, d = a + rng.uniform(0.05, 3), c + rng.uniform(0.05, 3)
        exact = _brute_average(stack, a, b, c, d)
        assert stack.cell_averages(a, b, c, d) == pytest.approx(exact, rel=1e-12, abs=1e-13)


def test_coarse_average_equals_mean_of_children():
    """Lake at rest through refinement/coarsening needs this to round-off."""
    rng = np.random.default_rng(4)
    stack = TopographyStack([
        Topography(Raster(rng.normal(size=(11, 13)) * 50, 0, 0, 1.0, 1.0)),
        Topography(Raster(rng.normal(size=(15, 17)) * 50, 2.3, 3.1, 0.3, 0.25))])
    x, y = rng.uniform(-1, 12, (3, 8, 8)), rng.uniform(-1, 12, (3, 8, 8))
    h = np.array([0.37, 1.1, 0.05])[:, None, None]
    parent = cell_averages(stack, x, y, h, h)
    kids = sum(cell_averages(stack, x + sx * h / 4, y + sy * h / 4, h / 2, h / 2)
               for sx in (-1, 1) for sy in (-1, 1)) / 4
    assert np.abs(parent - kids).max() < 1e-12 * np.abs(parent).max()


def test_setaux_signature_shapes():
    t = Topography.from_function(lambda x, y: x - y, 0, 1, 0, 1, 5, 5)
    setaux = make_setaux(t, num_aux=3, topo_index=1, domain=(0, 1, 0, 1),
                         extra=lambda x, y, dx, dy, aux: aux.__setitem__(2, 0.02))
    i = np.arange(-2, 6) + 0.5
    dx = np.array([0.25, 0.125])[:, None, None]
    x = dx * i[None, None, :] + 0 * i[None, :, None]
    y = dx * i[None, :, None] + 0 * i[None, None, :]
    aux = setaux(x, y, dx, dx)
    assert aux.shape == (3, 2, 8, 8)
    assert np.all(aux[0] == 0) and np.all(aux[2] == 0.02)
    inside = (x > 0) & (x < 1) & (y > 0) & (y < 1)
    assert np.allclose(aux[1][inside], (x - y)[inside], atol=1e-14)


# ------------------------------------------------------------------ dtopo in time
def _fake_sim(t, npatch=2, m=6):
    be = get_backend("cpu", "float64")
    i = np.arange(m) + 0.5
    dx = np.array([0.5, 0.25])[:npatch]
    x = 140.0 + dx[:, None, None] * i[None, None, :] + 0 * i[None, :, None]
    y = 35.0 + dx[:, None, None] * i[None, :, None] + 0 * i[None, None, :]
    bed = -100.0 + x - y
    aux = np.stack([bed, np.ones_like(bed)], axis=1)
    geom = SimpleNamespace(dx=dx, dy=dx)  # the hook reads the local rows' geometry
    return SimpleNamespace(t=t, backend=be, dtype=be.dtype, centers_host=(x, y), geom=geom,
                           layout=SimpleNamespace(local_geom=geom), aux_setaux=aux,
                           aux=aux.copy())


def test_dtopo_linear_in_time_and_b4step():
    d = read_dtopo(_sample("tohoku_test_data.tt3"))
    sim = _fake_sim(0.0)
    x, y = sim.centers_host
    dxy = sim.geom.dx[:, None, None]
    frames = [d.cell_averages(tk, x, y, dxy, dxy) for tk in d.t]
    tm = 0.5 * (d.t[6] + d.t[7])
    assert np.allclose(d.cell_averages(tm, x, y, dxy, dxy), 0.5 * (frames[6] + frames[7]),
                       atol=1e-14)
    assert np.array_equal(d.cell_averages(-5.0, x, y, dxy, dxy), frames[0])
    assert np.array_equal(d.cell_averages(1e6, x, y, dxy, dxy), frames[-1])
    calls = []
    hook = make_dtopo_b4step(d, topo_index=0, then=lambda s, dt: calls.append(dt))
    sim.t = tm
    hook(sim, 0.1)
    assert np.allclose(sim.aux[:, 0], sim.aux_setaux[:, 0] + 0.5 * (frames[6] + frames[7]))
    assert np.array_equal(sim.aux[:, 1], sim.aux_setaux[:, 1]) and calls == [0.1]
    sim.t = 1e6
    hook(sim, 0.1)
    assert np.allclose(sim.aux[:, 0], sim.aux_setaux[:, 0] + frames[-1])
    assert np.abs(frames[-1]).max() > 0.1


@pytest.mark.slow  # ~20 s cold: compiles the geoclaw solver's kernels
def test_lake_at_rest_through_regrids_with_the_geoclaw_solver():
    """Two overlapping random files, refinement moving across the domain: the exact
    averages keep a (wet) lake exactly at rest through every regrid."""
    model = pytest.importorskip("forestpy.extensions.geoclaw.model")
    from forestpy.extensions.geoclaw.refinement import Region

    from forestpy import Domain

    rng = np.random.default_rng(1)
    coarse = Raster(rng.uniform(-2, -1, (9, 9)), -0.1, -0.1, 0.15, 0.15)
    fine = Raster(rng.uniform(-2, -1, (15, 17)), 0.23, 0.31, 0.031, 0.027)
    setaux = make_setaux([coarse, fine], domain=(0, 1, 0, 1))
    regions = [Region(0.1 * k, 0.1 * k + 0.3, 0, 1, min_level=3, t1=0.004 * k,
                      t2=0.004 * (k + 1)) for k in range(7)]
    sim = model.geoclaw_simulation(setaux, domain=Domain(lower=(0, 0), upper=(1, 1)),
                                   regions=regions, mx=8, min_level=1, max_level=3,
                                   t_final=0.028, regrid_interval=1)
    sim.run()
    assert sim.regrids >= 2 and len(set(sim.geom.level)) == 2
    b = sim.mbc
    q, aux = np.asarray(sim.q)[..., b:-b, b:-b], np.asarray(sim.aux)[..., b:-b, b:-b]
    assert np.abs(q[:, 1:]).max() < 1e-12
    assert np.abs(q[:, 0] + aux[:, 0]).max() < 1e-12
