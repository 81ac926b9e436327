"""``mpirun -n N python mpi_dam.py OUT.npz [backend [cells [method [FRAMES GAUGES]]]]``: the
internal dam break (4016 cells by default, r = 0.9, to t = 0.05) across N ranks, SFC
partition; rank 0 writes the gathered state, the steps and each rank's owned-cell count.
``gpu`` runs the device path (in the CUDA simulator when ``NUMBA_ENABLE_CUDASIM=1``).
With a folder ``FRAMES``: frames (``.pvtu`` + pieces) at t = 0 and at the end there, and
the gauges ``GAUGES`` (JSON: ``{id: [x, y]}``) in ``gauges.csv``."""

import json
import sys

import numpy as np
from forestpy.solvers.tworoe import disc_in_square
from forestpy.solvers.tworoe.distributed import DistributedSolver
from forestpy.solvers.tworoe.output import FrameWriter
from mpi4py import MPI


def main(out, backend="cpu", cells="4016", method="sfc", frames=None, gauges=None):
    comm = MPI.COMM_WORLD
    n = int(cells)
    mesh = disc_in_square(n, order="hilbert", tol=0.005 if n >= 4000 else 0.2)
    r = np.hypot(mesh.centroid[:, 0], mesh.centroid[:, 1])
    h1 = np.where(r > 1.5, 4.0, 0.5)
    sim = DistributedSolver(mesh, h1, 5.0 - h1, 5.0, comm=comm, method=method, r=0.9,
                            backend=backend)
    writer = FrameWriter(frames) if frames else None
    if writer:
        gauges = sim.add_gauges(json.loads(gauges))
        writer.write(sim)
    stats = sim.run(0.05)
    if writer:
        writer.write(sim)
        gauges.write(f"{frames}/gauges.csv")
    W = sim.gather()
    owned = comm.gather(sim.layout.n_owned, root=0)
    if comm.Get_rank() == 0:
        np.savez(out, W=W, steps=stats["steps"], owned=np.array(owned))


if __name__ == "__main__":
    main(*sys.argv[1:])
