"""D3Q27 lattice Boltzmann (``forestpy.solvers.lbm``): lattice updates per second on
the CPU or the GPU, and the GPU checked against the CPU; JSON lines.

Records (one JSON object per line, ``"kind"`` says which):

* ``mlups`` -- for each cube edge ``--n``, storage ``--dtype``, ``--collision`` and
  ``--obstacle`` (``none``: periodic box; ``sphere``: a sphere of diameter n/4 in it,
  the same step with bounce-back links): ``--steps`` steps (an even count) after two
  warm-up steps (compilation), wall time with the device synchronised, million lattice
  updates per second (``mlups``), and the memory traffic the AA pattern needs at the
  minimum (27 values read and 27 written per cell and step, ``min_GBps``);
* ``copy`` (GPU) -- the device-to-device copy bandwidth measured with CuPy on a
  1 GiB array (read + write bytes / time, best of 10), the roofline the ``mlups``
  records are a share of (``share_of_copy`` in the ``mlups`` records);
* ``check`` (GPU) -- the GPU state after 1, 2 and 5 steps on a ``--check-n`` cube
  with a sphere, a velocity inlet and a pressure outlet, a body force, BGK and TRT,
  float16, float32 and float64, against the CPU:
  ``same_bits`` and ``max_abs_diff`` (fused multiply-adds off, the GPU backend's
  default, gives the same bits; ``FORESTPY_GPU_FMA=1`` does not).

    python benchmarks/lbm.py                                   # CPU, 64^3
    python benchmarks/lbm.py --backend gpu --n 128,256 --steps 200
    python benchmarks/lbm.py --backend gpu --check-only
    python benchmarks/lbm.py --backend gpu --n 256 --dtype float16,float32 --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from forestpy.solvers.lbm import LBM, sphere


def make(n, dtype, collision, obstacle, backend, force=(0.0, 0.0, 0.0), open_x=False):
    """An n^3 box, flow 0.05 along x; ``open_x``: a velocity inlet at x = 0 and a pressure
    outlet at x = n - 1."""
    shape = (n, n, n)
    solid = np.zeros(shape, dtype=bool)
    if obstacle == "sphere":
        solid = sphere(shape, ((n - 1) / 2,) * 3, n / 8)
    u = np.zeros((3, *shape))
    u[0] = 0.05
    u[:, solid] = 0.0
    kw = {}
    if open_x:
        inlet = np.zeros(shape, dtype=bool)
        inlet[0] = True
        outlet = np.zeros(shape, dtype=bool)
        outlet[-1] = True
        kw = dict(inlet=inlet, inlet_velocity=(0.05, 0, 0), outlet=outlet,
                  outlet_normal=(1, 0, 0))
    return LBM(shape, tau=0.6, collision=collision, force=force, solid=solid, u=u,
               dtype=dtype, backend=backend, **kw)


def time_steps(sim, steps):
    sim.run(2)  # compile, warm up
    sim.backend.synchronize()
    t0 = time.perf_counter()
    sim.run(steps)
    sim.backend.synchronize()
    return time.perf_counter() - t0


def copy_bandwidth():
    import cupy

    a = cupy.ones(1 << 27, dtype=cupy.float64)  # 1 GiB
    b = cupy.empty_like(a)
    best = np.inf
    for _ in range(10):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        b[...] = a
        stop.record()
        stop.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return 2 * a.nbytes / best / 1e9


def check(n):
    for dtype in ("float64", "float32", "float16"):
        for collision in ("bgk", "trt"):
            kw = dict(n=n, dtype=dtype, collision=collision, obstacle="sphere",
                      force=(1e-5, 2e-6, 0.0), open_x=True)
            cpu, gpu = make(backend="cpu", **kw), make(backend="gpu", **kw)
            for steps in (1, 1, 3):
                cpu.run(steps)
                gpu.run(steps)
                a, b = cpu.raw(), gpu.raw()
                diff = float(np.abs(a.astype(np.float64) - b).max())
                print(json.dumps({"kind": "check", "n": n, "dtype": dtype,
                                  "collision": collision, "t": cpu.t,
                                  "same_bits": bool(np.array_equal(a, b)),
                                  "max_abs_diff": diff,
                                  "device": gpu.backend.describe()["device"],
                                  "fma": gpu.backend.fma}), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--n", default=None, help="cube edges, comma-separated "
                   "(default 64 on the CPU, 128,256 on the GPU)")
    p.add_argument("--dtype", default="float32,float64")
    p.add_argument("--collision", default="bgk,trt")
    p.add_argument("--obstacle", default="none,sphere")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps (default 10 on the CPU, 200 on the GPU)")
    p.add_argument("--check-n", type=int, default=24)
    p.add_argument("--check-only", action="store_true")
    a = p.parse_args(argv)
    gpu = a.backend == "gpu"
    sizes = [int(s) for s in (a.n or ("128,256" if gpu else "64")).split(",")]
    steps = a.steps or (200 if gpu else 10)
    steps += steps % 2
    if gpu:
        check(a.check_n)
        if a.check_only:
            return
        copy = copy_bandwidth()
        print(json.dumps({"kind": "copy", "GBps": copy}), flush=True)
    import numba

    for n in sizes:
        for dtype in a.dtype.split(","):
            for collision in a.collision.split(","):
                for obstacle in a.obstacle.split(","):
                    sim = make(n, dtype, collision, obstacle, a.backend)
                    seconds = time_steps(sim, steps)
                    updates = n**3 * steps
                    nbytes = 2 * 27 * np.dtype(dtype).itemsize * updates
                    rec = {"kind": "mlups", "backend": a.backend, "n": n, "dtype": dtype,
                           "collision": collision, "obstacle": obstacle, "steps": steps,
                           "seconds": seconds, "mlups": updates / seconds / 1e6,
                           "min_GBps": nbytes / seconds / 1e9,
                           "device": sim.backend.describe().get("device"),
                           "numba_threads": numba.config.NUMBA_NUM_THREADS,
                           "cpu_count": os.cpu_count()}
                    if gpu:
                        rec["share_of_copy"] = rec["min_GBps"] / copy
                    print(json.dumps(rec), flush=True)
                    del sim


if __name__ == "__main__":
    main()
