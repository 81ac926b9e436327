"""ParaView output: frames read back with VTK's own readers and checked against the run."""

import math
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vtkmodules")

from vtkmodules.util.numpy_support import vtk_to_numpy  # noqa: E402
from vtkmodules.vtkCommonDataModel import vtkDataSetAttributes  # noqa: E402
from vtkmodules.vtkIOXML import (  # noqa: E402
    vtkXMLMultiBlockDataReader,
    vtkXMLUniformGridAMRReader,
)

import forestpy.io.vtk as fvtk  # noqa: E402
from forestpy import RiemannSolver, get_riemann  # noqa: E402
from forestpy.io.vtk import PVDCollection, VTKOutput, read_pvd, write_frame  # noqa: E402

REFINED = vtkDataSetAttributes.REFINEDCELL
SHALLOW_DERIVED = ["depth", "velocity_x", "velocity_y", "speed", "surface"]


class Recording(VTKOutput):
    """VTKOutput that also keeps what the simulation held at every frame."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.snapshots = []

    def write(self, sim):
        path = super().write(sim)
        g, b = sim.geom, sim.geom.mbc
        self.snapshots.append(
            dict(
                t=float(sim.t),
                ppl=sim.patches_per_level(),
                level=g.level.copy(),
                gqx=g.gqx.copy(),
                gqy=g.gqy.copy(),
                q=np.array(sim.q)[:, :, b : b + g.my, b : b + g.mx].copy(),
            )
        )
        return path


@pytest.fixture(scope="module")
def run(radial_dam, tmp_path_factory):
    out = tmp_path_factory.mktemp("vtk")
    sim = radial_dam.setup(mx=8, min_level=1, max_level=3, t_final=0.1)
    amr = Recording(out, name="amr", every_steps=1)
    flat = Recording(out, name="flat", kind="flat", interval=0.05)
    sim.callbacks += [amr, flat]
    sim.run()
    return sim, amr, flat, out


def _ancestor_keys(snap):
    """Every (level, gqx, gqy) strictly above a leaf, down to the coarsest leaf level."""
    lmin = int(snap["level"].min())
    keys = set()
    for lev, x, y in zip(snap["level"], snap["gqx"], snap["gqy"]):
        lev, x, y = int(lev), int(x), int(y)
        while lev > lmin:
            lev, x, y = lev - 1, x // 2, y // 2
            keys.add((lev, x, y))
    return keys


def _cell_arrays(grid):
    cd = grid.GetCellData()
    return {cd.GetArrayName(i): vtk_to_numpy(cd.GetArray(i)) for i in range(cd.GetNumberOfArrays())}


def _expected(q):
    """Field and derived values of leaves, computed here from (h, hu, hv)."""
    h, hu, hv = q[:, 0], q[:, 1], q[:, 2]
    u, v = hu / h, hv / h
    vals = dict(h=h, hu=hu, hv=hv, depth=h, velocity_x=u, velocity_y=v,
                speed=np.hypot(u, v), surface=h)
    return vals


def _check_values(name, got, expected):
    """State fields bit for bit; derived fields to rounding (computed differently here)."""
    expected = np.asarray(expected).reshape(-1)
    if name in ("h", "hu", "hv", "depth", "surface"):
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-15)


def test_pvd_lists_every_frame(run):
    sim, amr, flat, out = run
    for cb in (amr, flat):  # both list the levels view (.vtm); AMR has its .vthb too
        entries = read_pvd(cb.pvd_path)
        assert [t for t, _ in entries] == [t for t, _, _ in cb.written]
        assert [f for _, f in entries] == [p.name for _, _, p in cb.written]
        assert entries[0][0] == 0.0 and entries[-1][0] == pytest.approx(sim.t_final)
        assert all(f.endswith(".vtm") and (out / f).is_file() for _, f in entries)
        assert all((out / f).with_suffix(".vthb").is_file() == (cb is amr) for _, f in entries)
        assert len({f for _, f in entries}) == len(entries)  # no duplicate frames
    # every step for "amr" (plus frame 0), interval 0.05 for "flat" (0, >= 0.05, end)
    assert len(amr.written) == sim.steps + 1
    times = [t for t, _, _ in flat.written]
    assert times[0] == 0.0 and times[-1] == pytest.approx(sim.t_final)
    assert any(0.05 <= t < sim.t_final for t in times[1:-1])
    assert not [p for p in os.listdir(out) if p.startswith(".")]  # no temporaries left


def test_amr_frames_read_back(run):
    sim, amr, _, out = run
    names = list(sim.riemann.field_names) + SHALLOW_DERIVED
    mx, my = sim.mx, sim.my
    blanked_somewhere = False
    for (t, _, path), snap in zip(amr.written, amr.snapshots):
        reader = vtkXMLUniformGridAMRReader()
        reader.SetFileName(str(path.with_suffix(".vthb")))
        reader.SetMaximumLevelsToReadByDefault(0)  # all levels
        reader.Update()
        data = reader.GetOutput()
        lmin, lmax = int(snap["level"].min()), int(snap["level"].max())
        assert data.GetNumberOfLevels() == lmax - lmin + 1
        anc = _ancestor_keys(snap)
        area_leaves = 0.0
        for k in range(lmax - lmin + 1):
            lev = lmin + k
            nleaf = snap["ppl"].get(lev, 0)
            nanc = sum(1 for a in anc if a[0] == lev)
            assert data.GetNumberOfBlocks(k) == nleaf + nanc
            h = 5.0 / (mx * 2**lev)
            spacing = [0.0, 0.0, 0.0]
            data.GetSpacing(k, spacing)
            assert spacing[:2] == pytest.approx((h, h), rel=1e-12)
            leaf_idx = np.flatnonzero(snap["level"] == lev)
            mass_level = 0.0
            for j in range(data.GetNumberOfBlocks(k)):
                grid = data.GetDataSetAsImageData(k, j)
                assert grid.GetNumberOfCells() == mx * my
                assert grid.GetSpacing()[:2] == pytest.approx((h, h), rel=1e-12)
                arrays = _cell_arrays(grid)
                assert set(arrays) == set(names) | {"vtkGhostType"}
                assert [grid.GetCellData().GetArrayName(i) for i in range(len(names))] == names
                assert vtk_to_numpy(grid.GetFieldData().GetArray("TimeValue"))[0] == t
                blank = (arrays["vtkGhostType"] & REFINED) != 0
                lo, hi = [0, 0, 0], [0, 0, 0]
                data.GetAMRBox(k, j).GetDimensions(lo, hi)
                assert (hi[0] - lo[0] + 1, hi[1] - lo[1] + 1) == (mx, my)
                assert lo[0] % mx == 0 and lo[1] % my == 0
                key = (lev, lo[0] // mx, lo[1] // my)
                if j < nleaf:  # leaves first, in the order of sim.geom
                    p = leaf_idx[j]
                    assert key == (lev, int(snap["gqx"][p]), int(snap["gqy"][p]))
                    assert not blank.any()
                    exp = _expected(snap["q"][p : p + 1])
                    for name in names:
                        _check_values(name, arrays[name], exp[name][0])
                    area_leaves += arrays["h"].sum() * h * h
                else:  # an averaged ancestor, covered entirely by finer blocks
                    assert key in anc
                    assert blank.all()
                    blanked_somewhere = True
                mass_level += arrays["h"].sum() * h * h
            if k == 0:  # the coarsest level covers the domain: it holds all the mass
                total = sum(
                    snap["q"][p, 0].sum() * (5.0 / (mx * 2 ** int(lev_p))) ** 2
                    for p, lev_p in enumerate(snap["level"])
                )
                assert mass_level == pytest.approx(total, rel=1e-12)
        # count of blanked cells over the frame = cells of the ancestors
        nblank = sum(
            int(((_cell_arrays(data.GetDataSetAsImageData(k, j))["vtkGhostType"] & REFINED) != 0)
                .sum())
            for k in range(data.GetNumberOfLevels())
            for j in range(data.GetNumberOfBlocks(k))
        )
        assert nblank == len(anc) * mx * my
        assert area_leaves == pytest.approx(
            sum(snap["q"][p, 0].sum() * (5.0 / (mx * 2 ** int(lv))) ** 2
                for p, lv in enumerate(snap["level"])), rel=1e-12)
    assert blanked_somewhere
    # the last frame is the final state: ranges of every field equal the simulation's
    last = amr.snapshots[-1]
    assert last["t"] == sim.t
    exp = _expected(last["q"])
    reader = vtkXMLUniformGridAMRReader()
    reader.SetFileName(str(amr.written[-1][2].with_suffix(".vthb")))
    reader.SetMaximumLevelsToReadByDefault(0)
    reader.Update()
    data = reader.GetOutput()
    for name in names:
        leaf_vals = []
        for k in range(data.GetNumberOfLevels()):
            nleaf = last["ppl"].get(int(last["level"].min()) + k, 0)
            for j in range(nleaf):
                leaf_vals.append(_cell_arrays(data.GetDataSetAsImageData(k, j))[name])
        leaf_vals = np.concatenate(leaf_vals)
        assert leaf_vals.min() == pytest.approx(exp[name].min(), rel=1e-14, abs=1e-300)
        assert leaf_vals.max() == pytest.approx(exp[name].max(), rel=1e-14, abs=1e-300)


def test_flat_frames_read_back(run):
    sim, _, flat, _ = run
    names = list(sim.riemann.field_names) + SHALLOW_DERIVED
    for (t, _, path), snap in zip(flat.written, flat.snapshots):
        reader = vtkXMLMultiBlockDataReader()
        reader.SetFileName(str(path))
        reader.Update()
        mb = reader.GetOutput()
        # one block per level, named, holding that level's leaves in patch order
        levels = sorted(snap["ppl"])
        assert mb.GetNumberOfBlocks() == len(levels)
        blocks = []
        for k, lev in enumerate(levels):
            assert mb.GetMetaData(k).Get(mb.NAME()) == f"level {lev}"
            sub = mb.GetBlock(k)
            assert sub.GetNumberOfBlocks() == snap["ppl"][lev]
            mine = np.flatnonzero(snap["level"] == lev)
            for j in range(sub.GetNumberOfBlocks()):
                assert sub.GetMetaData(j).Get(mb.NAME()) == f"patch {mine[j]}"
                blocks.append((mine[j], sub.GetBlock(j)))
        assert len(blocks) == len(snap["level"])
        exp = _expected(snap["q"])
        for p, grid in blocks:
            h = 5.0 / (sim.mx * 2 ** int(snap["level"][p]))
            assert grid.GetSpacing()[:2] == pytest.approx((h, h), rel=1e-12)
            assert grid.GetNumberOfCells() == sim.mx * sim.my
            x0 = -2.5 + int(snap["gqx"][p]) * sim.mx * h
            y0 = -2.5 + int(snap["gqy"][p]) * sim.my * h
            assert grid.GetOrigin()[:2] == pytest.approx((x0, y0), abs=1e-12)
            arrays = _cell_arrays(grid)
            assert list(arrays) == names
            for name in names:
                _check_values(name, arrays[name], exp[name][p])
            assert vtk_to_numpy(grid.GetFieldData().GetArray("TimeValue"))[0] == t


def test_leaves_only_and_overwrite(run, tmp_path):
    sim = run[0]
    path = write_frame(sim, tmp_path / "leaves.vthb", time=1.5, coarse_levels=False)
    assert path == tmp_path / "leaves.vthb"
    again = write_frame(sim, tmp_path / "leaves", coarse_levels=False)  # replaces it
    assert again == path
    reader = vtkXMLUniformGridAMRReader()
    reader.SetFileName(str(path))
    reader.SetMaximumLevelsToReadByDefault(0)
    reader.Update()
    data = reader.GetOutput()
    ppl = sim.patches_per_level()
    lmin = min(ppl)
    assert [data.GetNumberOfBlocks(k) for k in range(data.GetNumberOfLevels())] == [
        ppl.get(lmin + k, 0) for k in range(max(ppl) - lmin + 1)
    ]
    assert sorted(os.listdir(tmp_path)) == ["leaves", "leaves.vthb", "leaves.vtm"]
    assert len(os.listdir(tmp_path / "leaves")) == sim.geom.npatch


def test_bad_kind(run, tmp_path):
    with pytest.raises(ValueError, match="unknown VTK frame kind 'vtu'"):
        write_frame(run[0], tmp_path / "f", kind="vtu")
    with pytest.raises(ValueError, match="unknown VTK frame kind"):
        VTKOutput(tmp_path, kind="png")
    with pytest.raises(ValueError, match="every_steps"):
        VTKOutput(tmp_path, every_steps=0)
    with pytest.raises(ValueError, match="interval"):
        VTKOutput(tmp_path, interval=-1.0)
    assert not os.listdir(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs POSIX permissions and a non-root user")
def test_read_only_directory(run, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OSError):
            write_frame(run[0], ro / "frame")
        assert not os.listdir(ro)
    finally:
        ro.chmod(0o755)


def test_unwritable_destination(run, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        write_frame(run[0], blocker / "frame")
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_failure_leaves_no_half_frame(run, tmp_path, monkeypatch):
    sim = run[0]
    first = write_frame(sim, tmp_path / "f", kind="flat")
    before = {p: (tmp_path / "f" / p).read_bytes() for p in os.listdir(tmp_path / "f")}
    index_before = first.read_bytes()
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith(".vtm"):
            raise OSError("disk full (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(fvtk.os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        write_frame(sim, tmp_path / "f", kind="flat", time=9.0)
    with pytest.raises(OSError, match="simulated"):
        write_frame(sim, tmp_path / "g", kind="flat")
    monkeypatch.undo()
    # the old frame is intact, the new one left nothing, no temporaries remain
    assert sorted(os.listdir(tmp_path)) == ["f", "f.vtm"]
    assert first.read_bytes() == index_before
    assert {p: (tmp_path / "f" / p).read_bytes() for p in os.listdir(tmp_path / "f")} == before

    # a failing VTK writer leaves nothing either
    class Broken:
        def __getattr__(self, name):
            return lambda *a, **k: 0

    real_vtk = fvtk._vtk

    def broken_vtk():
        d = dict(real_vtk())
        d["vtkXMLUniformGridAMRWriter"] = Broken
        return d

    monkeypatch.setattr(fvtk, "_vtk", broken_vtk)
    with pytest.raises(OSError, match="could not write"):
        write_frame(sim, tmp_path / "h")
    assert sorted(os.listdir(tmp_path)) == ["f", "f.vtm"]


def test_pvd_round_trip(tmp_path):
    pvd = PVDCollection(tmp_path / "run.pvd")
    times = [0.0, 0.1, 1 / 3, 2.5e-7]
    files = ["a_0000.vthb", "a&b <1>.vthb", "sub/c.vtm", tmp_path / "d.vthb"]
    for t, f in zip(times, files):
        pvd.add(t, f)
        assert read_pvd(pvd.path) == [(float(x), str(Path(y).name) if isinstance(y, Path)
                                       else y) for x, y in zip(times, files)][: len(pvd)]
    entries = read_pvd(tmp_path / "run.pvd")
    assert [t for t, _ in entries] == times  # exact: written with repr
    assert entries[-1][1] == "d.vthb"  # absolute paths stored relative to the .pvd
    assert PVDCollection.read(pvd.path).entries == entries
    with pytest.raises(ValueError, match="finite"):
        pvd.add(math.nan, "x.vthb")
    (tmp_path / "bad.pvd").write_text("<html/>")
    with pytest.raises(ValueError, match="collection"):
        read_pvd(tmp_path / "bad.pvd")
    (tmp_path / "broken.pvd").write_text("<VTKFile")
    with pytest.raises(ValueError, match="readable"):
        read_pvd(tmp_path / "broken.pvd")


def test_output_times_and_restart_continuation(radial_dam, tmp_path):
    sim = radial_dam.setup(mx=8, min_level=1, max_level=2, t_final=0.1)
    out = VTKOutput(tmp_path, times=[0.02, 0.021, 0.06], every_steps=100)
    sim.callbacks.append(out)
    sim.run(t_final=0.05)
    ts = [t for t, _, _ in out.written]
    assert ts[0] == 0.0 and ts[-1] == sim.t
    assert sum(1 for t in ts[1:-1] if t >= 0.02) == len(ts) - 2  # one frame for 0.02/0.021
    assert len(ts) == len(set(ts))
    n_first = len(read_pvd(out.pvd_path))
    # continue the same simulation: the collection keeps the earlier frames
    sim.run(t_final=0.1)
    entries = read_pvd(out.pvd_path)
    assert [t for t, _ in entries[: n_first - 1]] == ts[:-1]
    assert entries[-1][0] == pytest.approx(0.1)
    assert [t for t, _ in entries] == sorted(t for t, _ in entries)
    assert len({f for _, f in entries}) == len(entries)
    assert all((tmp_path / f).is_file() for _, f in entries)


def test_derived_fields_declared_and_dry_cells():
    for name in ("shallow_roe", "shallow_hlle"):
        assert list(get_riemann(name).derived_fields) == SHALLOW_DERIVED
    shallow = get_riemann("shallow_roe")
    q = np.zeros((2, 3, 2, 2))
    q[0, 0] = 2.0
    q[0, 1] = 1.0
    q[0, 2] = -2.0
    q[1, 1] = 5.0  # dry cells with momentum: velocity 0, no warning
    aux = np.zeros((2, 0, 2, 2))
    params = shallow.params_array()
    got = {k: f(q, aux, params) for k, f in shallow.derived_fields.items()}
    np.testing.assert_array_equal(got["velocity_x"][0], 0.5)
    np.testing.assert_array_equal(got["velocity_y"][0], -1.0)
    np.testing.assert_allclose(got["speed"][0], math.sqrt(1.25))
    for k in ("velocity_x", "velocity_y", "speed"):
        np.testing.assert_array_equal(got[k][1], 0.0)
    np.testing.assert_array_equal(got["surface"], q[:, 0])

    euler = get_riemann("euler")
    assert list(euler.derived_fields) == ["velocity_x", "velocity_y", "pressure"]
    rho, u, v, p, gamma = 1.3, 0.4, -0.7, 2.0, 1.6
    qe = np.empty((1, 4, 1, 1))
    qe[0, :, 0, 0] = [rho, rho * u, rho * v, p / (gamma - 1) + 0.5 * rho * (u * u + v * v)]
    pe = euler.params_array({"gamma": gamma})
    ef = euler.derived_fields
    assert ef["pressure"](qe, np.zeros((1, 0, 1, 1)), pe)[0, 0, 0] == pytest.approx(p)
    assert ef["velocity_y"](qe, None, pe)[0, 0, 0] == pytest.approx(v)

    assert get_riemann("advection").derived_fields == {}
    with pytest.raises(ValueError, match="repeat field_names"):
        RiemannSolver("x", 1, 1, rpn2=None, field_names=("q",),
                      derived_fields={"q": lambda q, aux, params: q[:, 0]})
    with pytest.raises(TypeError, match="not callable"):
        RiemannSolver("x", 1, 1, rpn2=None, derived_fields={"d": 3})
