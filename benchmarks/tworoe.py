"""Two-layer IR-Roe / IFCP on triangles: the seed's internal circular dam break timed on
the GPU and the CPU, one JSON record per run (next to the seed's GTX 480 time).

    python benchmarks/tworoe.py                                   # 1.0/2.0/3.0 M cells
    python benchmarks/tworoe.py --cells 1001898 --schemes irroe ifcp \\
        --precisions float64 float32 --orders none hilbert rcm --devices gpu cpu

For each mesh (the seed's counts, within 0.5 %; generated once per order) and each
(device, scheme, precision) the run goes from t = 0 to ``--t-final`` (0.1, the seed's)
after a warm-up run on a small mesh (compilation excluded).  A record holds the steps,
the wall time, cell updates per second, the seed's time for that mesh and the speed-up.
CPU runs time ``--cpu-steps`` steps only (default 10; 0: the whole run) and give the
rate; their ``wall_s_full_estimate`` is the rate applied to the GPU run's step count.

Self-check (``--check-steps``, default 5): the GPU and the CPU run that many steps from
the same state and the record gives ``max_abs_diff_vs_cpu`` (relative to the largest
value of each field), the step counts of both, and the relative change of each
layer's volume of the full run (``mass_rel_change``).

``--gauges N`` adds N gauges (on the x axis, r = 0 ... 4.5) to every run: the GPU
samples them into a device buffer each step (the record's ``gauge_rows``; compare
``wall_s`` with a run without), and the check compares the GPU's samples with the
CPU's (``max_abs_diff_gauges_vs_cpu``, relative as above).

Run it with ``NUMBA_ENABLE_CUDASIM`` unset (or 0) on the GPU machine; the CUDA
simulator (``=1``) only checks that the script works, on tiny meshes.
``--budget-s`` stops starting new runs after that long.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numba
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "demos", "tworoe"))

from forestpy.solvers.tworoe import TwoLayerSolver, disc_in_square  # noqa: E402

SEED_GTX480_S = {4016: 0.0068, 16040: 0.032, 64052: 0.21, 256576: 1.49, 1001898: 11.05,
                 2000608: 32.08, 3000948: 58.53}
SEED_1CORE_S = {4016: 0.11, 16040: 0.88, 64052: 7.76, 256576: 63.87, 1001898: 494.7,
                2000608: 1469.4, 3000948: 2697.8}


def dam(mesh, **kw):
    r = np.hypot(mesh.centroid[:, 0], mesh.centroid[:, 1])
    h1 = np.where(r > 1.5, 4.0, 0.5)
    return TwoLayerSolver(mesh, h1=h1, h2=5.0 - h1, H=5.0, r=0.998, gamma=0.9, bc="wall",
                          **kw)


def device_name() -> str | None:
    try:
        from numba import cuda

        if cuda.is_available():
            name = cuda.get_current_device().name
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no GPU: the record says None
        return None
    return None


def gauge_points(n):
    return [(4.5 * k / max(1, n - 1), 0.0) for k in range(n)]


def check(mesh, scheme, dtype, steps, gauges=0):
    """GPU vs CPU after ``steps`` steps from the same state: the largest difference of
    each field relative to its largest value (and of the gauges' samples)."""
    cpu = dam(mesh, scheme=scheme, dtype=dtype)
    gpu = dam(mesh, scheme=scheme, dtype=dtype, backend="gpu", sync_every=1)
    if gauges:
        gc, gg = cpu.add_gauges(gauge_points(gauges)), gpu.add_gauges(gauge_points(gauges))
    for _ in range(steps):
        cpu.step()
    gpu.run(cpu.t)
    scale = np.abs(cpu.W).max(axis=1, keepdims=True)
    diff = float((np.abs(gpu.W.astype(np.float64) - cpu.W) / np.where(scale > 0, scale, 1)
                  ).max())
    gdiff = None
    if gauges:
        (tc, vc), (tg, vg) = gc.samples(), gg.samples()
        sc = np.abs(vc).max(axis=(0, 2), keepdims=True)
        gdiff = (float((np.abs(vg.astype(np.float64) - vc) / np.where(sc > 0, sc, 1)).max())
                 if tc.shape == tg.shape else float("inf"))
    return diff, cpu.steps, gpu.steps, gdiff


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", type=int, nargs="+", default=[1001898, 2000608, 3000948])
    p.add_argument("--schemes", nargs="+", default=["irroe", "ifcp"])
    p.add_argument("--precisions", nargs="+", default=["float64", "float32"])
    p.add_argument("--orders", nargs="+", default=["hilbert"])
    p.add_argument("--devices", nargs="+", default=["gpu", "cpu"])
    p.add_argument("--t-final", type=float, default=0.1)
    p.add_argument("--cpu-steps", type=int, default=10)
    p.add_argument("--cpu-threads", type=int, default=0, help="0: Numba's default")
    p.add_argument("--check-steps", type=int, default=5)
    p.add_argument("--sync-every", type=int, default=16)
    p.add_argument("--budget-s", type=float, default=float("inf"))
    p.add_argument("--gauges", type=int, default=0, help="gauges per run (0: none)")
    a = p.parse_args(argv)
    if a.cpu_threads:
        numba.set_num_threads(a.cpu_threads)
    start = time.perf_counter()
    gpu_name = device_name() if "gpu" in a.devices else None
    host = dict(host=platform.node(), cpu_threads=numba.get_num_threads(), gpu=gpu_name,
                simulator=bool(numba.config.ENABLE_CUDASIM))
    # warm-up: compile every kernel on a small mesh
    small = disc_in_square(4016)
    for dev in a.devices:
        for scheme in a.schemes:
            for prec in a.precisions:
                dam(small, scheme=scheme, dtype=np.dtype(prec),
                    backend=dev).run(1e-3)
    for cells in a.cells:
        for order in a.orders:
            t0 = time.perf_counter()
            mesh = disc_in_square(cells, order=order)
            mesh_s = time.perf_counter() - t0
            gpu_steps = {}
            for dev in a.devices:
                for scheme in a.schemes:
                    for prec in a.precisions:
                        if time.perf_counter() - start > a.budget_s:
                            print(json.dumps({"stopped": "budget", **host}), flush=True)
                            return 0
                        dtype = np.dtype(prec)
                        rec = dict(case="circular_dam", cells=mesh.num_cells,
                                   seed_cells=cells, order=order, device=dev,
                                   scheme=scheme, precision=prec, mesh_s=mesh_s, **host)
                        sim = dam(mesh, scheme=scheme, dtype=dtype, backend=dev,
                                  sync_every=a.sync_every)
                        if a.gauges:
                            g = sim.add_gauges(gauge_points(a.gauges))
                        if dev == "gpu":
                            sim.prepare()  # the host-to-device copies: not timed
                            t1 = time.perf_counter()
                            sim.run(a.t_final, copy_back=False)
                            wall = time.perf_counter() - t1
                            sim.sync()
                            gpu_steps[(scheme, prec)] = sim.steps
                            seed = SEED_GTX480_S.get(cells)
                            rec.update(t=sim.t, steps=sim.steps, wall_s=wall,
                                       cell_updates_per_s=mesh.num_cells * sim.steps / wall,
                                       seed_gtx480_s=seed,
                                       speedup_vs_seed=seed / wall if seed else None,
                                       graph=sim._gpu.use_graph,
                                       graph_error=sim._gpu.graph_error,
                                       mass_rel_change=sim.stats()["mass_rel_change"])
                            if a.gauges:
                                rec.update(gauges=a.gauges, gauge_rows=len(g.samples()[0]))
                            if a.check_steps:
                                diff, sc, sg, gd = check(mesh, scheme, dtype, a.check_steps,
                                                         a.gauges)
                                rec.update(max_abs_diff_vs_cpu=diff, check_steps_cpu=sc,
                                           check_steps_gpu=sg)
                                if a.gauges:
                                    rec["max_abs_diff_gauges_vs_cpu"] = gd
                        else:
                            sim.step()  # first step outside the timing
                            n = a.cpu_steps
                            t1 = time.perf_counter()
                            if n:
                                for _ in range(n):
                                    sim.step(a.t_final)
                            else:
                                sim.run(a.t_final)
                            wall = time.perf_counter() - t1
                            steps = sim.steps - 1
                            rate = mesh.num_cells * steps / wall
                            ref = gpu_steps.get((scheme, prec))
                            rec.update(t=sim.t, steps=steps, wall_s=wall,
                                       cell_updates_per_s=rate,
                                       cell_updates_per_s_per_thread=rate
                                       / numba.get_num_threads(),
                                       wall_s_full_estimate=(mesh.num_cells * ref / rate
                                                             if ref else None),
                                       seed_1core_s=SEED_1CORE_S.get(cells))
                        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
