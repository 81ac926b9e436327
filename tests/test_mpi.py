"""Distributed runs (forestpy.parallel) against the serial run, launched with mpirun.

Each test starts ``mpirun -n N python tests/mpi_scripts/run_demo.py`` (a subprocess
with a timeout, so a deadlock fails the test instead of hanging CI) and compares rank
0's gathered final state with the serial run done here: bitwise, since every patch
does the same arithmetic whichever rank steps it.
"""

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
MPIRUN = shutil.which("mpirun", path=str(pathlib.Path(sys.executable).parent)) or shutil.which(
    "mpirun"
)

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


@pytest.fixture(scope="module")
def serial_amr(radial_dam):
    sim = serial(radial_dam, **AMR)
    assert sim.regrids >= 4 and len(sim.patches_per_level()) == 3  # forest changes
    return sim


def test_uniform_grid_is_bitwise_the_serial_run(tmp_path, radial_dam):
    # no regrid, so no gather: only the halo exchange feeds the ghost cells
    par = launch(3, tmp_path, "run", **UNIFORM)
    assert_same_state(par, serial(radial_dam, **UNIFORM))


@pytest.mark.parametrize("n", [2, 3])
def test_radial_dam_amr_is_bitwise_the_serial_run(tmp_path, serial_amr, n):
    par = launch(n, tmp_path, "run", **AMR)
    assert (par["owned"] > 0).all() and par["owned"].sum() == serial_amr.geom.npatch
    assert_same_state(par, serial_amr)


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
    assert_same_state(par, serial_amr)


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


@pytest.mark.slow
def test_gpu_backend_is_bitwise_the_serial_run(tmp_path, radial_dam):
    # the GPU path (device arrays, buffers staged through the host), uniform grid; in CI in
    # Numba's CUDA simulator (~20 s), on a GPU machine with NUMBA_ENABLE_CUDASIM=0
    opts = dict(mx=8, min_level=1, max_level=1, t_final=0.1, backend="gpu")  # 4 patches
    par = launch(2, tmp_path, "run", **opts)
    sim = serial(radial_dam, **opts)
    assert (par["owned"] > 0).all()
    assert_same_state(par, sim)
