"""solvers/tworoe/checkpoint.py: restart continues bitwise (serially, and from a serial
checkpoint into the distributed solver and back); bad checkpoints give InputFileError."""

import numpy as np
import pytest
from forestpy.solvers.tworoe import TwoLayerSolver, disc_in_square
from forestpy.solvers.tworoe.distributed import DistributedSolver

from forestpy.errors import InputFileError


@pytest.fixture(scope="module")
def mesh():
    return disc_in_square(4016, order="hilbert")


def _dam(mesh, cls=TwoLayerSolver, **kw):
    r = np.hypot(*mesh.centroid.T)
    h1 = np.where(r > 1.5, 4.0, 0.5)
    return cls(mesh, h1, 5.0 - h1, 5.0 - 0.1 * np.cos(r), r=0.9, **kw)


def test_restart_continues_bitwise(mesh, tmp_path):
    whole = _dam(mesh)  # stops at the same times (a stop shortens one step)
    for t in (0.04, 0.07, 0.1):
        whole.run(t)
    first = _dam(mesh)
    first.run(0.04)
    path = first.save_checkpoint(tmp_path / "ck.npz")
    again = TwoLayerSolver.from_checkpoint(path, mesh)
    assert again.t == 0.04 and again.steps == first.steps
    again.run(0.07)
    again.run(0.1)
    assert np.array_equal(again.W, whole.W) and again.steps == whole.steps
    assert again.stats()["mass_rel_change"] == whole.stats()["mass_rel_change"]
    # into the distributed solver (its layout, its step) and back out of it
    dist = DistributedSolver.from_checkpoint(path, mesh, method="sfc")
    dist.run(0.07)
    p2 = dist.save_checkpoint(tmp_path / "ck2.npz")
    last = TwoLayerSolver.from_checkpoint(p2, mesh)
    last.run(0.1)
    assert np.array_equal(last.W, whole.W) and last.steps == whole.steps


@pytest.mark.parametrize("case,match", [
    ("missing", "no such checkpoint"),
    ("garbage", "not a readable checkpoint"),
    ("truncated", "not a readable checkpoint"),
    ("other_mesh", "cells, the mesh has|another mesh"),
    ("not_ours", "not a two-layer checkpoint"),
    ("not_unicode", "not a readable checkpoint .ValueError: code point 0x110041"),
])
def test_bad_checkpoints_give_input_file_errors(mesh, tmp_path, case, match):
    sim = _dam(mesh)
    path = sim.save_checkpoint(tmp_path / "ck.npz")
    target = path
    other = mesh
    if case == "missing":
        target = tmp_path / "none.npz"
    elif case == "garbage":
        path.write_bytes(b"not a zip file at all" * 10)
    elif case == "truncated":
        path.write_bytes(path.read_bytes()[:300])
    elif case == "other_mesh":
        other = disc_in_square(16040)
    elif case == "not_ours":
        np.savez(path, W=np.zeros((6, mesh.num_cells)))
    elif case == "not_unicode":  # UCS-4 code units beyond U+10FFFF in a text member
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        raw = bytearray(arrays["format"].tobytes())
        raw[:4] = (0x110041).to_bytes(4, "little")
        arrays["format"] = np.frombuffer(bytes(raw), arrays["format"].dtype).reshape(())
        np.savez(path, **arrays)
    with pytest.raises(InputFileError, match=match) as err:
        TwoLayerSolver.from_checkpoint(target, other)
    assert target.name in str(err.value)
