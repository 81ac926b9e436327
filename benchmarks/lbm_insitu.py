"""The D3Q27 solver on compressed subgrids (``forestpy.solvers.lbm.insitu``, issue 35
item 3): the seed's Table 1 (share of time in LBM, compression, decompression,
synchronisation; ratio) for the plain solver, the subgrid workflow without compression
and with the 3D ``dwt53`` codec, plus ratio over time, NMSE(density) against the
uncompressed run, mass drift and memory; self-checking; JSON lines.

The flow (``--flow sphere``): a periodic box elongated along x with a sphere (diameter
``ny/4``) at a quarter of its length, driven by a body force along x, started
impulsively from a uniform velocity ``--u0`` (the start-up transient of the seed's
section 4.4); ``--flow wave``: no obstacle, a density wave and a shear wave along z
(smooth, compresses well: the case for the memory-limit run).

Records (``"kind"``):

* ``check`` -- ``none_vs_plain``: the workflow with the codec ``none`` against the plain
  solver, ``same_bits`` (must be true); on the GPU also ``gpu_vs_cpu``: the workflow
  (both codecs, each kernel of ``--kernel``; the register kernel in float64 arithmetic)
  on the device against the CPU, ``same_bits`` of the states and ``same_store_bytes``
  (the ring's live bytes);
* ``plain`` -- the plain solver (per kernel): ``mlups``;
* ``insitu`` -- per kernel and codec (``--codecs``): ``kernel``, ``arith``, ``mlups``,
  ``shares`` (lbm, compress, decompress, sync), ``ratio_first``/``ratio_min``/
  ``ratio_mean``/``ratio_final`` and a subsampled ``ratio_history``, ``nmse_density``
  (the seed's eq. 19) and ``max_abs_h_diff`` against the plain run of the same kernel
  at the end, ``mass_drift_rel``, ``memory`` (bytes: ring capacity, peak live, working
  set, uncompressed state);
* ``memory_limit`` (``--memory-factor F``) -- the same run with ``memory_limit`` = the
  uncompressed state / F: ``finished`` (or the ``StoreFull`` message), ``memory``,
  ratios.

The script exits with status 1 when a check fails.

    python benchmarks/lbm_insitu.py                         # CPU, 64 x 32 x 32, 40 steps
    python benchmarks/lbm_insitu.py --gpu                   # 512 x 128 x 128, 400 steps
    python benchmarks/lbm_insitu.py --gpu --kernel cell,register   # both GPU kernels
    python benchmarks/lbm_insitu.py --gpu --flow wave --dtype float64 --grid 16,16,262144 \\
        --subgrids 1,1,64 --tol 1e-8 --force 0 --u0 0.01 --startup '' --chunk 1 --steps 100 \\
        --memory-factor 10
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import numpy as np
from forestpy.solvers.lbm import LBM, sphere
from forestpy.solvers.lbm.insitu import InSituLBM, StoreFull, nmse


def case(shape, u0, flow="sphere"):
    """``(solid, rho, u)``: the sphere flow, or (``wave``) no obstacle, a density wave
    along z (one wavelength) and a shear wave ``u_x = u0 cos(8 pi z / nz)`` (smooth:
    the case of the 10x-memory test)."""
    nx, ny, nz = shape
    if flow == "wave":
        z = np.arange(nz)
        rho = 1.0 + 1e-3 * np.sin(2 * np.pi * z / nz)[None, None, :] * np.ones(shape)
        u = np.zeros((3, *shape))
        u[0] = u0 * np.cos(8 * np.pi * z / nz)[None, None, :]
        return None, rho, u
    body = sphere(shape, (nx / 4 - 0.5, ny / 2 - 0.5, nz / 2 - 0.5), ny / 8)
    u = np.zeros((3, *shape))
    u[0] = u0
    u[:, body] = 0.0
    return body, 1.0, u


def run_plain(shape, tau, force, body, rho, u, dtype, backend, steps, kernel="cell",
              arith=None):
    sim = LBM(shape, tau, force=force, solid=body, rho=rho, u=u, dtype=dtype,
              backend=backend, kernel=kernel, arith=arith)
    sim.backend.synchronize()
    t0 = time.perf_counter()
    sim.run(steps)
    sim.backend.synchronize()
    return sim, time.perf_counter() - t0


def run_insitu(shape, tau, force, body, rho, u, dtype, backend, steps, a, codec,
               limit=None, kernel="cell"):
    sim = InSituLBM(shape, tau, force=force, solid=body, rho=rho, u=u, dtype=dtype,
                    backend=backend, kernel=kernel, arith=a.arith,
                    subgrids=a.subgrids, steps_per_cycle=a.K, codec=codec, block=a.block,
                    chunk=a.chunk, startup=a.startup if codec != "none" else None,
                    memory_limit=limit)
    m0 = sim.mass()
    sim.run(a.K)  # compilation and warm-up
    for k in sim.timings:
        sim.timings[k] = 0.0
    sim.backend.synchronize()
    t0 = time.perf_counter()
    sim.run(steps - a.K)
    sim.backend.synchronize()
    seconds = time.perf_counter() - t0
    return sim, seconds, m0


def plain_density(sim):
    """``1 + sum_q h_q`` of the plain solver at even ``t`` (its natural layout; solid
    cells hold ``h = 0``), summed on its backend: ``LBM.density`` would build float64
    copies of all 27 fields on the host."""
    assert sim.t % 2 == 0
    h = sim._h.reshape(27, -1)
    return np.asarray(sim.backend.to_host(1.0 + h.sum(axis=0, dtype=np.float64))
                      ).reshape(sim.shape)


#: largest grid (cells) whose full states are compared on the host
HOST_COMPARE = 1 << 24


def _ratios(sim):
    r = [x for _, x in sim.ratio_history]
    step = max(1, len(sim.ratio_history) // 40)
    return {"ratio_first": r[1] if len(r) > 1 else r[0], "ratio_min": min(r),
            "ratio_mean": float(np.mean(r)), "ratio_final": r[-1],
            "ratio_history": [[t, round(x, 3)] for t, x in sim.ratio_history[::step]]}


def checks(a, backend):
    ok = True
    shape = (16, 8, 8)
    body, _, u = case(shape, a.u0)
    kw = dict(force=(a.force, 0.0, 0.0), solid=body, u=u, dtype=a.dtype)
    plain = LBM(shape, a.tau, backend=backend, **kw)
    sub = InSituLBM(shape, a.tau, backend=backend, subgrids=(2, 1, 1), steps_per_cycle=2,
                    **kw)
    plain.run(4)
    sub.run(4)
    same = bool(np.array_equal(plain.raw(), sub.state()))
    ok &= same
    print(json.dumps({"kind": "check", "what": "none_vs_plain", "backend": backend,
                      "same_bits": same}), flush=True)
    if backend == "gpu":
        for kernel, codec in itertools.product(a.kernels, ("none", f"dwt53:tol={a.tol}")):
            args = dict(subgrids=(2, 1, 1), steps_per_cycle=2, codec=codec, block=4, **kw)
            cpu = InSituLBM(shape, a.tau, backend="cpu", **args)
            gpu = InSituLBM(shape, a.tau, backend="gpu", kernel=kernel, arith="float64",
                            **args)
            cpu.run(4)
            gpu.run(4)
            x, y = cpu.state(), gpu.state()
            rec = {"kind": "check", "what": "gpu_vs_cpu", "codec": codec, "kernel": kernel,
                   "same_bits": bool(np.array_equal(x, y)),
                   "max_abs_diff": float(np.abs(x.astype(np.float64) - y).max()),
                   "same_store_bytes": cpu.ring.live == gpu.ring.live,
                   "device": gpu.backend.describe().get("device")}
            ok &= rec["same_bits"] and rec["same_store_bytes"]
            print(json.dumps(rec), flush=True)
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true", help="run on the GPU (default: CPU)")
    p.add_argument("--flow", choices=("sphere", "wave"), default="sphere")
    p.add_argument("--grid", default=None, help="nx,ny,nz (default 64,32,32 on the CPU, "
                   "512,128,128 on the GPU)")
    p.add_argument("--subgrids", default=None, help="per axis (default 4,1,1 / 8,1,1)")
    p.add_argument("--K", type=int, default=2, help="steps per cycle")
    p.add_argument("--steps", type=int, default=None, help="default 40 / 400")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tau", type=float, default=0.6)
    p.add_argument("--u0", type=float, default=0.05)
    p.add_argument("--force", type=float, default=1e-6)
    p.add_argument("--tol", type=float, default=1e-6,
                   help="dwt53 L-infinity bound on the stored h = f - w")
    p.add_argument("--codecs", default=None,
                   help="comma-separated (default: none,dwt53:tol=<tol>)")
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--chunk", type=int, default=None)
    p.add_argument("--startup", default="40,0.01",
                   help="steps,factor of the gradual start-up ('' for none)")
    p.add_argument("--memory-factor", type=float, default=None,
                   help="also run with memory_limit = uncompressed state / F")
    p.add_argument("--kernel", default="cell",
                   help="GPU kernel(s), comma-separated: cell, register (default cell)")
    p.add_argument("--arith", default=None, choices=("float32", "float64"),
                   help="the register kernel's arithmetic (default: float64 for float64 "
                   "storage, float32 otherwise)")
    p.add_argument("--no-check", action="store_true")
    a = p.parse_args(argv)
    backend = "gpu" if a.gpu else "cpu"
    a.kernels = a.kernel.split(",")
    for k in a.kernels:
        if k not in ("cell", "register"):
            p.error(f"--kernel: unknown kernel {k!r} (cell, register)")
    if backend == "cpu" and a.kernels != ["cell"]:
        p.error("--kernel register needs --gpu (the CPU runs the cell kernel)")
    shape = tuple(int(v) for v in (a.grid or ("512,128,128" if a.gpu else "64,32,32"))
                  .split(","))
    a.subgrids = tuple(int(v) for v in (a.subgrids or ("8,1,1" if a.gpu else "4,1,1"))
                       .split(","))
    steps = a.steps or (400 if a.gpu else 40)
    steps = max(2 * a.K, steps // a.K * a.K)
    if steps % 2:  # densities are compared in the natural (even-step) layout
        steps += a.K
    a.startup = (tuple(float(v) for v in a.startup.split(",")) if a.startup else None)
    if a.startup:
        a.startup = (int(a.startup[0]), a.startup[1])
    codecs = (a.codecs or f"none,dwt53:tol={a.tol}").split(",")
    ok = True
    if not a.no_check:
        ok &= checks(a, backend)
    body, rho, u = case(shape, a.u0, a.flow)
    force = (a.force, 0.0, 0.0)
    ncell = int(np.prod(shape))
    for kernel in a.kernels:
        plain, seconds = run_plain(shape, a.tau, force, body, rho, u, a.dtype, backend,
                                   steps, kernel, a.arith)
        base = {"backend": backend, "flow": a.flow, "grid": list(shape), "dtype": a.dtype,
                "tau": a.tau, "u0": a.u0, "steps": steps, "kernel": kernel,
                "arith": plain.arith, "device": plain.backend.describe().get("device")}
        print(json.dumps({"kind": "plain", **base, "seconds": seconds,
                          "mlups": ncell * steps / seconds / 1e6,
                          "shares": {"lbm": 1.0, "compress": 0.0, "decompress": 0.0,
                                     "sync": 0.0}}), flush=True)
        rho_ref = plain_density(plain)
        h_ref = plain.raw() if ncell <= HOST_COMPARE else None
        del plain
        for codec in codecs:
            sim, secs, m0 = run_insitu(shape, a.tau, force, body, rho, u, a.dtype,
                                       backend, steps, a, codec, kernel=kernel)
            total = sum(sim.timings.values())
            rec = {"kind": "insitu", **base, "subgrids": list(a.subgrids), "K": a.K,
                   "codec": codec, "block": a.block,
                   "startup": list(a.startup) if a.startup and codec != "none" else None,
                   "seconds": secs, "mlups": ncell * (steps - a.K) / secs / 1e6,
                   "shares": {k: v / total for k, v in sim.timings.items()},
                   "nmse_density": nmse(rho_ref, sim.density()),
                   "max_abs_h_diff": (None if h_ref is None else float(np.abs(
                       sim.state().astype(np.float64) - h_ref).max())),
                   "mass_drift_rel": (sim.mass() - m0) / m0, "memory": sim.memory(),
                   **_ratios(sim)}
            if codec == "none":
                rec["same_bits_as_plain"] = (None if h_ref is None else
                                             bool(rec["max_abs_h_diff"] == 0.0))
                # float32 arithmetic (fastmath) in kernels generated for two shapes:
                # the same bits are likely, not guaranteed -- reported, not required
                if kernel == "cell" or sim.arith == "float64":
                    ok &= rec["same_bits_as_plain"] is not False
                    ok &= rec["nmse_density"] == 0.0
            print(json.dumps(rec), flush=True)
            del sim
    if a.memory_factor:
        codec = next(c for c in codecs if c != "none")
        state = 27 * ncell * np.dtype(a.dtype).itemsize
        limit = int(state / a.memory_factor)
        rec = {"kind": "memory_limit", **base, "codec": codec, "factor": a.memory_factor,
               "limit": limit}
        try:
            sim, secs, m0 = run_insitu(shape, a.tau, force, body, rho, u, a.dtype,
                                       backend, steps, a, codec, limit=limit,
                                       kernel=a.kernels[-1])
            rec.update(finished=True, seconds=secs, memory=sim.memory(),
                       mlups=ncell * (steps - a.K) / secs / 1e6,
                       nmse_density=nmse(rho_ref, sim.density()),
                       mass_drift_rel=(sim.mass() - m0) / m0, **_ratios(sim))
        except StoreFull as e:
            rec.update(finished=False, error=str(e))
        print(json.dumps(rec), flush=True)
    print(json.dumps({"kind": "summary", "checks_ok": bool(ok)}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
