"""Distributed runs (forestpy.parallel) against the serial run, launched with mpirun.

Each test starts ``mpirun -n N python tests/mpi_scripts/run_demo.py`` (a subprocess
with a timeout, so a deadlock fails the test instead of hanging CI) and compares rank
0's gathered final state with the serial run done here: bitwise, since every patch
does the same arithmetic whichever rank steps it.
"""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "mpi_scripts" / "run_demo.py"
# FORESTPY_MPIRUN names the launcher where another MPI's mpirun comes first on PATH
MPIRUN = os.environ.get("FORESTPY_MPIRUN") or shutil.which(
    "mpirun", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("mpirun")

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (pip install mpich)")

# regrids every 4 steps: between them the ranks step on halo exchanges alone
AMR = dict(mx=8, min_level=2, max_level=5, t_final=0.3, regrid_interval=4)
UNIFORM = dict(mx=8, min_level=3, max_level=3, t_final=0.3)


def launch(n, out, mode, **opts):
    cmd = [MPIRUN, "-n", str(n), sys.executable, str(SCRIPT), str(out), mode, json.dumps(opts)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = dict(np.load(out / "result.npz"))
    assert len(result["owned"]) == n, "the ranks did not form one MPI job"
    return result


def serial(radial_dam, **opts):
    return radial_dam.setup(**opts).run()


def assert_same_state(par, sim):
    b = sim.mbc
    assert par["t"] == sim.t
    assert par["steps"] == sim.steps and par["regrids"] == sim.regrids
    np.testing.assert_array_equal(par["level"], sim.forest.level)
    # ghost cells of the last step are unset in both runs: compare the interiors
    q = sim.backend.to_host(sim.q)
    np.testing.assert_array_equal(par["q"][:, :, b:-b, b:-b], q[:, :, b:-b, b:-b])
    np.testing.assert_array_equal(par["totals"], list(sim.totals().values()))


def assert_local_layout(par):
    # each rank's patch arrays (q, aux, aux_setaux) hold exactly its owned patches and
    # its halo, in the compact local layout, not one row per patch of the forest
    rows, aux_rows, setaux_rows, owned, halo, full = par["layout"].T
    assert (full == 0).all()
    np.testing.assert_array_equal(rows, owned + halo)
    np.testing.assert_array_equal(aux_rows, rows)
    np.testing.assert_array_equal(setaux_rows, rows)


@pytest.fixture(scope="module")
def serial_amr(radial_dam):
    sim = serial(radial_dam, **AMR)
    assert sim.regrids >= 4 and len(sim.patches_per_level()) == 3  # forest changes
    return sim


@pytest.mark.parametrize("overlap, whole", [(True, 0.25), (True, 1.0), (False, 0.25)])
def test_uniform_grid_is_bitwise_the_serial_run(tmp_path, radial_dam, overlap, whole):
    # no regrid, so no gather: only the halo exchange feeds the ghost cells; with
    # overlap the patches needing no remote data step before the halo is waited for
    # (gathered, or with whole=1.0 the whole owned range, then the late ones again)
    par = launch(3, tmp_path, "run", overlap=overlap, whole_range_fraction=whole, **UNIFORM)
    assert par["gathers"] == 0
    assert (par["split"][:, 1] > 0).all() and par["split"].sum() == 64  # late patches
    assert_local_layout(par)
    assert_same_state(par, serial(radial_dam, **UNIFORM))


@pytest.mark.parametrize("n", [2, 3])
def test_radial_dam_amr_is_bitwise_the_serial_run(tmp_path, serial_amr, n):
    # regrids move only the old patches each new owner needs: the state is never gathered
    par = launch(n, tmp_path, "run", **AMR)
    assert (par["owned"] > 0).all() and par["owned"].sum() == serial_amr.geom.npatch
    assert par["gathers"] == 0
    early, late = par["split"].T
    assert (late > 0).all() and (early > 0).all()
    assert_local_layout(par)
    assert par["layout"][:, 0].sum() < 0.8 * n * serial_amr.geom.npatch
    assert_same_state(par, serial_amr)


def test_geoclaw_bowl_with_amr_is_bitwise_the_serial_run(tmp_path):
    # wet/dry shallow water over a bottom: surface-aware ghost fill, source hook, regrids
    # that transfer the surface; the state never gathered
    sys.path.insert(0, str(SCRIPT.parent))
    import bowl

    sim = bowl.setup().run()
    assert sim.regrids >= 10 and len(sim.patches_per_level()) == 2
    par = launch(2, tmp_path, "run", demo="bowl")
    assert par["gathers"] == 0 and (par["split"][:, 1] > 0).all()
    assert_local_layout(par)
    assert_same_state(par, sim)


def test_geoclaw_discharge_sources_on_3_ranks_are_bitwise_the_serial_run(tmp_path):
    # the source hook runs on the owned patches of each rank (every rank, also one
    # holding none of the source cells): each rank selects its cells, the area is summed
    # over all ranks in patch order, the point source's cell lies on one rank only
    sys.path.insert(0, str(SCRIPT.parent))
    import bowl

    sim = bowl.setup(sources=bowl.sources(), t_final=1.0).run()
    assert sim.geoclaw_sources.volume_added > 0
    par = launch(3, tmp_path, "run", demo="bowl", sources=True, t_final=1.0)
    assert par["gathers"] == 0
    assert_local_layout(par)
    assert_same_state(par, sim)


def test_callbacks_see_the_whole_state_after_every_step(tmp_path, radial_dam):
    sys.path.insert(0, str(SCRIPT.parent))
    from recorder import Recorder

    rec = Recorder()
    sim = radial_dam.setup(**AMR)
    sim.callbacks = [rec]
    sim.run()
    par = launch(2, tmp_path, "run", record=True, **AMR)
    assert len(rec.rows) == sim.steps > 0
    np.testing.assert_array_equal(par["record"], np.array(rec.rows))


def test_ranks_owning_no_patch_do_not_deadlock(tmp_path, serial_amr):
    # weights put every leaf on the last rank, through every regrid (repartition)
    par = launch(3, tmp_path, "run", weights="first_rank_heavy", **AMR)
    assert list(par["owned"][:2]) == [0, 0]
    assert list(par["layout"][:2, 0]) == [0, 0]  # no patch, no halo: empty arrays
    assert_local_layout(par)
    assert_same_state(par, serial_amr)


def test_repartition_after_every_regrid_keeps_the_data(tmp_path, serial_amr):
    # weights that alternate between regrids: half of the leaves change owner each time,
    # so the migration (not only the halo) must bring each new owner its old patches
    par = launch(2, tmp_path, "run", weights="alternating", **AMR)
    assert par["migrated"] > serial_amr.geom.npatch and par["gathers"] == 0
    assert_local_layout(par)
    assert_same_state(par, serial_amr)


def test_each_rank_holds_only_its_patches_and_halo(tmp_path, radial_dam):
    # per-rank memory: 1024 patches on 3 ranks; each rank allocates its ~341 owned
    # patches plus a one-patch-deep halo (tens), not 1024 rows (the rows of all ranks
    # together were 3 x 1024 with global indexing); the state is bitwise the serial one
    opts = dict(mx=8, min_level=5, max_level=5, t_final=0.02)
    par = launch(3, tmp_path, "run", **opts)
    sim = serial(radial_dam, **opts)
    assert sim.geom.npatch == 1024 and par["gathers"] == 0
    assert_local_layout(par)
    rows, owned, halo = par["layout"][:, 0], par["layout"][:, 3], par["layout"][:, 4]
    assert owned.sum() == 1024 and (halo > 0).all() and (halo < 0.3 * owned).all()
    assert rows.sum() < 1.25 * sim.geom.npatch  # far below 3 x 1024
    assert_same_state(par, sim)


def test_more_ranks_than_patches(tmp_path, radial_dam):
    opts = dict(mx=8, min_level=0, max_level=0, t_final=0.2)
    par = launch(3, tmp_path, "run", **opts)
    assert sorted(par["owned"]) == [0, 0, 1]
    assert_same_state(par, serial(radial_dam, **opts))


def test_checkpoint_written_on_2_ranks_restarts_on_3(tmp_path, serial_amr):
    first = launch(2, tmp_path, "save", max_steps=6, **AMR)
    assert 0 < first["t"] < AMR["t_final"]
    par = launch(3, tmp_path, "restore", **AMR)
    assert_same_state(par, serial_amr)


def _read_amr(path):
    """{(level, block origin, dimensions): {field: cell values}} of a .vthb frame."""
    vtk = pytest.importorskip("vtk")
    from vtk.util.numpy_support import vtk_to_numpy

    reader = vtk.vtkXMLUniformGridAMRReader()
    reader.SetFileName(str(path))
    reader.SetMaximumLevelsToReadByDefault(0)
    reader.Update()
    amr, blocks = reader.GetOutput(), {}
    for lev in range(amr.GetNumberOfLevels()):
        for j in range(amr.GetNumberOfBlocks(lev)):
            block = amr.GetDataSetAsImageData(lev, j)
            cd = block.GetCellData()
            key = (lev, block.GetOrigin(), block.GetDimensions())
            blocks[key] = {cd.GetArrayName(k): vtk_to_numpy(cd.GetArray(k)).copy()
                           for k in range(cd.GetNumberOfArrays())}
    return blocks


def test_vtk_frames_and_gauges_are_written_without_gathering(tmp_path, radial_dam):
    # VTK: each rank writes its own blocks, rank 0 the .vthb and .pvd; every frame holds
    # the serial run's leaves at the same time, block for block.  Gauges: each rank
    # samples those in its own patches, rank 0 writes the file, byte for byte the serial
    # one.  The state is never gathered.
    from forestpy.callbacks import Gauges, read_gauges
    from forestpy.io.vtk import VTKOutput, read_pvd

    vtk = importlib.util.find_spec("vtk") is not None  # optional: then gauges alone
    points = [(0.0, 0.0), (0.5, 0.3), (-1.2, 0.7), (1.9, -1.9)]  # as in run_demo.py
    sim = radial_dam.setup(**AMR)
    sim.callbacks = [Gauges(points, path=tmp_path / "serial.csv")]
    if vtk:
        sim.callbacks.append(VTKOutput(tmp_path / "serial", interval=0.1, coarse_levels=False))
    sim.run()
    par = launch(3, tmp_path, "run", vtk=vtk, gauges=True, **AMR)
    assert par["gathers"] == 0
    assert_local_layout(par)
    assert_same_state(par, sim)
    want = read_gauges(tmp_path / "serial.csv")
    assert len(want) == 4 and len(want[0]["t"]) == sim.steps + 1
    assert (tmp_path / "gauges.csv").read_bytes() == (tmp_path / "serial.csv").read_bytes()
    if not vtk:
        return
    frames = read_pvd(tmp_path / "vtk" / "frame.pvd")
    ref_frames = read_pvd(tmp_path / "serial" / "frame.pvd")
    assert len(frames) == 4 and [t for t, _ in frames] == [t for t, _ in ref_frames]
    for (_, got_file), (_, want_file) in zip(frames, ref_frames):
        got = _read_amr(tmp_path / "vtk" / got_file)
        ref = _read_amr(tmp_path / "serial" / want_file)
        assert got.keys() == ref.keys() and len(got) >= 64
        for key, fields in ref.items():
            assert fields.keys() == got[key].keys()
            for name, values in fields.items():
                np.testing.assert_array_equal(got[key][name], values)


def test_serial_checkpoint_restarts_on_2_ranks(tmp_path, radial_dam, serial_amr):
    sim = radial_dam.setup(**AMR)
    sim.run(max_steps=6)
    sim.save_checkpoint(tmp_path / "ck.npz")
    par = launch(2, tmp_path, "restore", **AMR)
    assert_same_state(par, serial_amr)


@pytest.mark.slow
def test_gpu_backend_is_bitwise_the_serial_run(tmp_path, radial_dam):
    # the GPU path (device arrays, buffers staged through the host), uniform grid; in CI in
    # Numba's CUDA simulator (~20 s), on a GPU machine with NUMBA_ENABLE_CUDASIM=0
    opts = dict(mx=8, min_level=1, max_level=1, t_final=0.1, backend="gpu")  # 4 patches
    par = launch(2, tmp_path, "run", **opts)
    sim = serial(radial_dam, **opts)
    assert (par["owned"] > 0).all()
    assert_same_state(par, sim)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0",
                    reason="a real GPU only (too slow in the CUDA simulator)")
def test_gpu_backend_with_amr_is_bitwise_the_serial_run(tmp_path, radial_dam):
    # device ghost fill split early/late, staged exchanges, coarse-fine time sync across
    # ranks on device arrays, migration at every regrid
    opts = dict(AMR, backend="gpu")
    par = launch(2, tmp_path, "run", **opts)
    sim = serial(radial_dam, **opts)
    assert_local_layout(par)
    assert par["gathers"] == 0 and sim.regrids >= 4
    assert_same_state(par, sim)
