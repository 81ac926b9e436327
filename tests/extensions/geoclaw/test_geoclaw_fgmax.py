"""fgmax maxima on a fixed grid: brute-force check on an adaptive run, files, checkpoints."""

import numpy as np
import pytest
from forestpy.extensions.geoclaw.fgmax import FGMax
from forestpy.extensions.geoclaw.rasters import read_raster
from testsupport import load_demo

from forestpy.io.checkpoint import write_checkpoint

OPTS = dict(mx=8, min_level=1, max_level=3, t_final=0.6)


def _brute(sim, x, y):
    """State at points by a Python search over all leaves (the reference)."""
    g = sim.geom
    q = np.asarray(sim.q)
    out = np.empty((len(x), 3))
    for k, (px, py) in enumerate(zip(x, y)):
        hits = [p for p in range(g.npatch)
                if g.xlower[p] <= px < g.xlower[p] + g.mx * g.dx[p]
                and g.ylower[p] <= py < g.ylower[p] + g.my * g.dy[p]]
        assert len(hits) == 1
        p = hits[0]
        i = int((px - g.xlower[p]) // g.dx[p]) + g.mbc
        j = int((py - g.ylower[p]) // g.dy[p]) + g.mbc
        out[k] = q[p, :3, j, i]
    return out


class _Reference:
    def __init__(self, x, y, tol, sea_level, arrival_tol):
        self.x, self.y, self.tol = x, y, tol
        self.sea, self.atol = sea_level, arrival_tol
        self.hmax = np.zeros(x.size)
        self.smax = np.zeros(x.size)
        self.etamax = np.full(x.size, -np.inf)
        self.arrival = np.full(x.size, np.nan)

    def on_start(self, sim):
        self.on_step(sim)

    def on_step(self, sim):
        q = _brute(sim, self.x, self.y)
        for k in range(self.x.size):
            h, hu, hv = q[k]
            self.hmax[k] = max(self.hmax[k], h)
            if h > self.tol:
                self.smax[k] = max(self.smax[k], np.sqrt(hu * hu + hv * hv) / h)
                self.etamax[k] = max(self.etamax[k], h)
            if np.isnan(self.arrival[k]) and h > self.tol and abs(h - self.sea) > self.atol:
                self.arrival[k] = sim.t

    def on_end(self, sim):
        pass


@pytest.fixture(scope="module")
def radial_dam():
    return load_demo("radial_dam")


def test_fgmax_matches_brute_force(radial_dam, tmp_path):
    sim = radial_dam.setup(**OPTS)
    X, Y = np.meshgrid(np.linspace(-2.2, 2.2, 9) + 0.013, np.linspace(-2.1, 2.1, 7) + 0.007)
    fg = FGMax(X, Y, topo_index=None, sea_level=1.0, arrival_tol=0.05,
               path=tmp_path / "fgmax")
    xs, ys = X.ravel(), Y.ravel()
    ref = _Reference(xs, ys, fg.dry_tolerance, 1.0, 0.05)
    sim.callbacks += [fg, ref]
    sim.run()
    assert sim.steps > 5 and len(set(sim.geom.level)) > 1  # adaptive
    res = fg.results()
    assert np.array_equal(res["max_depth"].ravel(), ref.hmax)
    assert np.array_equal(res["max_speed"].ravel(), ref.smax)
    assert np.array_equal(res["max_surface"].ravel(), ref.etamax)
    assert np.array_equal(res["arrival_time"].ravel(), ref.arrival, equal_nan=True)
    assert np.isfinite(ref.arrival).sum() >= 4 and np.isnan(ref.arrival).sum() >= 4
    # files: npz + GeoTIFF + ESRI ASCII of each field, read back
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "fgmax.npz" in files and "fgmax_max_depth.tif" in files
    assert "fgmax_arrival_time.asc" not in files  # dx != dy: no ESRI ASCII
    tif = read_raster(tmp_path / "fgmax_max_depth.tif")
    assert np.allclose(tif.z, res["max_depth"].astype(np.float32))
    assert tif.x0 == pytest.approx(X[0, 0]) and tif.y0 == pytest.approx(Y[0, 0])
    with np.load(tmp_path / "fgmax.npz") as z:
        assert np.array_equal(z["arrival_time"], res["arrival_time"], equal_nan=True)
    # ParaView: the points with every field, read back with VTK's reader
    pytest.importorskip("vtk")
    from vtkmodules.util.numpy_support import vtk_to_numpy
    from vtkmodules.vtkIOXML import vtkXMLPolyDataReader

    reader = vtkXMLPolyDataReader()
    reader.SetFileName(str(tmp_path / "fgmax.vtp"))
    reader.Update()
    poly = reader.GetOutput()
    assert poly.GetNumberOfPoints() == X.size and poly.GetNumberOfVerts() == X.size
    pts = vtk_to_numpy(poly.GetPoints().GetData())
    assert np.array_equal(pts[:, 0], xs) and np.array_equal(pts[:, 1], ys)
    for k in ("max_depth", "max_speed", "max_surface", "arrival_time"):
        got = vtk_to_numpy(poly.GetPointData().GetArray(k))
        assert np.array_equal(got, res[k].ravel(), equal_nan=True), k


def test_fgmax_square_grid_writes_ascii(tmp_path):
    fg = FGMax.grid(0, 1, 0, 1, 3, 3, topo_index=None)
    fg.observe(0.5, np.full(9, 2.0), np.ones(9), np.zeros(9), np.zeros(9))
    fg.write(tmp_path / "out")
    asc = read_raster(tmp_path / "out_max_speed.asc")
    assert np.allclose(asc.z, 0.5) and asc.x0 == 0.0 and asc.dx == 0.5
    assert np.allclose(read_raster(tmp_path / "out_arrival_time.asc").z, 0.5)


def test_fgmax_checkpoint_restores_state(radial_dam, tmp_path):
    X, Y = np.meshgrid(np.linspace(-2, 2, 5) + 0.01, np.linspace(-2, 2, 5) + 0.01)
    full = radial_dam.setup(**OPTS)
    fg_full = FGMax(X, Y, topo_index=None, sea_level=1.0)
    full.callbacks.append(fg_full)
    full.run()
    part = radial_dam.setup(**OPTS)
    fg_part = FGMax(X, Y, topo_index=None, sea_level=1.0)
    part.callbacks.append(fg_part)
    part.run(max_steps=4)
    path = write_checkpoint(part, tmp_path / "ck.npz")
    resumed = radial_dam.setup(**OPTS)
    fg_res = FGMax(X, Y, topo_index=None, sea_level=1.0)
    resumed.callbacks.append(fg_res)
    resumed.load_checkpoint(path)
    assert np.array_equal(fg_res.max_depth, fg_part.max_depth)
    resumed.run()
    for k in ("max_depth", "max_speed", "max_surface"):
        assert np.array_equal(getattr(fg_res, k), getattr(fg_full, k)), k
    assert np.array_equal(fg_res.arrival_time, fg_full.arrival_time, equal_nan=True)
    with pytest.raises(ValueError, match="points differ"):
        FGMax(X + 1, Y, topo_index=None).load_state_dict(fg_part.state_dict())
