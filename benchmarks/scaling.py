"""Weak and strong scaling of forestpy.parallel (MPI ranks, CPU or one GPU per rank).

Launch with mpirun; rank 0 prints one JSON record per run (and appends it to --out)::

    mpirun -n 2 python benchmarks/scaling.py --mode weak --mx 32 --level 3 --trees 1
    mpirun -n 2 python benchmarks/scaling.py --backend gpu --mx 128 --level 5 --trees 1

Problem: a shallow-water dam break (shallow_roe, walls) on a uniform grid of
``trees_x x 1`` unit trees at ``level`` with ``mx x mx`` cells per patch, no regrid,
fixed dt.  ``--mode weak``: ``trees`` trees per rank (cells per rank fixed);
``--mode strong``: ``trees`` trees in all.  Timers synchronise the device per phase;
phase seconds are per step, the largest over ranks: exchange (whole halo exchange:
post, pack, wait, unpack), exchange.pack, exchange.wait, ghost_fill, step, time_sync,
cfl_check (with the Allreduce).
"""

import argparse
import json
import os
import sys
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("weak", "strong"), default="weak")
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--mx", type=int, default=32)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--trees", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if a.backend == "gpu":
        from forestpy.parallel import select_device

        device = select_device(comm)
    from forestpy import Domain
    from forestpy.parallel import DistributedSimulation
    from forestpy.timers import Timers

    ntx = a.trees * comm.size if a.mode == "weak" else a.trees
    if ntx < 1:
        raise SystemExit("--trees must be positive")

    def qinit(x, y):
        h = np.where(np.hypot(x - 0.5 * ntx, y - 0.5) < 0.25, 2.0, 1.0)
        return np.stack([h, np.zeros_like(x), np.zeros_like(x)])

    dx = 1.0 / (a.mx * 2**a.level)
    sim = DistributedSimulation(
        "shallow_roe", qinit=qinit, comm=comm,
        domain=Domain((0.0, 0.0), (float(ntx), 1.0), ntrees=(ntx, 1)),
        bc="wall", params={"grav": 1.0}, mx=a.mx, min_level=a.level, max_level=a.level,
        regrid_interval=0, dt_initial=0.3 * dx / 2.0, cfl_desired=0.9, t_final=1e9,
        backend=a.backend,
    )
    sim.run(max_steps=2)  # compile, first exchange
    be = sim.backend
    sim.timers = Timers(sync=be.synchronize if a.backend == "gpu" else None)
    comm.Barrier()
    t0 = time.perf_counter()
    sim.run(max_steps=a.steps)
    be.synchronize() if a.backend == "gpu" else None
    comm.Barrier()
    wall = (time.perf_counter() - t0) / a.steps
    phases = ("exchange", "exchange.pack", "exchange.wait", "ghost_fill", "step",
              "time_sync", "cfl_check")
    mine = np.array([sim.timers.seconds.get(p, 0.0) / a.steps for p in phases])
    worst = np.empty_like(mine)
    comm.Allreduce(mine, worst, op=MPI.MAX)
    cells = sim.geom.npatch * a.mx * a.mx
    rec = dict(
        bench="scaling", mode=a.mode, backend=a.backend, ranks=comm.size,
        mpi=MPI.Get_library_version().splitlines()[0].strip(),
        device=None if a.backend == "cpu" else int(device),
        mx=a.mx, level=a.level, trees_x=ntx, npatch=int(sim.geom.npatch), cells=int(cells),
        cells_per_rank=int(cells // comm.size), steps=a.steps, overlap=False,
        s_per_step=wall, cell_updates_per_s=cells / wall,
        phase_s_per_step={p: float(v) for p, v in zip(phases, worst)},
        halo_patches_per_rank=int(comm.allreduce(len(sim.halo), op=MPI.MAX)),
        host=os.uname().nodename, python=sys.version.split()[0],
    )
    if comm.rank == 0:
        line = json.dumps(rec)
        print(line, flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
