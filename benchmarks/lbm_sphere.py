"""Flow past a sphere with the D3Q27 lattice Boltzmann solver (``forestpy.solvers.lbm``):
the mean drag coefficient and Strouhal number against published values, and the speed
of the run; JSON lines.

Records (one JSON object per line, ``"kind"`` says which):

* ``check`` (GPU only) -- a small sphere channel (velocity inlet, pressure outlet,
  periodic sides) stepped on the GPU and the CPU: ``same_bits`` of the distributions and
  ``max_force_diff`` of the momentum-exchange forces after 1, 2 and 5 steps, for the
  storage ``--dtype``;
* ``sphere`` -- the run: grid, diameter ``D`` (cells), ``Re = U D / nu``, ``tau``,
  inflow speed ``U``, steps, convective times ``t U / D``, wall time (force recording
  every step included), ``mlups`` (million lattice updates per second), mean ``C_D``
  and ``|C_L|`` and ``St`` over the last ``--window`` share of the run, the reference
  values and the relative differences.

Default (the GPU run, a few minutes on an H100): Re = 300, D = 24 cells, channel
10 x 5 x 5 D (240 x 120 x 120 cells), U = 0.08, 150 D/U (45,000 steps), BGK (the most
stable near tau = 1/2; ``--collision trt`` for TRT, magic 1/12), FP32 storage; Johnson &
Patel (1999): C_D = 0.656, St = 0.137.  ``--quick`` (the CPU run, under a minute on 2
cores): Re = 50, D = 8, channel 6 x 5 x 5 D, U = 0.1,
15 D/U, TRT (magic 3/16); the steady drag against the Clift-Grace-Weber correlation
(C_D = 1.574 at Re = 50; measured 1.79, +14 %: the coarse sphere and the 5 D channel).
A run that blows up prints a record with ``"unstable": true`` and exits 1; one that
is still running after ``--max-seconds`` (270 s) stops there and is analysed as it is
(``"truncated": true``).

    python benchmarks/lbm_sphere.py --backend gpu                  # Re = 300
    python benchmarks/lbm_sphere.py --backend gpu --dtype float16  # FP16 storage
    python benchmarks/lbm_sphere.py --quick                        # CPU, Re = 50
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from forestpy.solvers.lbm.sphere import REFERENCE_RE300, SphereFlow, drag_correlation


def check(dtype):
    kw = dict(re=100, diameter=6, size=(4, 2, 2), center=1.5, speed=0.1, dtype=dtype)
    cpu = SphereFlow(backend="cpu", **kw)
    gpu = SphereFlow(backend="gpu", **kw)
    for steps in (1, 1, 3):
        cpu.run(steps)
        gpu.run(steps)
        a, b = cpu.sim.raw(), gpu.sim.raw()
        same = bool(np.array_equal(a.view(np.uint8), b.view(np.uint8)))
        print(json.dumps({"kind": "check", "dtype": dtype, "t": cpu.steps, "same_bits": same,
                          "max_abs_diff": float(np.abs(a.astype(np.float64) - b).max()),
                          "max_force_diff": float(np.abs(cpu.force_history
                                                         - gpu.force_history).max()),
                          "device": gpu.sim.backend.describe().get("device")}), flush=True)


def rel(a, b):
    return None if b is None or not np.isfinite(a) else (a - b) / b


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("cpu", "gpu"), default=None,
                   help="default: gpu, or cpu with --quick")
    p.add_argument("--quick", action="store_true",
                   help="the CPU case: Re = 50, D = 8, 6 x 3 x 3 D, U = 0.1, 30 D/U")
    p.add_argument("--re", type=float, default=None)
    p.add_argument("--diameter", type=int, default=None)
    p.add_argument("--size", default=None, help="channel length,width,height in D")
    p.add_argument("--speed", type=float, default=None, help="inflow speed U")
    p.add_argument("--convective", type=float, default=None,
                   help="run length in convective times D/U")
    p.add_argument("--window", type=float, default=None,
                   help="share of the run analysed (the end; default 0.4, --quick 0.2)")
    p.add_argument("--dtype", default="float32", choices=("float16", "float32", "float64"))
    p.add_argument("--collision", default=None, choices=("bgk", "trt"),
                   help="default bgk (the most stable near tau = 1/2); --quick: trt")
    p.add_argument("--magic", type=float, default=None,
                   help="TRT magic parameter (default 1/12; --quick 3/16)")
    p.add_argument("--csv", default=None, help="write the force history (C_D, C_y, C_z)")
    p.add_argument("--no-check", action="store_true", help="skip the GPU-vs-CPU check")
    p.add_argument("--max-seconds", type=float, default=270.0,
                   help="stop stepping after this wall time (default 270 s) and analyse "
                   "the run so far (\"truncated\": true)")
    a = p.parse_args(argv)
    quick = dict(re=50.0, diameter=8, size="6,5,5", speed=0.1, convective=15.0, window=0.2,
                 collision="trt", magic=3.0 / 16.0)
    full = dict(re=300.0, diameter=24, size="10,5,5", speed=0.08, convective=150.0,
                window=0.4, collision="bgk", magic=1.0 / 12.0)
    base = quick if a.quick else full
    o = {k: (getattr(a, k) if getattr(a, k) is not None else v) for k, v in base.items()}
    backend = a.backend or ("cpu" if a.quick else "gpu")
    if backend == "gpu" and not a.no_check:
        check(a.dtype)
    size = tuple(float(s) for s in o["size"].split(","))
    flow = SphereFlow(re=o["re"], diameter=o["diameter"], size=size,
                      center=2.0 if a.quick else 3.0, speed=o["speed"],
                      collision=o["collision"], magic=o["magic"], dtype=a.dtype, backend=backend)
    steps = int(round(o["convective"] * flow.time_unit))
    flow.run(2)  # compile
    t0 = time.perf_counter()
    truncated = False
    try:
        while flow.steps < steps:
            flow.run(min(2000, steps - flow.steps))
            if time.perf_counter() - t0 > a.max_seconds and flow.steps < steps:
                truncated = True  # out of time: analyse what there is, say so
                break
    except FloatingPointError as e:
        print(json.dumps({"kind": "sphere", "unstable": True, "error": str(e),
                          "grid": list(flow.shape), "D": flow.diameter, "Re": o["re"],
                          "tau": flow.tau, "collision": o["collision"], "magic": o["magic"],
                          "dtype": a.dtype, "steps": flow.steps}), flush=True)
        raise SystemExit(1) from None
    seconds = time.perf_counter() - t0
    res = flow.analyse(o["window"])
    cells = int(np.prod(flow.shape))
    if o["re"] == 300:
        ref = {"CD": REFERENCE_RE300["CD"], "St": REFERENCE_RE300["St"],
               "CL": REFERENCE_RE300["CL"], "source": REFERENCE_RE300["source"]}
    else:
        ref = {"CD": drag_correlation(o["re"]), "St": None, "CL": None,
               "source": "Clift, Grace & Weber 1978 correlation (steady flow)"}
    rec = {"kind": "sphere", "backend": backend, "device": flow.sim.backend.describe().get(
           "device"), "dtype": a.dtype, "collision": o["collision"], "magic": o["magic"],
           "grid": list(flow.shape),
           "cells": cells, "D": flow.diameter, "Re": o["re"], "U": o["speed"],
           "tau": flow.tau, "steps": flow.steps, "convective_times": flow.steps / flow.time_unit,
           "window": o["window"], "seconds": seconds,
           "mlups": cells * (flow.steps - 2) / seconds / 1e6, "truncated": truncated,
           "blockage": float(np.pi / 4 / (size[1] * size[2])),
           **{k: res.get(k) for k in ("CD", "CD_std", "CL", "CL_amplitude", "St",
                                      "St_zero_crossings", "St_halves", "periodic")},
           "reference": ref, "rel_diff_CD": rel(res["CD"], ref["CD"]),
           "rel_diff_St": rel(res["St"], ref["St"]) if ref["St"] else None,
           "cpu_count": os.cpu_count()}
    print(json.dumps(rec), flush=True)
    if a.csv:
        c = flow.coefficients()
        np.savetxt(a.csv, np.column_stack([np.arange(1, len(c) + 1), c]), delimiter=",",
                   header="step,CD,Cy,Cz", comments="", fmt=["%d", "%.9g", "%.9g", "%.9g"])


if __name__ == "__main__":
    main()
