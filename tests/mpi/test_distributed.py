"""Distributed runs (forestpy.parallel) against the serial run.

The distributed runs are the scenarios of ``mpi_scenarios.py``, launched together, one
``mpirun`` per rank count (tests/mpi/conftest.py); each test compares rank 0's gathered
final state of its scenarios with the serial run done here: bitwise, since every patch
does the same arithmetic whichever rank steps it.
"""

import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from mpi_scenarios import (
    AMR,
    AMR_SUBCYCLED,
    GAUGE_POINTS,
    HAVE_VTK,
    ONE_PATCH,
    PATCHES_1024,
    SCENARIOS,
    UNIFORM,
)

pytest.importorskip("mpi4py")
sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))
import bowl  # noqa: E402
from recorder import Recorder  # noqa: E402

REAL_GPU = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0",
                              reason="a real GPU only (too slow in the CUDA simulator)")


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


def assert_no_global_state_in_summary(par):
    # summary() (the totals) gathers per-patch integrals, not the state: no rank gathers,
    # allocates anything near a global-size state array, or leaves the local layout
    gathered, peak, _, global_bytes, _, rows = par["memory"].T
    assert (gathered == 0).all()
    assert (peak < 0.5 * global_bytes).all(), (peak, global_bytes)
    np.testing.assert_array_equal(rows, par["layout"][:, 0])


def assert_local_layout(par):
    # each rank's patch arrays (q, aux, aux_setaux) hold exactly its owned patches and
    # its halo, in the compact local layout, not one row per patch of the forest
    rows, aux_rows, setaux_rows, owned, halo, full = par["layout"].T
    assert (full == 0).all()
    np.testing.assert_array_equal(rows, owned + halo)
    np.testing.assert_array_equal(aux_rows, rows)
    np.testing.assert_array_equal(setaux_rows, rows)


@pytest.fixture(scope="session")
def serial_amr(radial_dam):
    sim = serial(radial_dam, **AMR)
    assert sim.regrids >= 4 and len(sim.patches_per_level()) == 3  # forest changes
    return sim


@pytest.fixture(scope="session")
def serial_bowl():
    sim = bowl.setup().run()
    assert sim.regrids >= 10 and len(sim.patches_per_level()) == 2
    return sim


@pytest.mark.mpi("uniform_overlap_3", "uniform_overlap_whole_range_3", "uniform_no_overlap_3")
@pytest.mark.parametrize("name", ["uniform_overlap_3", "uniform_overlap_whole_range_3",
                                  "uniform_no_overlap_3"])
def test_uniform_grid_is_bitwise_the_serial_run(mpi, radial_dam, name):
    # no regrid, so no gather: only the halo exchange feeds the ghost cells; with
    # overlap the patches needing no remote data step before the halo is waited for
    # (gathered, or with whole=1.0 the whole owned range, then the late ones again)
    par = mpi(name)
    assert par["gathers"] == 0
    assert (par["split"][:, 1] > 0).all() and par["split"].sum() == 64  # late patches
    # the early/late split is made on first use: never without overlap
    assert (par["split_made"] == (name != "uniform_no_overlap_3")).all()
    # the halo exchange moves boundary strips: the 2-cell ring inside each 8 x 8 patch
    # (48 of the 144 padded cells), not whole patches
    np.testing.assert_array_equal(par["strips"], [[48, 144]] * 3)
    assert_local_layout(par)
    assert_same_state(par, serial(radial_dam, **UNIFORM))


@pytest.mark.mpi("amr_2", "amr_3")
@pytest.mark.parametrize("n", [2, 3])
def test_radial_dam_amr_is_bitwise_the_serial_run(mpi, serial_amr, n):
    # regrids move only the old patches each new owner needs: the state is never gathered
    par = mpi(f"amr_{n}")
    assert (par["owned"] > 0).all() and par["owned"].sum() == serial_amr.geom.npatch
    assert par["gathers"] == 0
    early, late = par["split"].T
    assert (late > 0).all() and (early > 0).all()
    assert_local_layout(par)
    assert par["layout"][:, 0].sum() < 0.8 * n * serial_amr.geom.npatch
    assert not par["centres_made"].any()  # nothing here asks for the cell centres
    assert_same_state(par, serial_amr)


@pytest.mark.mpi("amr_subcycled_3")
def test_subcycled_radial_dam_is_bitwise_the_serial_run(mpi, radial_dam):
    # each level its own dt: a halo exchange per level step, the coarse state at the
    # start of its step exchanged for the finer levels' ghost cells in time, the fine
    # edge fluxes of remote patches for the time sync, and partial regrids that migrate
    # the frozen levels' old state with the patches
    sim = serial(radial_dam, **AMR_SUBCYCLED)
    assert sim.subcycling and sim.regrids >= 4 and len(sim.patches_per_level()) >= 3
    assert len(set(sim.level_steps.values())) >= 3
    par = mpi("amr_subcycled_3")
    assert (par["owned"] > 0).all()
    assert_local_layout(par)
    assert_same_state(par, sim)


@pytest.mark.mpi("bowl_subcycled_2")
def test_subcycled_geoclaw_bowl_is_bitwise_the_serial_run(mpi):
    # wet/dry over a bottom with the source hook per level (positivity across ranks)
    sim = bowl.setup(subcycle=True).run()
    assert sim.subcycling and sim.regrids >= 5
    assert_same_state(mpi("bowl_subcycled_2"), sim)


@pytest.mark.mpi("bowl_2")
def test_geoclaw_bowl_with_amr_is_bitwise_the_serial_run(mpi, serial_bowl):
    # wet/dry shallow water over a bottom: surface-aware ghost fill, source hook, regrids
    # that transfer the surface; the state never gathered
    par = mpi("bowl_2")
    assert par["gathers"] == 0 and (par["split"][:, 1] > 0).all()
    assert_local_layout(par)
    assert_same_state(par, serial_bowl)


@pytest.mark.mpi("distributed_build_2", "distributed_build_3")
@pytest.mark.parametrize("n", [2, 3])
def test_distributed_initial_build_is_bitwise_the_serial_run(mpi, radial_dam, serial_amr,
                                                             monkeypatch, n):
    # distributed_setup: the initial refinement (levels 2..5) runs on the ranks, each
    # evaluating qinit/setaux on its owned + halo patches only; the initial state, its
    # totals and the run are bitwise the serial ones
    serial_cells = []
    qinit = radial_dam.qinit
    monkeypatch.setattr(radial_dam, "qinit",
                        lambda x, y: serial_cells.append(x.size) or qinit(x, y))
    built = radial_dam.setup(**AMR)
    assert len(serial_cells) >= 3  # the initial levels
    par = mpi(f"distributed_build_{n}")
    flag, cells = par["build"].T
    assert (flag == 1).all()
    assert (cells > 0).all() and (cells < 0.8 * sum(serial_cells)).all()
    # owned + halo rows only: well below n x the serial cells (few patches: halo large)
    assert cells.sum() < 0.7 * n * sum(serial_cells)
    np.testing.assert_array_equal(par["totals_initial"], list(built.totals_initial.values()))
    assert par["gathers"] == 0
    assert_local_layout(par)
    assert_no_global_state_in_summary(par)
    assert_same_state(par, serial_amr)


@pytest.mark.mpi("bowl_distributed_build_3")
def test_distributed_initial_build_of_a_geoclaw_case(mpi, serial_bowl):
    # setaux (the bottom) and qinit on the local rows, surface-aware ghost fill and
    # tagging of the owned patches during the initial refinement
    par = mpi("bowl_distributed_build_3")
    assert (par["build"][:, 0] == 1).all() and par["gathers"] == 0
    np.testing.assert_array_equal(par["totals_initial"],
                                  list(serial_bowl.totals_initial.values()))
    assert_local_layout(par)
    assert_same_state(par, serial_bowl)


@pytest.mark.mpi("bowl_sources_3")
def test_geoclaw_discharge_sources_on_3_ranks_are_bitwise_the_serial_run(mpi):
    # the source hook runs on the owned patches of each rank (every rank, also one
    # holding none of the source cells): each rank selects its cells, the area is summed
    # over all ranks in patch order, the point source's cell lies on one rank only
    sim = bowl.setup(sources=bowl.sources(), t_final=1.0).run()
    assert sim.geoclaw_sources.volume_added > 0
    par = mpi("bowl_sources_3")
    assert par["gathers"] == 0
    assert_local_layout(par)
    assert_same_state(par, sim)


@pytest.mark.mpi("record_2")
def test_callbacks_see_the_whole_state_after_every_step(mpi, radial_dam):
    rec = Recorder()
    sim = radial_dam.setup(**AMR)
    sim.callbacks = [rec]
    sim.run()
    par = mpi("record_2")
    assert len(rec.rows) == sim.steps > 0
    np.testing.assert_array_equal(par["record"], np.array(rec.rows))
    # the state is gathered to rank 0 only (Gatherv), once per step, and rank 0 holds
    # its local layout again after the callbacks: no rank keeps the global state
    assert par["gathers"] == sim.steps
    assert (par["memory"][:, 4] == 0).all()


@pytest.mark.mpi("first_rank_heavy_3")
def test_ranks_owning_no_patch_do_not_deadlock(mpi, serial_amr):
    # weights put every leaf on the last rank, through every regrid (repartition)
    par = mpi("first_rank_heavy_3")
    assert list(par["owned"][:2]) == [0, 0]
    assert list(par["layout"][:2, 0]) == [0, 0]  # no patch, no halo: empty arrays
    assert_local_layout(par)
    assert_same_state(par, serial_amr)


@pytest.mark.mpi("alternating_weights_2")
def test_repartition_after_every_regrid_keeps_the_data(mpi, serial_amr):
    # weights that alternate between regrids: half of the leaves change owner each time,
    # so the migration (not only the halo) must bring each new owner its old patches
    par = mpi("alternating_weights_2")
    assert par["migrated"] > serial_amr.geom.npatch and par["gathers"] == 0
    assert_local_layout(par)
    assert_same_state(par, serial_amr)


@pytest.mark.mpi("patches_1024_3")
def test_each_rank_holds_only_its_patches_and_halo(mpi, radial_dam):
    # per-rank memory: 1024 patches on 3 ranks; each rank allocates its ~341 owned
    # patches plus a one-patch-deep halo (tens), not 1024 rows (the rows of all ranks
    # together were 3 x 1024 with global indexing); the state is bitwise the serial one
    par = mpi("patches_1024_3")
    sim = serial(radial_dam, **PATCHES_1024)
    assert sim.geom.npatch == 1024 and par["gathers"] == 0
    assert_local_layout(par)
    rows, owned, halo = par["layout"][:, 0], par["layout"][:, 3], par["layout"][:, 4]
    assert owned.sum() == 1024 and (halo > 0).all() and (halo < 0.3 * owned).all()
    assert rows.sum() < 1.25 * sim.geom.npatch  # far below 3 x 1024
    assert_same_state(par, sim)  # the totals too, bitwise
    assert_no_global_state_in_summary(par)


@pytest.mark.mpi("amr_3")
def test_totals_are_a_reduction_of_per_patch_integrals(mpi, serial_amr):
    # AMR (patches of several sizes), 3 ranks: summary()'s totals are bitwise the serial
    # totals without gathering the state to any rank (the run of
    # test_radial_dam_amr_is_bitwise_the_serial_run[3], the same launch options)
    par = mpi("amr_3")
    assert_no_global_state_in_summary(par)
    assert_same_state(par, serial_amr)


def test_per_patch_integrals_do_not_depend_on_the_batch(radial_dam):
    # what makes the distributed totals bitwise: a patch's integral is the same whether
    # computed with all patches or with any subset (rows of a local array)
    sim = radial_dam.setup(**AMR)
    sim.run(max_steps=5)
    full = sim._patch_totals(slice(None), sim.geom)
    n = sim.geom.npatch
    for lo, hi in ((0, 1), (3, n // 2), (n // 3, n), (n - 1, n)):
        ids = np.arange(lo, hi)
        geom = SimpleNamespace(dx=sim.geom.dx[ids], dy=sim.geom.dy[ids])
        np.testing.assert_array_equal(sim._patch_totals(ids, geom), full[lo:hi])
        local = np.concatenate([ids, np.arange(0, lo)])  # owned rows first, then others
        sim_q = sim.q
        try:
            sim.q = sim_q[local]
            np.testing.assert_array_equal(sim._patch_totals(slice(0, hi - lo), geom),
                                          full[lo:hi])
        finally:
            sim.q = sim_q
    assert list(sim.totals().values()) == [math.fsum(full[:, k]) for k in range(full.shape[1])]


@pytest.mark.mpi("one_patch_3", "one_patch_distributed_3")
@pytest.mark.parametrize("build", ["serial", "distributed"])
def test_more_ranks_than_patches(mpi, radial_dam, build):
    # distributed build: ranks holding no patch do not call qinit, and do not deadlock
    par = mpi("one_patch_distributed_3" if build == "distributed" else "one_patch_3")
    assert sorted(par["owned"]) == [0, 0, 1]
    assert sorted(par["build"][:, 1]) == ([0, 0, 144] if build == "distributed" else [0, 0, 0])
    assert_same_state(par, serial(radial_dam, **ONE_PATCH))


def assert_saved_per_rank(first, nranks, memory=True):
    # each rank wrote its own patches, rank 0 the index: nobody gathered the state (a
    # gather to rank 0 counts in exchange.gathers, recorded after the save) or
    # allocated the global state (NumPy's writer copies the rank's own rows once: in
    # this small case about 1/nranks of the global state)
    assert 0 < first["t"] < AMR["t_final"] and len(first["owned"]) == nranks
    _, _, save_peak, global_bytes, _, _ = first["memory"].T
    assert first["gathers"] == 0
    if memory:  # (a codec's working buffers are not bounded by the state's size here)
        assert (save_peak < (1 / nranks + 0.2) * global_bytes).all(), (save_peak,
                                                                       global_bytes)
    assert_no_global_state_in_summary(first)


def rank_checkpoint(mpi, name):
    """(index, its rank files) of the scenario ``name``'s checkpoint."""
    from forestpy.io.checkpoint import rank_folder

    index = mpi.out(name) / "ck.npz"
    return index, sorted(rank_folder(index).iterdir())


@pytest.mark.mpi("checkpoint_save_2", "checkpoint_restore_3", "checkpoint_restore_2")
@pytest.mark.parametrize("ranks", [3, 2, 1])
def test_per_rank_checkpoint_of_2_ranks_restarts_on_3_2_and_1(mpi, radial_dam, serial_amr,
                                                               ranks):
    first = mpi("checkpoint_save_2")
    assert_saved_per_rank(first, 2)
    index, files = rank_checkpoint(mpi, "checkpoint_save_2")
    assert [f.name[-10:] for f in files] == ["r00000.npz", "r00001.npz"]
    if ranks == 1:  # a serial run reads both rank files
        sim = radial_dam.setup(**AMR).load_checkpoint(index)
        assert sim.steps == 6 and sim.q.shape[0] == sim.forest.n
        sim.run()
        par = {"t": sim.t, "steps": sim.steps, "regrids": sim.regrids,
               "level": sim.forest.level, "q": sim.backend.to_host(sim.q),
               "totals": list(sim.totals().values())}
    else:  # each rank reads the rows of its owned and halo patches into its local layout
        par = mpi(f"checkpoint_restore_{ranks}")
        assert par["gathers"] == 0
    assert_same_state(par, serial_amr)


@pytest.mark.mpi("checkpoint_save_lossless_3")
def test_per_rank_checkpoint_through_a_codec_restarts_bitwise(mpi, radial_dam, serial_amr):
    from forestpy.io.checkpoint import read_checkpoint

    assert_saved_per_rank(mpi("checkpoint_save_lossless_3"), 3, memory=False)
    index, files = rank_checkpoint(mpi, "checkpoint_save_lossless_3")
    assert len(files) == 3
    data = read_checkpoint(index)  # every rank file, decoded into the global arrays
    assert data["codec"] == {"spec": "lossless"} and data["q"].shape[0] == data["forest"].n
    sim = radial_dam.setup(**AMR).restore(data).run()
    np.testing.assert_array_equal(sim.backend.to_host(sim.q), serial_amr.backend.to_host(
        serial_amr.q))


@pytest.mark.mpi("checkpoint_save_2", "checkpoint_save_lossless_3")
@pytest.mark.parametrize("damage", ["flip", "truncate", "missing", "other_run", "index"])
def test_a_damaged_per_rank_checkpoint_is_one_error_naming_the_file(mpi, radial_dam,
                                                                    tmp_path, damage):
    import shutil

    from forestpy.io.checkpoint import CheckpointError, rank_folder, read_checkpoint

    index, files = rank_checkpoint(mpi, "checkpoint_save_2")
    shutil.copy(index, tmp_path / "ck.npz")
    shutil.copytree(rank_folder(index), tmp_path / "ck.ranks")
    index, victim = tmp_path / "ck.npz", tmp_path / "ck.ranks" / files[1].name
    data = victim.read_bytes()
    if damage == "flip":  # one byte inside q
        victim.write_bytes(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 1])
                           + data[len(data) // 2 + 1:])
        problem = "CRC-32"
    elif damage == "truncate":
        victim.write_bytes(data[: len(data) - 100])
        problem = "truncated"
    elif damage == "missing":
        victim.unlink()
        problem = "missing"
    elif damage == "other_run":  # another checkpoint's rank file under this one's name
        _, others = rank_checkpoint(mpi, "checkpoint_save_lossless_3")
        shutil.copy(others[1], victim)
        problem = "index says"
    else:  # an index whose rank files are not there: another run's (or one half-written)
        shutil.copy(mpi.out("checkpoint_save_lossless_3") / "ck.npz", index)
        victim = tmp_path / "ck.ranks" / rank_checkpoint(mpi, "checkpoint_save_lossless_3")[
            1][0].name
        problem = "missing"
    with pytest.raises(CheckpointError, match=problem) as err:
        read_checkpoint(index)
    assert f"rank file ck.ranks/{victim.name}" in str(err.value)
    # a restore that fails leaves the simulation as it was
    sim = radial_dam.setup(**AMR)
    forest, q = sim.forest, sim.q.copy()
    with pytest.raises(CheckpointError, match=problem):
        sim.load_checkpoint(index)
    assert sim.forest is forest and sim.steps == 0
    np.testing.assert_array_equal(sim.q, q)


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


@pytest.fixture(scope="session")
def serial_vtk_gauges(radial_dam, tmp_path_factory):
    """The serial run with gauges (and VTK frames, where vtk is installed)."""
    from forestpy.callbacks import Gauges
    from forestpy.io.vtk import VTKOutput

    out = tmp_path_factory.mktemp("serial_vtk_gauges")
    sim = radial_dam.setup(**AMR)
    sim.callbacks = [Gauges(GAUGE_POINTS, path=out / "serial.csv")]
    if HAVE_VTK:
        sim.callbacks.append(VTKOutput(out / "serial", interval=0.1, coarse_levels=False))
        sim.callbacks.append(VTKOutput(out / "serial", name="rounded", interval=0.1,
                                       coarse_levels=False, tolerance=1e-3))
    sim.run()
    return sim, out


@pytest.mark.mpi("gauges_checkpoint_every_3")
def test_checkpoints_every_few_steps_hold_the_gauge_samples(mpi, radial_dam, tmp_path):
    # the gauges keep their samples on each rank's device between flushes; a checkpoint
    # written mid-run (CheckpointEvery, collective) flushes them on every rank first and
    # holds the samples the serial run's checkpoint of the same step holds
    from forestpy.callbacks import CheckpointEvery, Gauges
    from forestpy.io.checkpoint import read_checkpoint

    sim = radial_dam.setup(**AMR)
    sim.callbacks = [Gauges(GAUGE_POINTS, path=tmp_path / "serial.csv"),
                     CheckpointEvery(tmp_path, 3, keep=100)]
    sim.run()
    name = "gauges_checkpoint_every_3"
    mpi(name)
    out = mpi.out(name)
    assert (out / "gauges.csv").read_bytes() == (tmp_path / "serial.csv").read_bytes()
    written = sorted(p.name for p in (out / "every").glob("checkpoint_0*.npz"))
    assert written == sorted(p.name for p in tmp_path.glob("checkpoint_0*.npz"))
    assert len(written) >= 3
    for fname in written:
        got = read_checkpoint(out / "every" / fname)["callbacks"][0]["state"]
        want = read_checkpoint(tmp_path / fname)["callbacks"][0]["state"]
        assert len(want["times"]) == int(fname[11:17]) + 1
        np.testing.assert_array_equal(got["times"], want["times"])
        np.testing.assert_array_equal(got["values"], want["values"])


@pytest.mark.mpi("vtk_gauges_3", "vtk_gauges_distributed_3")
@pytest.mark.parametrize("build", ["serial", "distributed"])
def test_vtk_frames_and_gauges_are_written_without_gathering(mpi, serial_vtk_gauges, build):
    # VTK: each rank writes its own blocks, rank 0 the .vthb and .pvd; every frame holds
    # the serial run's leaves at the same time, block for block.  Gauges: each rank
    # samples those in its own patches, rank 0 writes the file, byte for byte the serial
    # one.  The state is never gathered.
    from forestpy.callbacks import read_gauges
    from forestpy.io.vtk import read_pvd

    sim, ser = serial_vtk_gauges
    name = "vtk_gauges_distributed_3" if build == "distributed" else "vtk_gauges_3"
    par, out = mpi(name), mpi.out(name)
    assert par["gathers"] == 0
    assert_local_layout(par)
    assert_same_state(par, sim)
    want = read_gauges(ser / "serial.csv")
    assert len(want) == 4 and len(want[0]["t"]) == sim.steps + 1
    assert (out / "gauges.csv").read_bytes() == (ser / "serial.csv").read_bytes()
    if not HAVE_VTK:
        return
    frames = read_pvd(out / "vtk" / "frame.pvd")
    ref_frames = read_pvd(ser / "serial" / "frame.pvd")
    assert len(frames) == 4 and [t for t, _ in frames] == [t for t, _ in ref_frames]
    for (_, got_file), (_, want_file) in zip(frames, ref_frames):
        assert got_file.endswith(".vtm") and want_file.endswith(".vtm")  # levels views
        got = _read_amr((out / "vtk" / got_file).with_suffix(".vthb"))
        ref = _read_amr((ser / "serial" / want_file).with_suffix(".vthb"))
        assert got.keys() == ref.keys() and len(got) >= 64
        # the levels view the .pvd lists holds the same blocks, one block per level
        from vtkmodules.vtkIOXML import vtkXMLMultiBlockDataReader

        reader = vtkXMLMultiBlockDataReader()
        reader.SetFileName(str(out / "vtk" / got_file))
        reader.Update()
        mb = reader.GetOutput()
        assert mb.GetNumberOfCells() == sum(len(f["h"]) for f in got.values())
        assert mb.GetNumberOfBlocks() == len({key[0] for key in got})
        for key, fields in ref.items():
            assert fields.keys() == got[key].keys()
            for name, values in fields.items():
                np.testing.assert_array_equal(got[key][name], values)
    # bit-rounded frames (lz4 here, zlib in the serial run): the bounds relative to the
    # fields' ranges over all ranks, so the same bits as the serial run's, and the
    # report on rank 0 sums the ranks' totals to the serial ones
    rounded = read_pvd(out / "vtk" / "rounded.pvd")
    assert [t for t, _ in rounded] == [t for t, _ in ref_frames]
    ref_rounded = read_pvd(ser / "serial" / "rounded.pvd")
    moved = 0.0
    for (_, got_file), (_, want_file) in zip(rounded, ref_rounded):
        got = _read_amr((out / "vtk" / got_file).with_suffix(".vthb"))
        ref = _read_amr((ser / "serial" / want_file).with_suffix(".vthb"))
        exact = _read_amr((ser / "serial" / want_file.replace("rounded", "frame"))
                          .with_suffix(".vthb"))
        assert got.keys() == ref.keys() == exact.keys()
        for key, fields in ref.items():
            for name, values in fields.items():
                assert np.array_equal(got[key][name], values), (key, name)
        h = np.concatenate([f["h"] for f in got.values()])
        h0 = np.concatenate([f["h"] for f in exact.values()])
        assert np.abs(h - h0).max() <= 1e-3 * (h0.max() - h0.min())
        moved = max(moved, np.abs(h - h0).max())
    assert moved > 0  # the later frames (not the initial steps) were rounded
    assert next((out / "vtk" / "rounded_0001").glob("*.vti")).read_bytes().find(
        b"vtkLZ4DataCompressor") > 0
    import json

    got_rep = json.loads((out / "vtk" / "rounded_rounding.json").read_text())
    want_rep = json.loads((ser / "serial" / "rounded_rounding.json").read_text())
    assert len(got_rep) == len(want_rep) == 4
    for g, w in zip(got_rep, want_rep):
        for name, entry in w["fields"].items():
            ge = g["fields"][name]
            assert ge["tolerance"] == entry["tolerance"] and ge["max_error"] == entry["max_error"]
            if "total" in entry:
                scale = entry["total_abs"]
                assert abs(ge["total"] - entry["total"]) <= 1e-13 * scale
                assert abs(ge["total_change"] - entry["total_change"]) <= 1e-13 * scale


@pytest.mark.mpi("serial_checkpoint_restore_2")
def test_serial_checkpoint_restarts_on_2_ranks(mpi, serial_amr):
    # the checkpoint: 6 steps of the serial run (mpi_scenarios.serial_checkpoint)
    par = mpi("serial_checkpoint_restore_2")
    assert_same_state(par, serial_amr)


@pytest.mark.slow
@pytest.mark.mpi("gpu_level_1_2", "gpu_level_2_2")
@pytest.mark.parametrize("level", [1, 2])
def test_gpu_backend_is_bitwise_the_serial_run(mpi, radial_dam, level, tmp_path):
    # the GPU path (device arrays, buffers staged through the host), uniform grid; in CI in
    # Numba's CUDA simulator (~20 s), on a GPU machine with NUMBA_ENABLE_CUDASIM=0.  Level
    # 1: 4 patches, all late; level 2: 16, early and late ones, so both patch-list
    # launches of the overlapped step hold patches, and gauges (gathered on each rank's
    # device, assembled from their owners at the flush)
    from forestpy.callbacks import Gauges

    name = f"gpu_level_{level}_2"
    par = mpi(name)
    opts = dict(SCENARIOS[name]["opts"])
    gauges = opts.pop("gauges", False)
    sim = radial_dam.setup(**opts)
    if gauges:
        sim.callbacks = [Gauges(GAUGE_POINTS, path=tmp_path / "serial.csv")]
    sim.run()
    assert (par["owned"] > 0).all()
    assert_same_state(par, sim)
    if gauges:
        got = (mpi.out(name) / "gauges.csv").read_bytes()
        assert got == (tmp_path / "serial.csv").read_bytes()


@pytest.mark.slow
@REAL_GPU
@pytest.mark.mpi("gpu_amr_2")
def test_gpu_backend_with_amr_is_bitwise_the_serial_run(mpi, radial_dam):
    # device ghost fill split early/late, staged exchanges, coarse-fine time sync across
    # ranks on device arrays, migration at every regrid
    par = mpi("gpu_amr_2")
    sim = serial(radial_dam, **AMR, backend="gpu")
    assert_local_layout(par)
    assert par["gathers"] == 0 and sim.regrids >= 4
    assert_same_state(par, sim)


@pytest.mark.slow
@REAL_GPU
@pytest.mark.mpi("gpu_bowl_2")
def test_gpu_geoclaw_bowl_with_amr_is_bitwise_the_serial_run(mpi):
    # the surface-aware ghost fill of the late patches on the side stream beside the
    # first launch (it also re-extrapolates aux on the physical sides of every patch),
    # the source hook and regrids on device arrays
    sim = bowl.setup(backend="gpu").run()
    assert sim.regrids >= 10
    par = mpi("gpu_bowl_2")
    assert par["gathers"] == 0
    assert_same_state(par, sim)


def test_first_gpu_launch_is_whole_waves():
    """The overlapped GPU step's first patch-list launch holds ``early_split`` of the
    early patches rounded to whole waves of the device; the second the late patches
    first, then the other early ones: every owned patch once."""
    from forestpy.parallel.layout import Layout

    be = SimpleNamespace(to_device=np.asarray, is_gpu=True, simulator=False)
    sim = SimpleNamespace(_early_rows=np.arange(4032), _late_rows=np.arange(4032, 4096),
                          early_split=0.5, backend=be)
    plan = Layout.plan_two_launches
    plan(sim, 132)
    assert len(sim.first_rows) == 1980 and sim._wave_planned  # 15 waves, nearest to 2016
    assert list(sim.second_rows[:64]) == list(range(4032, 4096))
    rows = np.concatenate([sim.first_rows, sim.second_rows])
    np.testing.assert_array_equal(np.sort(rows), np.arange(4096))
    plan(sim, None)  # kernel not compiled yet: plain split, planned again later
    assert len(sim.first_rows) == 2016 and not sim._wave_planned
    plan(sim, 5000)  # fewer early patches than one wave: plain split
    assert len(sim.first_rows) == 2016


@pytest.mark.mpi("wavelet_amr_2")
def test_wavelet_criterion_normalises_by_the_global_maximum(mpi):
    # indicator_wavelet divides by max(1, max|h|) over the domain: each rank's own maximum
    # would tag differently from the serial run
    from testsupport import load_demo

    opts = dict(SCENARIOS["wavelet_amr_2"]["opts"])
    opts.pop("demo")
    sim = load_demo("wavelet_tagging").setup(**opts).run()
    assert sim.regrids >= 3
    assert_same_state(mpi("wavelet_amr_2"), sim)


@pytest.mark.mpi("wavelet_hump_2", "wavelet_hump_local_norm_2")
def test_wavelet_criterion_with_rank_maxima_far_apart(mpi):
    # wavelet_amr_2 passes with each rank's own maximum too (both ranks hold the dam's
    # depth); here the first rank holds the domain's largest depth (10) and the second
    # depths near 1 with a step whose details are significant only relative to 1
    # (scripts/wavelet_hump.py): the global maximum gives the serial forest and state,
    # each rank's own maximum (the same criterion without its context) refines the low
    # step on the second rank
    import wavelet_hump

    sim = wavelet_hump.setup(t_final=0.1).run()
    par = mpi("wavelet_hump_2")
    assert_same_state(par, sim)
    b = sim.mbc
    h = sim.q[:, 0, b:-b, b:-b]
    lo, hi = np.cumsum([0, *par["owned"]])[1:2][0], len(h)
    assert h[:lo].max() > 5.0 and h[lo:hi].max() < 1.02  # maxima far apart
    local = mpi("wavelet_hump_local_norm_2")
    assert local["regrids"] > sim.regrids
    assert len(local["level"]) > sim.forest.n  # the low step refined


@pytest.mark.mpi("bowl_fgmax_3")
def test_fgmax_is_folded_where_the_points_lie_and_merged(mpi):
    # a wet/dry run with regrids: the points change ranks; each rank folds its own, the
    # end merges them (maxima, earliest arrival, the owner's bed): bitwise the serial
    # maxima, and the state is never gathered (a rank-0 fgmax gathered it every step)
    from forestpy.extensions.geoclaw.fgmax import FGMax

    sim = bowl.setup()
    fg = FGMax.grid(-90.0, 90.0, -90.0, 90.0, 31, 29)
    sim.callbacks.append(fg)
    sim.run()
    par = mpi("bowl_fgmax_3")
    assert par["gathers"] == 0 and sim.regrids >= 5
    assert_same_state(par, sim)
    got = np.load(mpi.out("bowl_fgmax_3") / "fgmax.npz")
    res = fg.results()
    assert np.isfinite(res["arrival_time"]).any() and np.isnan(res["arrival_time"]).any()
    for k in ("max_depth", "max_speed", "max_surface", "arrival_time", "bed"):
        np.testing.assert_array_equal(got[k], res[k], err_msg=k)


@pytest.mark.mpi("gpu_positivity_3", "gpu_positivity_dry_3")
@pytest.mark.parametrize("last", ["no patch", "dry patch"])
def test_gpu_positivity_fix_takes_a_deficit_from_other_ranks(mpi, last):
    # issue 36: on two GPUs the Okushiri run stopped on both ranks with "'bool' object has
    # no attribute 'astype'": after the reduction over the ranks the volume the deficit is
    # taken from was a host float, and cupy.where(volume > 0.0, ...) needs an array.  The
    # CUDA simulator's NumPy accepted it; here the GPU backend follows CuPy's rule for
    # where (tests/mpi/scripts/cupy_rules.py).  Patch 0 (rank 0) lacks more water than it
    # holds, rank 1's patches give their share, rank 2 owns no patch or a dry one (it
    # gives nothing and stays dry): the serial result
    import gpu_rules

    dry = last == "dry patch"
    par = mpi("gpu_positivity_dry_3" if dry else "gpu_positivity_3")
    assert (par["rules"] or not par["simulator"])
    assert list(par["owned"]) == [1, 2, 1 if dry else 0]
    np.testing.assert_allclose(par["q"], par["serial"], rtol=1e-14, atol=1e-15)
    h, _, _, dx = (a[: 4 if dry else 3] for a in gpu_rules.patches())
    assert not np.allclose(par["q"][1:3, 0], h[1:3])  # the other rank gave water
    if dry:
        assert (par["q"][3] == 0).all()
    assert par["serial_moved"] > 0
    np.testing.assert_allclose(par["moved"], par["serial_moved"], rtol=1e-14)
    volume = (par["q"][:, 0].sum(axis=(1, 2)) * dx**2).sum()
    assert math.isclose(volume, (h.sum(axis=(1, 2)) * dx**2).sum(), rel_tol=1e-13)


def test_cupy_rules_refuse_a_host_condition_in_where():
    # the harness itself: CuPy's where converts its condition with astype, which a host
    # comparison (a Python bool) lacks; NumPy's where would take it
    import cupy_rules

    rules = cupy_rules.RULES
    with pytest.raises(AttributeError, match="'bool' object has no attribute 'astype'"):
        rules.where(2.0 > 0.0, 2.0, 1.0)
    np.testing.assert_array_equal(rules.where(np.array([True, False]), 1.0, 2.0), [1.0, 2.0])
    assert rules.zeros is np.zeros


@pytest.mark.slow
@pytest.mark.mpi("gpu_bowl_empty_ranks_3")
def test_gpu_geoclaw_with_ranks_owning_nothing(mpi, tmp_path):
    # issue 36's suspicious states on the GPU backend (the CUDA simulator, with CuPy's
    # rules): two of three ranks own no patch, hence no gauge and no fgmax point, through
    # a regrid and its repartition; the surface-aware fill, the source hook's reductions,
    # the tagging's device test, the gauges' and fgmax's merges: the serial CPU run's
    # state (the GPU kernels round as the CPU's), gauges and maxima
    from forestpy.extensions.geoclaw.fgmax import FGMax

    from forestpy.callbacks import Gauges

    name = "gpu_bowl_empty_ranks_3"
    opts = dict(SCENARIOS[name]["opts"])
    for k in ("demo", "backend", "weights", "gauges", "fgmax"):
        opts.pop(k)
    sim = bowl.setup(**opts)
    fg = FGMax.grid(-90.0, 90.0, -90.0, 90.0, 31, 29)
    sim.callbacks = [Gauges(GAUGE_POINTS, path=tmp_path / "serial.csv"), fg]
    sim.run()
    par = mpi(name)
    assert list(par["owned"]) == [0, 0, sim.geom.npatch] and par["regrids"] >= 1
    assert_same_state(par, sim)
    assert (mpi.out(name) / "gauges.csv").read_bytes() == (tmp_path / "serial.csv").read_bytes()
    got, res = np.load(mpi.out(name) / "fgmax.npz"), fg.results()
    for k in ("max_depth", "max_speed", "max_surface", "arrival_time", "bed"):
        np.testing.assert_array_equal(got[k], res[k], err_msg=k)
