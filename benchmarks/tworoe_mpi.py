"""Two-layer IR-Roe / IFCP across MPI ranks (one GPU per rank, or CPU): the seed's
internal circular dam break, one JSON record per run from rank 0.

    mpirun -n 2 .venv/bin/python benchmarks/tworoe_mpi.py --cells 3000948 --backend gpu
    mpirun -n 4 .venv/bin/python benchmarks/tworoe_mpi.py --cells 1001898 2000608 3000948

Each rank uses GPU ``rank % (GPUs on the node)``.  For each mesh and overlap setting
(``--overlap on off``: the seed's Algorithm 2, inner edges while the halo travels, or
Algorithm 1, exchange first) the run goes to ``--t-final`` after a warm-up on a small
mesh; the record has the ranks, steps, wall time, cell updates per second, the largest
time a rank waited for its halo, the largest and smallest owned-cell counts, and the
seed's 2- and 4-GPU overlap times (its Table 2) for that mesh.  ``--check`` gathers the
state and compares it with a one-rank CPU run of the same mesh (bitwise: 0.0 expected on
the CPU backend; round-off on GPUs).  On GPUs ``host_syncs_per_step`` counts rank 0's
waits on its device per step (2 with neighbours, plus a depth check every 16 steps).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from forestpy.solvers.tworoe import TwoLayerSolver, disc_in_square
from forestpy.solvers.tworoe.distributed import DistributedSolver
from mpi4py import MPI

SEED_OVERLAP_S = {1001898: {2: 5.74, 4: 3.15}, 2000608: {2: 16.32, 4: 8.37},
                  3000948: {2: 29.66, 4: 15.14}}


def fields(mesh):
    r = np.hypot(mesh.centroid[:, 0], mesh.centroid[:, 1])
    h1 = np.where(r > 1.5, 4.0, 0.5)
    return h1, 5.0 - h1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", type=int, nargs="+", default=[3000948])
    p.add_argument("--backend", default="gpu", choices=("gpu", "cpu"))
    p.add_argument("--scheme", default="irroe", choices=("irroe", "ifcp"))
    p.add_argument("--precision", default="float64", choices=("float64", "float32"))
    p.add_argument("--overlap", nargs="+", default=["on", "off"])
    p.add_argument("--method", default="auto", choices=("auto", "metis", "sfc"))
    p.add_argument("--t-final", type=float, default=0.1)
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    gpu = None
    if a.backend == "gpu":
        from numba import cuda

        cuda.select_device(rank % len(cuda.gpus))
        try:
            name = cuda.get_current_device().name
            gpu = name.decode() if isinstance(name, bytes) else str(name)
        except AttributeError:  # the CUDA simulator has no device to name
            gpu = "simulator"
    kw = dict(r=0.998, gamma=0.9, scheme=a.scheme, dtype=np.dtype(a.precision),
              backend=a.backend, method=a.method)
    small = disc_in_square(4016, order="hilbert")
    DistributedSolver(small, *fields(small), 5.0, comm=comm, **kw).run(1e-3)  # compile
    for cells in a.cells:
        mesh = disc_in_square(cells, order="hilbert")
        for ov in a.overlap:
            sim = DistributedSolver(mesh, *fields(mesh), 5.0, comm=comm, overlap=ov == "on",
                                    **kw)
            comm.Barrier()
            t0 = time.perf_counter()
            st = sim.run(a.t_final)
            wall = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            wait = comm.allreduce(st["exchange_wait_seconds"], op=MPI.MAX)
            owned = comm.allgather(sim.layout.n_owned)
            rec = dict(case="circular_dam", ranks=size, cells=mesh.num_cells, seed_cells=cells,
                       backend=a.backend, gpu=gpu, scheme=a.scheme, precision=a.precision,
                       overlap=ov, partition=a.method, steps=st["steps"], wall_s=wall,
                       cell_updates_per_s=mesh.num_cells * st["steps"] / wall,
                       exchange_wait_s_max=wait, owned_max=max(owned), owned_min=min(owned),
                       seed_overlap_s=SEED_OVERLAP_S.get(cells, {}).get(size))
            if sim._dev is not None:  # waits of the host on its GPU (see distributed.py)
                rec["host_syncs_per_step"] = sim._dev.host_syncs / max(1, st["steps"])
            if a.check:
                W = sim.gather()
                if rank == 0:
                    ref = TwoLayerSolver(mesh, *fields(mesh), 5.0, r=0.998,
                                         scheme=a.scheme, dtype=np.dtype(a.precision))
                    ref.run(a.t_final)
                    scale = np.abs(ref.W).max(axis=1, keepdims=True)
                    rec["max_rel_diff_vs_1_rank_cpu"] = float(
                        (np.abs(W.astype(np.float64) - ref.W) / scale).max())
            if rank == 0:
                print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
