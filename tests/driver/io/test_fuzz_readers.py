"""Fuzzing the readers of the driver: checkpoints (plain and compressed), gauge files,
ParaView collections.

Seeded truncations, bit flips and field mutations of valid files (for a checkpoint: its
metadata, ``.npy`` headers and array bytes, the archive rewritten so that the CRCs pass)
are read in one child process per test under a memory and a CPU-time limit
(``tests/fuzzsupport.py``): every file must give a well-formed result or one
``InputFileError`` line naming it; an accepted checkpoint must also restore into the
simulation that wrote it and fill its ghost cells.  The sweeps marked slow run many
more mutations with other seeds.
"""

import pytest
from fuzzsupport import checkpoint_simulation, fuzz_case

CHECKPOINT = "forestpy.io.checkpoint:read_checkpoint"
GAUGES = "forestpy.callbacks:read_gauges"
PVD = "forestpy.io.vtk:read_pvd"

PVD_TEXT = """<?xml version="1.0"?>
<VTKFile type="Collection" version="1.0" byte_order="LittleEndian">
  <Collection>
    <DataSet timestep="0" part="0" file="frame_0000.vthb"/>
    <DataSet timestep="0.25" part="0" file="frame_0001.vthb"/>
    <DataSet timestep="0.5" part="0" file="frame_0002.vthb"/>
  </Collection>
</VTKFile>
"""


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """A checkpoint after three steps (with gauge, totals and output-time state), the
    gauge file of that run and a .pvd collection."""
    folder = tmp_path_factory.mktemp("seeds")
    sim = checkpoint_simulation(gauge_path=folder / "gauges.csv")
    sim.run(max_steps=3)
    ck = sim.save_checkpoint(folder / "ck.npz")
    ck_dwt = sim.save_checkpoint(folder / "ck_dwt53.npz", codec="dwt53:rtol=1e-4,zstd=3")
    ck_lossless = sim.save_checkpoint(folder / "ck_lossless.npz", codec="lossless")
    for cb in sim.callbacks:
        if hasattr(cb, "close"):
            cb.close()
    pvd = folder / "frames.pvd"
    pvd.write_text(PVD_TEXT)
    return {"checkpoint": ck, "gauges": folder / "gauges.csv", "pvd": pvd,
            "checkpoint_dwt53": ck_dwt, "checkpoint_lossless": ck_lossless}


CASES = {  # reader, checker, seed files with their mutation kinds, count in the fast suite
    "checkpoint": (CHECKPOINT, "fuzzsupport:restore_radial_dam",
                   [("checkpoint", "npz"), ("checkpoint", "npz"), ("checkpoint", "bytes")],
                   400),
    # compressed checkpoints (forestpy.io.codecs): the codec's container inside the npz
    "checkpoint_codecs": (CHECKPOINT, "fuzzsupport:restore_radial_dam",
                          [("checkpoint_dwt53", "npz"), ("checkpoint_dwt53", "bytes"),
                           ("checkpoint_lossless", "npz")], 150),
    "gauges": (GAUGES, "fuzzsupport:check_gauges", [("gauges", "text")], 1000),
    "pvd": (PVD, "fuzzsupport:check_pvd", [("pvd", "text"), ("pvd", "bytes")], 1000),
}


def _run(name, seeds, tmp_path, count, seed):
    return fuzz_case(CASES[name], seeds.__getitem__, count=count, seed=seed, work=tmp_path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz(name, seeds, tmp_path):
    _run(name, seeds, tmp_path, CASES[name][3], seed=1)


# many more mutations, other seeds: minutes
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_sweep(name, seeds, tmp_path):
    for seed in (2, 3, 4):
        _run(name, seeds, tmp_path, 10 * CASES[name][3], seed=seed)
