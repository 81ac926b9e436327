"""GPU performance of the Clawpack solver (shallow water, Roe, transverse 2, MC).

Prints one JSON record per measurement:

* ``copy``: device-to-device copy bandwidth (bytes read + written), the roofline;
* ``kernel``: the step kernel alone on npatch patches of mx x mx cells holding a smooth
  non-trivial state (a radial bump), cell updates per second, achieved DRAM bandwidth
  (q read once, qnew written once, edge fluxes written) against the copy;
* ``step``: a full adaptive time step of a Simulation (ghost fill + kernel + time sync
  + CFL reduction, no regrid) on the radial dam break;
* ``run``: a whole adaptive run including regrids;
* ``cpu``: the same Simulation on the CPU backend (one thread and all threads).

Usage::

    python benchmarks/gpu_step.py [--parts copy,kernel,step,run,cpu] [--quick]
        [--kernel tile,patch,patch-noshare,patch-nocells] [--sizes 1e8] [--fma 0]

``--kernel tile,patch`` times the row-tile and the whole-patch step kernels on the same
patches and prints their largest differences (``kernel_compare``); every ``kernel``
record carries its largest difference from the CPU kernel on the first patches.
``--fma 0`` compiles without contracted multiply-adds (as the GPU backend does by
default), ``1`` with them; by default NVVM's own choice (contracted).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np


def emit(rec):
    print(json.dumps(rec), flush=True)


def _timer():
    from numba import cuda

    class T:
        def __enter__(self):
            self.a = cuda.event()
            self.b = cuda.event()
            self.a.record()
            return self

        def __exit__(self, *exc):
            self.b.record()
            self.b.synchronize()
            self.ms = cuda.event_elapsed_time(self.a, self.b)

    return T()


def copy_bandwidth(nbytes=4 << 30):
    import cupy

    a = cupy.random.random(nbytes // 8)
    b = cupy.empty_like(a)
    b[:] = a
    times = []
    for _ in range(10):
        with _timer() as t:
            b[:] = a
        times.append(t.ms)
    ms = float(np.median(times))
    rec = {"part": "copy", "bytes": 2 * a.nbytes, "ms": ms, "GB_s": 2 * a.nbytes / ms / 1e6}
    emit(rec)
    return rec["GB_s"]


def radial_patches(npatch, mx, mbc, dtype):
    """Patches of a uniform square forest holding h = 1 + bump, momenta from a swirl."""
    n = int(math.isqrt(npatch))
    side = mx + 2 * mbc
    ii = (np.arange(side) - mbc + 0.5) / (n * mx)
    px = (np.arange(npatch) % n) / n
    py = (np.arange(npatch) // n) / n
    x = px[:, None, None] + ii[None, None, :] - 0.5
    y = py[:, None, None] + ii[None, :, None] - 0.5
    r2 = x * x + y * y
    h = 1.0 + 0.5 * np.exp(-40.0 * r2)
    q = np.stack([h, -0.3 * y * h, 0.3 * x * h], axis=1).astype(dtype)
    return q, 1.0 / (n * mx)


def _launcher(name, rs, mx, mbc, max_registers, rows):
    """``(launch(args), threads, rows per tile)`` of the step kernel ``name`` (``tile``:
    the row-tile kernel of gpu_kernel.py, ``patch``: the whole-patch kernel of
    gpu_patch_kernel.py on the solver's work-sharing pieces, ``patch-noshare`` the same
    calling rpn2/rpt2, ``patch-nocells`` with the cell states computed in the threads),
    shallow water, MC, transverse 2; ``tile-float32`` and ``tile-mixed``: the row-tile
    kernel in that precision (``tile-float32`` on float32 fields: ``--dtypes float32``)."""
    if name in ("tile", "tile-float32", "tile-mixed"):
        from forestpy.solvers.clawpack.gpu_kernel import make_gpu_step_kernel, plan_tiles

        precision = {"tile": "float64", "tile-float32": "float32"}.get(name, "mixed")
        kernel, nt = make_gpu_step_kernel(rs, mx, mx, mbc, order=2, transverse_waves=2,
                                          max_registers=max_registers, rows_per_tile=rows,
                                          precision=precision)

        def launch(patch_rows, *args):
            kernel[len(patch_rows), nt](patch_rows, *args)

        word = 4 if precision == "float32" else 8
        return launch, kernel, nt, plan_tiles(mx, mx, 3, 3, rows=rows, word=word)[0]
    if name in ("patch", "patch-noshare", "patch-nocells"):
        from forestpy.solvers.clawpack.gpu_patch_kernel import make_gpu_patch_kernel

        k = make_gpu_patch_kernel(rs, mx, mx, mbc, order=2, transverse_waves=2,
                                  max_registers=max_registers, rows_per_tile=rows,
                                  work_sharing=name != "patch-noshare",
                                  cell_states=False if name == "patch-nocells" else None)
        return k, k.kernel, k.nthreads, k.rows_per_tile
    raise SystemExit(f"unknown kernel {name!r}: tile, patch, patch-noshare or patch-nocells")


def kernel_rate(mx, cells, dtype, copy_gbs, mbc=2, reps=20, max_registers=None, rows=None,
                kernels=("tile",), check_patches=16):
    """Each kernel of ``kernels`` on the same patches (same card, same data): one record
    per kernel, then (several kernels) one ``kernel_compare`` record with the largest
    differences of ``qnew``, the Courant numbers and the edge fluxes between them, and
    each kernel's largest difference from the CPU kernel on the first
    ``check_patches`` patches (self-check)."""
    import cupy
    from forestpy.solvers.clawpack import make_step_kernel
    from forestpy.solvers.clawpack.limiters import LIMITERS

    from forestpy.vtable import get_riemann

    rs = get_riemann("shallow_roe")
    npatch = max(1, cells // (mx * mx))
    n = int(math.isqrt(npatch))
    npatch = n * n
    qh, d = radial_patches(npatch, mx, mbc, dtype)
    q = cupy.asarray(qh)
    nchk = min(check_patches, npatch)
    q_chk = qh[:nchk].astype(np.float64)
    del qh
    qn = cupy.empty_like(q)
    aux = cupy.zeros((npatch, 0) + q.shape[2:], dtype=dtype)
    dx = cupy.full(npatch, d)
    cfl = cupy.zeros(npatch)
    edge = cupy.zeros((npatch, 4, 3, mx))
    params = cupy.asarray(rs.params_array())
    lim = cupy.full(3, LIMITERS["mc"], dtype=np.int64)
    dt = 0.5 * d
    patch_rows = cupy.arange(npatch, dtype=cupy.int64)
    # the CPU kernel on the first patches: the reference of the self-check
    cpu = make_step_kernel(rs, order=2, transverse_waves=2)
    q_cpu = np.zeros_like(q_chk)
    cfl_cpu = np.zeros(nchk)
    edge_cpu = np.zeros((nchk, 4, 3, mx))
    cpu(q_chk, mbc, np.zeros((nchk, 0) + q_chk.shape[2:]), q_cpu, np.full(nchk, d),
        np.full(nchk, d), dt, rs.params_array(), np.full(3, LIMITERS["mc"], dtype=np.int64),
        cfl_cpu, edge_cpu)
    b = mbc
    results = {}
    recs = []
    for name in kernels:
        launch, kernel, nt, R = _launcher(name, rs, mx, mbc, max_registers, rows)
        args = (q, aux, qn, dx, dx, dt, params, lim, cfl, edge)
        qn.fill(np.nan)
        t0 = time.perf_counter()
        launch(patch_rows, *args)
        cupy.cuda.runtime.deviceSynchronize()
        compile_s = time.perf_counter() - t0
        times = []
        for _ in range(reps):
            with _timer() as t:
                launch(patch_rows, *args)
            times.append(t.ms)
        ms = float(np.median(times))
        ncell = npatch * mx * mx
        nbytes = 2 * q.nbytes + edge.nbytes + cfl.nbytes
        try:
            regs = kernel.get_regs_per_thread()
            local = kernel.get_local_mem_per_thread()
        except AttributeError:  # the CUDA simulator
            regs = local = None
        if isinstance(regs, dict):  # one entry per compiled signature
            regs = list(regs.values())[-1] if regs else None
            local = list(local.values())[-1] if local else None
        got = (cupy.asnumpy(qn[:nchk, :, b:-b, b:-b]).astype(np.float64),
               cupy.asnumpy(cfl[:nchk]), cupy.asnumpy(edge[:nchk]))
        want = (q_cpu[:, :, b:-b, b:-b], cfl_cpu, edge_cpu)
        rec = {
            "part": "kernel", "kernel": name, "mx": mx, "dtype": np.dtype(dtype).name,
            "npatch": npatch, "cells": ncell, "threads": nt, "max_registers": max_registers,
            "rows_per_tile": R, "registers": regs, "local_bytes": local,
            "compile_s": round(compile_s, 2), "ms": ms, "ms_min": float(np.min(times)),
            "Gcell_s": ncell / ms / 1e6, "GB_s": nbytes / ms / 1e6,
            "fraction_of_copy": nbytes / ms / 1e6 / copy_gbs,
            "courant": float(cfl.max()),
            "max_diff_cpu": [float(np.abs(g - w).max()) for g, w in zip(got, want)],
            "max_rel_diff_cpu_qnew": float(np.abs(got[0] - want[0]).max()
                                           / np.abs(want[0]).max()),
        }
        emit(rec)
        recs.append(rec)
        if len(kernels) > 1:
            results[name] = (qn[:, :, b:-b, b:-b].copy(), cfl.copy(), edge.copy())
    if len(results) > 1:
        names = list(results)
        a = results[names[0]]
        for other in names[1:]:
            c = results[other]
            diff = [float(cupy.abs(x - y).max()) for x, y in zip(a, c)]
            scale = float(cupy.abs(a[0]).max())
            emit({"part": "kernel_compare", "mx": mx, "dtype": np.dtype(dtype).name,
                  "cells": recs[0]["cells"], "kernels": [names[0], other],
                  "max_diff_qnew_cfl_edge": diff, "max_rel_diff_qnew": diff[0] / scale,
                  "bitwise_equal": all(v == 0.0 for v in diff),
                  "speedup": recs[0]["ms"] / recs[names.index(other)]["ms"]})
    del q, qn, edge, results
    cupy.get_default_memory_pool().free_all_blocks()
    return recs


def load_radial_dam():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "demos" / "radial_dam.py"
    spec = importlib.util.spec_from_file_location("radial_dam", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def simulation_rates(backend, mx, level, adaptive, dtype="float64", nsteps=20,
                     precision="float64"):
    """(b) full steps without regrid and (c) an adaptive run with regrids, radial dam.

    Uniform: level ``level`` everywhere; adaptive: levels ``level-2 .. level``.
    """
    demo = load_radial_dam()
    t0 = time.perf_counter()
    sim = demo.setup(mx=mx, min_level=level - 2 if adaptive else level, max_level=level,
                     backend=backend, dtype=dtype, t_final=10.0,
                     **({} if precision == "float64" else {"precision": precision}))
    setup_s = time.perf_counter() - t0
    sim.run(max_steps=2)  # compiles, estimates dt
    if adaptive:  # compiles the regrid's kernels (transfer, plans) outside the timings
        sim.regrid_interval = 2
        sim.run(t_final=10.0, max_steps=4)
    be = sim.backend
    base = {"backend": backend, "mx": mx, "level": level, "adaptive": adaptive,
            "dtype": dtype, "precision": precision, "setup_s": round(setup_s, 2)}
    if backend == "cpu":
        import numba

        base["threads"] = numba.config.NUMBA_NUM_THREADS
    out = []
    for part, regrid in (("step", 0), ("run", 2)):
        sim.regrid_interval = regrid
        steps0, updates0, regrids0 = sim.steps, sim.cell_updates, sim.regrids
        regrid_s0 = sim.timers.seconds.get("regrid", 0.0)
        be.synchronize()
        t0 = time.perf_counter()
        sim.run(t_final=10.0, max_steps=nsteps)
        be.synchronize()
        wall = time.perf_counter() - t0
        updates = sim.cell_updates - updates0
        nregrid = sim.regrids - regrids0
        rec = {"part": part, **base, "patches": int(sim.geom.npatch),
               "cells": int(sim.geom.npatch) * mx * mx, "steps": sim.steps - steps0,
               "regrids": nregrid, "wall_s": round(wall, 4),
               "Gcell_s": updates / wall / 1e9}
        if nregrid:  # host work mostly (tagging, forest, plans), with the transfer
            rec["s_per_regrid"] = round(
                (sim.timers.seconds.get("regrid", 0.0) - regrid_s0) / nregrid, 4)
        out.append(rec)
    # the phase split, with a synchronisation around each phase
    sim.timers = type(sim.timers)(sync=be.synchronize)
    sim.regrid_interval = 0
    sim.run(t_final=10.0, max_steps=max(3, nsteps // 4))
    out[0]["phases_s"] = {k: round(v, 5) for k, v in sim.timers.seconds.items() if v}
    # the regrid's sub-phases (tagging, forest, transfer, plans, aux), synchronised
    sim.timers = type(sim.timers)(sync=be.synchronize)
    sim.regrid_interval = 2
    steps0, regrids0 = sim.steps, sim.regrids
    sim.run(t_final=10.0, max_steps=max(4, nsteps // 2))
    passes = (sim.steps - steps0) // 2
    out[1]["regrid_phases"] = {
        "tagging_passes": passes, "regrids": sim.regrids - regrids0,
        "ms_total": {k: round(1e3 * v, 3) for k, v in sim.timers.seconds.items()
                     if k.startswith("regrid") and v}}
    for rec in out:
        emit(rec)
    return out


def cpu_rates(mx, level, threads_list, nsteps=3):
    """The same problems on the CPU backend, in subprocesses (NUMBA_NUM_THREADS)."""
    import subprocess

    for threads in threads_list:
        env = {**os.environ, "NUMBA_NUM_THREADS": str(threads)}
        for adaptive in (False, True):
            cmd = [sys.executable, __file__, "--parts", "cpu-inline", "--mx", str(mx),
                   "--level", str(level), "--nsteps", str(nsteps)]
            if adaptive:
                cmd.append("--adaptive")
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            print(res.stdout.strip() or res.stderr[-2000:], flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="copy,kernel")
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--mx", default="16,32")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--regs", default="auto", help="max registers per thread, e.g. auto,128,96")
    ap.add_argument("--rows", default="auto", help="rows per tile, e.g. auto,4,6")
    ap.add_argument("--levels", default="6,7,8", help="radial dam levels for step/run (mx=16)")
    ap.add_argument("--level", type=int, default=7, help="level of the CPU comparison")
    ap.add_argument("--nsteps", type=int, default=20)
    ap.add_argument("--adaptive", action="store_true")
    ap.add_argument("--cpu-threads", default="1,16")
    ap.add_argument("--kernel", default="tile", help="step kernels to time: tile,patch")
    ap.add_argument("--sizes", default=None, help="cells per kernel run, e.g. 1e6,1e8")
    ap.add_argument("--fma", default="default", choices=("default", "0", "1"))
    ap.add_argument("--precisions", default="float64",
                    help="step/run parts: arithmetic of the step kernel, e.g. "
                         "float64,mixed (float32 runs on float32 fields)")
    args = ap.parse_args(argv)
    if args.fma != "default":
        from forestpy.backend import contract_multiply_add

        contract_multiply_add(args.fma == "1")
    parts = set(args.parts.split(","))
    if "cpu-inline" in parts:
        simulation_rates("cpu", int(args.mx.split(",")[0]), args.level, args.adaptive,
                         nsteps=args.nsteps)
        return
    emit({"part": "info", "argv": sys.argv, "date": time.strftime("%Y-%m-%d %H:%M"),
          "host_cpus": os.cpu_count(), "fma": args.fma})
    copy_gbs = copy_bandwidth(1 << 28 if args.quick else 4 << 30) if "copy" in parts else 3000.0
    sizes = [10**5, 10**6] if args.quick else [10**5, 10**6, 10**7, 16 * 10**6, 10**8]
    if args.sizes:
        sizes = [int(float(v)) for v in args.sizes.split(",")]
    if "kernel" in parts:
        for mx in map(int, args.mx.split(",")):
            for dtype in args.dtypes.split(","):
                for regs in args.regs.split(","):
                    for rows in args.rows.split(","):
                        for cells in sizes:
                            kernel_rate(mx, cells, np.dtype(dtype), copy_gbs,
                                        max_registers=None if regs == "auto" else int(regs),
                                        rows=None if rows == "auto" else int(rows),
                                        kernels=tuple(args.kernel.split(",")))
    mx0 = int(args.mx.split(",")[0])
    if "step" in parts:
        for dtype in args.dtypes.split(","):
            for precision in args.precisions.split(","):
                if (precision == "float32" and dtype != "float32"
                        or precision == "mixed" and dtype == "float32"):
                    continue  # float32 arithmetic on float32 fields, mixed on float64
                for level in map(int, args.levels.split(",")):
                    for adaptive in (False, True):
                        simulation_rates("gpu", mx0, level, adaptive, dtype, args.nsteps,
                                         precision)
    if "cpu" in parts:
        cpu_rates(mx0, args.level, [int(t) for t in args.cpu_threads.split(",")])


if __name__ == "__main__":
    main()
