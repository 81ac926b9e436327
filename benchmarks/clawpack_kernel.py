"""The batched wave-propagation step kernel alone; one JSON record per configuration.

Shallow water (Roe with entropy fix, or HLLE), order 2, MC limiter, transverse 2, on
``npatch`` patches of mx x mx cells with smooth random-ish data; best of ``repeat``
timed calls after a warm-up call that compiles the kernel.  Set NUMBA_NUM_THREADS to
choose the thread count.

    NUMBA_NUM_THREADS=1 python benchmarks/clawpack_kernel.py --npatch 1024 --mx 32

``--state radial_dam`` steps the state of the radial dam demo at t = 0.5 instead (512^2
cells: 256 patches of 32^2, its ghost cells as the last fill left them; ``--npatch`` and
``--mx`` are then the demo's), smooth data like the runs users make; the in-process
table of ``docs/performance.md`` ("The CPU step kernel's plumbing") is

    for o in "1 0" "2 0" "1 1" "2 1" "2 2"; do set -- $o
      NUMBA_NUM_THREADS=1 python benchmarks/clawpack_kernel.py --state radial_dam \
          --order $1 --transverse $2 --repeat 11; done
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numba
import numpy as np
from forestpy.solvers.clawpack.solver import ClawpackSolver

from forestpy.vtable import get_riemann


class _Geom:
    def __init__(self, npatch, mx, mbc, d):
        self.mx = self.my = mx
        self.mbc = mbc
        self.dx = np.full(npatch, d)
        self.dy = np.full(npatch, d)


def radial_dam_state():
    """The radial dam demo's state at t = 0.5 on 512^2 cells (mx 32, level 4)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "demos" / "radial_dam.py"
    spec = importlib.util.spec_from_file_location("radial_dam_demo", path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    sim = demo.setup(mx=32, min_level=4, max_level=4, t_final=0.5)
    sim.run()
    return np.ascontiguousarray(sim.q)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--riemann", default="shallow_roe")
    p.add_argument("--npatch", type=int, default=1024)
    p.add_argument("--mx", type=int, default=32)
    p.add_argument("--order", type=int, default=2)
    p.add_argument("--transverse", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--state", choices=("random", "radial_dam"), default="random")
    a = p.parse_args(argv)
    mbc = 2
    if a.state == "radial_dam":
        q = radial_dam_state()
        a.npatch, a.mx = q.shape[0], q.shape[3] - 2 * mbc
    n = a.mx + 2 * mbc
    if a.state == "random":
        rng = np.random.default_rng(0)
        x = np.linspace(0, 1, n)
        base = 1.0 + 0.3 * np.sin(6 * x)[None, :] * np.cos(5 * x)[:, None]
        q = np.empty((a.npatch, 3, n, n))
        q[:, 0] = base + 0.05 * rng.random((a.npatch, n, n))
        q[:, 1] = 0.2 * rng.standard_normal((a.npatch, n, n))
        q[:, 2] = 0.2 * rng.standard_normal((a.npatch, n, n))
    aux = np.zeros((a.npatch, 0, n, n))
    solver = ClawpackSolver(get_riemann(a.riemann), order=a.order,
                            transverse_waves=a.transverse, limiter="mc")
    geom = _Geom(a.npatch, a.mx, mbc, 1.0 / a.mx)
    dt = 0.2 / a.mx
    solver.step(q, aux, geom, dt)  # compile
    best = best_cpu = np.inf
    for _ in range(a.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        solver.step(q, aux, geom, dt)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    cells = a.npatch * a.mx * a.mx
    print(json.dumps({
        "benchmark": "clawpack_kernel", "riemann": a.riemann, "npatch": a.npatch, "mx": a.mx,
        "order": a.order, "transverse_waves": a.transverse, "limiter": "mc", "state": a.state,
        "ns_per_cell_update_cpu": round(best_cpu / cells * 1e9, 1),
        "threads": numba.config.NUMBA_NUM_THREADS, "machine": platform.machine(),
        "best_s": round(best, 5), "cell_updates_per_s": round(cells / best),
        # CPU time of the calling process: on a shared machine less noisy than wall time
        "best_cpu_s": round(best_cpu, 5), "cell_updates_per_cpu_s": round(cells / best_cpu),
        "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    main()
