"""Host cost of the metadata of a distributed run: per forest size, the time every rank
spends after a regrid on what is replicated (the geometry of the whole forest) and on
its own layout (the ghost and time-sync plans of its owned patches, halo, exchange
schedules, strips).  One JSON record a line (rank 0); the largest time over ranks.
``--refine F``: a fraction F of the leaves refined once (then 2:1 balanced, the same
on every rank), so that the forest has coarse-fine faces and a time-sync plan.

    mpirun -n 2 python benchmarks/layout.py --mx 8 --levels 5,6,7,8 [--refine 0.3]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main(argv=None):
    from mpi4py import MPI

    from forestpy import Domain, Simulation
    from forestpy.patches.geometry import PatchGeometry

    ap = argparse.ArgumentParser()
    ap.add_argument("--mx", type=int, default=8)
    ap.add_argument("--levels", default="5,6,7")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--refine", type=float, default=0.0)
    a = ap.parse_args(argv)
    comm = MPI.COMM_WORLD

    def qinit(x, y):
        return np.stack([1.0 + 0.1 * np.exp(-50 * ((x - 0.5) ** 2 + (y - 0.5) ** 2)),
                         np.zeros_like(x), np.zeros_like(x)])

    for level in (int(v) for v in a.levels.split(",")):
        t0 = time.perf_counter()
        sim = Simulation("shallow_roe", qinit=qinit, comm=comm, mx=a.mx,
                         domain=Domain((0.0, 0.0), (1.0, 1.0)), min_level=level,
                         max_level=level, bc="wall", t_final=1e9)
        if a.refine > 0:
            rng = np.random.default_rng(level)
            f = sim.forest
            sim._set_forest(f.refine(rng.random(f.n) < a.refine).balance())
        setup = time.perf_counter() - t0
        plans, layout = [], []
        for _ in range(a.repeats):
            comm.Barrier()
            t0 = time.perf_counter()
            # what every rank redoes after a regrid (Simulation._set_forest):
            # the geometry of the whole forest ...
            PatchGeometry.from_forest(sim.forest, sim.mx, sim.my, sim.mbc)
            t1 = time.perf_counter()
            sim._build_layout()  # ... and its own layout, owned plans included
            t2 = time.perf_counter()
            plans.append(t1 - t0)
            layout.append(t2 - t1)
        worst = np.empty(2)
        comm.Allreduce(np.array([min(plans), min(layout)]), worst, op=MPI.MAX)
        if comm.rank == 0:
            print(json.dumps({"bench": "layout", "ranks": comm.size, "mx": a.mx,
                              "level": level, "refine": a.refine,
                              "patches": int(sim.forest.n),
                              "replicated_s": float(worst[0]),
                              "rank_layout_s": float(worst[1]), "setup_s": setup}),
                  flush=True)
        del sim


if __name__ == "__main__":
    main()
