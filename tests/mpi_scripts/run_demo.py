"""Launched by tests/test_mpi.py: ``mpirun -n N python run_demo.py OUT MODE [JSON]``.

Builds ``demos/radial_dam.py``'s setup with the options in JSON, distributes it over
the ranks and writes rank 0's gathered result to ``OUT/result.npz``.  MODE:

* ``run``     -- run to t_final.
* ``save``    -- run max_steps steps, write the checkpoint ``OUT/ck.npz``.
* ``restore`` -- read ``OUT/ck.npz`` and run to t_final.

With ``"record": true`` a callback samples the depth along a line after every step.
"""

import json
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from conftest import load_demo  # noqa: E402

from forestpy.parallel import distribute  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from recorder import Recorder  # noqa: E402

out, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
opts = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
if opts.get("backend") == "gpu" and os.environ.get("NUMBA_ENABLE_CUDASIM") == "0":
    from forestpy.parallel import select_device

    select_device()  # one GPU per rank, before any other CUDA call
max_steps = opts.pop("max_steps", None)
weights = opts.pop("weights", None)
record = opts.pop("record", False)
recorder = Recorder()
sim = load_demo(opts.pop("demo", "radial_dam")).setup(**opts)
if record:
    sim.callbacks = [recorder]
sim = distribute(sim)
if weights == "first_rank_heavy":  # uneven partition: rank 0 gets almost nothing
    sim.partition_weights = lambda: np.where(np.arange(sim.forest.n) == 0, 1e6, 1.0)
    sim._partition()
if mode == "restore":
    sim.load_checkpoint(out / "ck.npz")
sim.run(max_steps=max_steps if mode == "save" else None)
if mode == "save":
    sim.save_checkpoint(out / "ck.npz")
owned = sim.comm.allgather(sim.hi - sim.lo)
totals = sim.totals()
if sim.rank == 0:
    np.savez(out / "result.npz", q=sim.backend.to_host(sim.q), t=sim.t, steps=sim.steps,
             regrids=sim.regrids, owned=np.array(owned), totals=np.array(list(totals.values())),
             level=sim.forest.level, record=np.array(recorder.rows))
