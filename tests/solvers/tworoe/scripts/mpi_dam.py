"""``mpirun -n N python mpi_dam.py OUT.npz [method]``: the internal dam break (4016
cells, r = 0.9, to t = 0.05) across N ranks; rank 0 writes the gathered state, the
steps and each rank's owned-cell count."""

import sys

import numpy as np
from forestpy.solvers.tworoe import disc_in_square
from forestpy.solvers.tworoe.distributed import DistributedSolver
from mpi4py import MPI


def main(out, method="sfc"):
    comm = MPI.COMM_WORLD
    mesh = disc_in_square(4016, order="hilbert")
    r = np.hypot(mesh.centroid[:, 0], mesh.centroid[:, 1])
    h1 = np.where(r > 1.5, 4.0, 0.5)
    sim = DistributedSolver(mesh, h1, 5.0 - h1, 5.0, comm=comm, method=method, r=0.9)
    stats = sim.run(0.05)
    W = sim.gather()
    owned = comm.gather(sim.layout.n_owned, root=0)
    if comm.Get_rank() == 0:
        np.savez(out, W=W, steps=stats["steps"], owned=np.array(owned))


if __name__ == "__main__":
    main(*sys.argv[1:])
