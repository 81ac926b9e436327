"""Radial dam break: speed, AMR overhead and accuracy; one JSON record per run.

Runs, each in a fresh process so NUMBA_NUM_THREADS takes effect:

* ``uniform``  -- 512 x 512 cells: mx = 32, level 4 on one tree;
* ``adaptive`` -- coarsest 128 x 128 (mx = 32, level 2), three levels (2, 3, 4),
  finest equivalent 512 x 512;
* ``adaptive5`` -- coarsest 32 x 32 (mx = 32, level 0), five levels, the same finest;

each with one thread and with all cores.  Reported: cell updates per second (wall time
of the run after a warm-up that compiles the kernels), the share of wall time spent in
ghost fill + regrid + time sync, and the L1 error of the depth along y = 0 against a
1D radially symmetric reference solution (20000 cells).

    python benchmarks/radial_dam.py                # all four runs
    python benchmarks/radial_dam.py --case uniform --threads 1
    python benchmarks/radial_dam.py --case uniform --backend gpu --subcycle off \
        --precision float64 --precision float32 --precision mixed
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "uniform": dict(mx=32, min_level=4, max_level=4),
    "adaptive": dict(mx=32, min_level=2, max_level=4),
    "adaptive5": dict(mx=32, min_level=0, max_level=4),
}


def depth_error_along_axis(sim, reference) -> float:
    """L1 error of h along the row of cells just above y = 0 (the finest row)."""
    import numpy as np
    from forestpy.extensions.reference import sample

    n = sim.mx * 2**sim.max_level
    (x0, y0), (x1, y1) = sim.domain.lower, sim.domain.upper
    dx = (x1 - x0) / n
    x = x0 + (np.arange(n) + 0.5) * dx
    y = np.full(n, 0.5 * (y1 - y0) / n)
    h = sim.sample(x, y)[:, 0]
    r_ref, h_ref, _ = reference
    return float(np.sum(np.abs(h - sample(r_ref, h_ref, np.hypot(x, y)))) * dx)


def run_case(case: str, subcycle: bool = True, overrides: dict | None = None) -> dict:
    import importlib.util

    import numba

    spec = importlib.util.spec_from_file_location("radial_dam", ROOT / "demos" / "radial_dam.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    from forestpy.extensions.reference import solve_radial_dam

    options = {**CASES[case], **(overrides or {})}
    run_on = {k: options[k] for k in ("backend", "precision") if k in options}
    demo.setup(mx=8, min_level=1, max_level=2, t_final=0.05, **run_on).run()  # compile
    sim = demo.setup(**options, subcycle=subcycle)
    t0, c0 = time.perf_counter(), time.process_time()
    sim.run()
    sim.backend.synchronize()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    ref = solve_radial_dam(ncells=20000, t_final=sim.t)
    reference_s = time.perf_counter() - t0
    timers = sim.timers.as_dict()
    overhead = timers["ghost_fill"] + timers["regrid"] + timers["time_sync"]
    return {
        "benchmark": "radial_dam",
        "reference_wall_s": round(reference_s, 3),  # the 1D reference (20000 cells)
        "case": case,
        **options,
        "refine_threshold": sim.options["refine_threshold"],
        "subcycle": sim.subcycling,
        "backend": sim.backend.name,
        "precision": sim.precision,
        "threads": numba.config.NUMBA_NUM_THREADS,
        "machine": platform.machine(),
        "cpu": platform.processor() or "unknown",
        "steps": sim.steps,
        "level_steps": sim.level_steps,
        "cpu_s": round(cpu, 4),
        "regrids": sim.regrids,
        "patches_per_level": sim.patches_per_level(),
        "cell_updates": sim.cell_updates,
        "wall_s": round(wall, 4),
        "cell_updates_per_s": round(sim.cell_updates / wall),
        "amr_overhead_share": round(overhead / wall, 4),
        "timers": timers,
        "l1_depth_error_y0": depth_error_along_axis(sim, ref),
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(CASES), action="append")
    p.add_argument("--threads", type=int, action="append",
                   help="NUMBA_NUM_THREADS values (default: 1 and all cores)")
    p.add_argument("--subcycle", choices=("on", "off"), action="append",
                   help="local time stepping of the adaptive runs (default: on)")
    p.add_argument("--mx", type=int, help="cells per patch side (instead of the case's)")
    p.add_argument("--min-level", type=int, help="coarsest level (finest: + the case's span)")
    p.add_argument("--threshold", type=float, help="refine threshold (default the demo's)")
    p.add_argument("--inline", action="store_true", help="run in this process (one case)")
    p.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--precision", action="append",
                   choices=("float64", "float32", "mixed"),
                   help="arithmetic of the GPU step kernel (default float64)")
    args = p.parse_args(argv)
    extra = []
    for flag in ("mx", "min_level", "threshold"):
        value = getattr(args, flag)
        if value is not None:
            extra += [f"--{flag.replace('_', '-')}", str(value)]
    modes = args.subcycle or ["on"]
    precisions = args.precision or ["float64"]
    cases = args.case or ["uniform", "adaptive"]
    if args.inline:
        for case in cases:
            over = {}
            if args.mx is not None:
                over["mx"] = args.mx
            if args.min_level is not None:
                span = CASES[case]["max_level"] - CASES[case]["min_level"]
                over.update(min_level=args.min_level, max_level=args.min_level + span)
            if args.threshold is not None:
                over["refine_threshold"] = args.threshold
            over["backend"] = args.backend
            for mode in modes:
                for prec in precisions:
                    print(json.dumps(run_case(case, mode == "on",
                                              {**over, "precision": prec})), flush=True)
        return
    extra += ["--backend", args.backend]
    for prec in precisions:
        extra += ["--precision", prec]
    for threads in args.threads or [1, os.cpu_count()]:
        for case in cases:
            for mode in modes:
                env = {**os.environ, "NUMBA_NUM_THREADS": str(threads)}
                out = subprocess.run([sys.executable, __file__, "--inline", "--case", case,
                                      "--subcycle", mode, *extra],
                                     env=env, check=True, capture_output=True, text=True)
                print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
