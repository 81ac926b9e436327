"""Launches, host transfers and launch cost of GPU time steps; one JSON record each.

* ``counts``: the adaptive radial dam on the GPU backend, global and subcycled steps
  (no regrid inside the measured steps): forestpy kernel launches
  (:func:`forestpy.cuda_device.kernel_launches`: ghost fill, boundaries, step, time
  sync, status, subcycling pieces; not CuPy's own array operations) and host transfers
  (:attr:`Backend.host_transfers`) per step, and on a real GPU the wall time per step.
  Runs in Numba's CUDA simulator too (``NUMBA_ENABLE_CUDASIM=1``, tiny sizes: counts
  only).
* ``launch``: real GPU only.  Host (Python) time of one launch of the step kernel with
  CuPy arguments through Numba's dispatcher against
  :class:`forestpy.cuda_device.FastKernel` (:func:`forestpy.cuda_device.launch_kernel`),
  enqueue only (one synchronisation after all launches), on a few patches so the
  device is not the bottleneck.

Usage::

    python benchmarks/step_launches.py [--parts counts,launch] [--levels 3,5] [--mx 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def emit(rec):
    print(json.dumps(rec), flush=True)


def radial_dam():
    spec = importlib.util.spec_from_file_location("radial_dam", ROOT / "demos" / "radial_dam.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def counts(levels, mx, nsteps):
    from forestpy.cuda_device import kernel_launches

    demo = radial_dam()
    for subcycle in (False, True):
        sim = demo.setup(mx=mx, min_level=levels[0], max_level=levels[1], backend="gpu",
                         subcycle=subcycle, regrid_interval=0, t_final=1e9)
        sim.run(max_steps=1)  # compiles, estimates dt
        be = sim.backend
        be.synchronize()
        launches, transfers, t0 = kernel_launches(), be.host_transfers, time.perf_counter()
        dt = sim.dt
        for _ in range(nsteps):
            accepted, courant = sim.step(0.5 * dt)
            assert accepted
        be.synchronize()
        wall = time.perf_counter() - t0
        emit({"part": "counts", "case": "radial_dam", "levels": list(levels), "mx": mx,
              "subcycle": sim.subcycling, "patches_per_level": sim.patches_per_level(),
              "level_steps_per_step": {k: v / (nsteps + 1) for k, v in
                                       sim.level_steps.items()},
              "launches_per_step": (kernel_launches() - launches) / nsteps,
              "host_transfers_per_step": (be.host_transfers - transfers) / nsteps,
              "wall_ms_per_step": round(1e3 * wall / nsteps, 3),
              "device": be.describe()["device"]})


def launch_cost(mx, npatch=8, repeats=2000):
    import cupy
    from forestpy.solvers.clawpack.gpu_kernel import make_gpu_step_kernel
    from numba import cuda

    from forestpy.cuda_device import launch_kernel
    from forestpy.vtable import get_riemann

    riemann = get_riemann("shallow_roe")
    kernel, nthreads = make_gpu_step_kernel(riemann, mx, mx, 2)
    shape = (npatch, 3, mx + 4, mx + 4)
    q = cupy.ones(shape)
    q[:, 0] = 1.5
    args = (cupy.arange(npatch, dtype=np.int64), q, cupy.zeros((npatch, 0, mx + 4, mx + 4)),
            cupy.empty_like(q), cupy.full(npatch, 1.0 / mx), cupy.full(npatch, 1.0 / mx), 1e-3,
            cupy.asarray(riemann.params_array({"grav": 1.0})),
            cupy.asarray([4, 4, 4], dtype=np.int64), cupy.zeros(npatch),
            cupy.empty((npatch, 4, 3, mx)))
    ways = {
        "numba_dispatch": lambda: kernel.dispatcher[npatch, nthreads](*args),
        "fast_kernel": lambda: launch_kernel(kernel, npatch, nthreads, 0, *args),
    }
    for name, go in ways.items():
        for _ in range(20):
            go()
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            go()
        host = time.perf_counter() - t0
        cuda.synchronize()
        emit({"part": "launch", "way": name, "array_args": 10, "mx": mx, "npatch": npatch,
              "host_us_per_launch": round(1e6 * host / repeats, 2),
              "device": cuda.get_current_device().name.decode()
              if isinstance(cuda.get_current_device().name, bytes)
              else cuda.get_current_device().name})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="counts,launch")
    ap.add_argument("--levels", default="3,5", help="min,max level of the radial dam")
    ap.add_argument("--mx", type=int, default=16)
    ap.add_argument("--nsteps", type=int, default=20)
    a = ap.parse_args(argv)
    parts = a.parts.split(",")
    if "counts" in parts:
        counts(tuple(int(v) for v in a.levels.split(",")), a.mx, a.nsteps)
    if "launch" in parts:
        from forestpy.backend import cuda_simulator_enabled

        if not cuda_simulator_enabled():
            launch_cost(a.mx)


if __name__ == "__main__":
    main()
