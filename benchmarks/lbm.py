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
  float16, float32 and float64, against the CPU, for each GPU kernel of ``--kernels``
  (``cell``: :mod:`forestpy.solvers.lbm.gpu`; ``register``: :mod:`.fast`, in float64
  arithmetic, ``arith: float64``, and in its default arithmetic, float32 for float32
  and float16 storage): ``same_bits`` and ``max_abs_diff`` (the cell kernel and the
  register kernel in float64 arithmetic give the CPU's bits with fused multiply-adds
  off, the GPU backend's default; ``FORESTPY_GPU_FMA=1`` does not; float32 arithmetic
  differs by FP32 round-off);
* with several ``--kernels``, each ``mlups`` record of a kernel after the first (the
  baseline) also holds ``speedup`` (its lattice updates per second over the
  baseline's, the same card, grid and case), ``max_abs_diff`` (its stored state
  against the baseline's after the same steps from the same start, the units of
  ``raw()``) and ``mass_rel_change`` (the relative change of the total mass over the
  timed steps, FP32 round-off for float32 arithmetic).

    python benchmarks/lbm.py                                   # CPU, 64^3
    python benchmarks/lbm.py --backend gpu --n 128,256 --steps 200
    python benchmarks/lbm.py --backend gpu --check-only
    python benchmarks/lbm.py --backend gpu --n 256 --dtype float16,float32 --steps 200
    python benchmarks/lbm.py --backend gpu --kernels cell,register      # the comparison
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from forestpy.solvers.lbm import LBM, sphere


def make(n, dtype, collision, obstacle, backend, force=(0.0, 0.0, 0.0), open_x=False,
         **opts):
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
               dtype=dtype, backend=backend, **kw, **opts)


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


def check(n, kernels=("cell",)):
    variants = []
    for kernel in kernels:
        if kernel == "register":
            variants += [("register", "float64"), ("register", None)]
        else:
            variants.append((kernel, None))
    for dtype in ("float64", "float32", "float16"):
        for collision in ("bgk", "trt"):
            kw = dict(n=n, dtype=dtype, collision=collision, obstacle="sphere",
                      force=(1e-5, 2e-6, 0.0), open_x=True)
            cpu = make(backend="cpu", **kw)
            gpus = [make(backend="gpu", kernel=kernel, arith=arith, **kw)
                    for kernel, arith in variants
                    if not (kernel == "register" and arith is None and dtype == "float64")]
            for steps in (1, 1, 3):
                cpu.run(steps)
                a = cpu.raw()
                for gpu in gpus:
                    gpu.run(steps)
                    b = gpu.raw()
                    diff = float(np.abs(a.astype(np.float64) - b).max())
                    print(json.dumps({"kind": "check", "n": n, "dtype": dtype,
                                      "collision": collision, "t": cpu.t,
                                      "kernel": gpu.kernel, "arith": gpu.arith,
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
    p.add_argument("--kernels", default=None, help="GPU kernels, comma-separated: cell, "
                   "register (default: FORESTPY_LBM_KERNEL or cell); the first is the "
                   "baseline of the others' speedup and max_abs_diff")
    a = p.parse_args(argv)
    gpu = a.backend == "gpu"
    sizes = [int(s) for s in (a.n or ("128,256" if gpu else "64")).split(",")]
    steps = a.steps or (200 if gpu else 10)
    steps += steps % 2
    kernels = (a.kernels or os.environ.get("FORESTPY_LBM_KERNEL", "cell")).split(",")
    if not gpu:
        kernels = ["cell"]
    if gpu:
        check(a.check_n, kernels)
        if a.check_only:
            return
        from forestpy.backend import cuda_simulator_enabled

        copy = None if cuda_simulator_enabled() else copy_bandwidth()
        print(json.dumps({"kind": "copy", "GBps": copy}), flush=True)
    import numba

    for n in sizes:
        for dtype in a.dtype.split(","):
            for collision in a.collision.split(","):
                for obstacle in a.obstacle.split(","):
                    base = None
                    for kernel in kernels:
                        sim = make(n, dtype, collision, obstacle, a.backend, kernel=kernel)
                        m0 = sim.mass()
                        seconds = time_steps(sim, steps)
                        updates = n**3 * steps
                        nbytes = 2 * 27 * np.dtype(dtype).itemsize * updates
                        rec = {"kind": "mlups", "backend": a.backend, "n": n, "dtype": dtype,
                               "collision": collision, "obstacle": obstacle, "steps": steps,
                               "kernel": sim.kernel, "arith": sim.arith,
                               "seconds": seconds, "mlups": updates / seconds / 1e6,
                               "min_GBps": nbytes / seconds / 1e9,
                               "device": sim.backend.describe().get("device"),
                               "numba_threads": numba.config.NUMBA_NUM_THREADS,
                               "cpu_count": os.cpu_count()}
                        if gpu and copy:
                            rec["share_of_copy"] = rec["min_GBps"] / copy
                        if len(kernels) > 1:
                            rec["mass_rel_change"] = float(sim.mass() / m0 - 1.0)
                            state = sim.raw().astype(np.float64)
                            if base is None:
                                base = (rec["mlups"], state)
                            else:
                                rec["speedup"] = rec["mlups"] / base[0]
                                rec["max_abs_diff"] = float(np.abs(state - base[1]).max())
                            del state
                        print(json.dumps(rec), flush=True)
                        del sim
                    del base


if __name__ == "__main__":
    main()
