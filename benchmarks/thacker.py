"""Thacker's planar and curved cases: depth errors of forestpy's wet/dry solvers (and of
GeoClaw on the same grids); one JSON record per run.

forestpy runs ``demos/geoclaw/thacker_planar.py`` and ``demos/geoclaw/bowl_radial.py``
(``case=thacker``) on uniform grids of 128^2 and 256^2 cells at half (and, curved, a
whole) period, for each ``--riemann-solver``.  With ``--geoclaw DIR``, GeoClaw's final
depths on the same grids (``DIR/{planar,curved}_{128,256}_{half,full}.npy``, rows = y
from the bottom; GeoClaw built and run outside the project with the same exact
cell-averaged bottoms and initial states, see docs/geoclaw_solver.md) are scored by the
same error functions.

    python benchmarks/thacker.py
    python benchmarks/thacker.py --riemann-solver geoclaw,geoclaw_hr --geoclaw /path/to/ref
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np
from forestpy.extensions.reference.thacker import ThackerPlanar

ROOT = Path(__file__).resolve().parents[1]
LEVELS = {128: 4, 256: 5}  # mx = 8: 8 * 2^level cells a side


def _demo(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "demos" / "geoclaw" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runs(sizes):
    for n in sizes:
        yield "planar", n, "half"
        yield "curved", n, "half"
        yield "curved", n, "full"


def forestpy_record(case, n, when, solver, planar, bowl) -> dict:
    level = LEVELS[n]
    t0 = time.perf_counter()
    if case == "planar":
        sim = planar.setup(min_level=level, max_level=level, riemann_solver=solver).run()
        err = planar.report(sim, None)["l1_depth_error_relative"]
    else:
        exact = bowl.Thacker(0.1)
        frac = 0.5 if when == "half" else 1.0
        sim = bowl.setup(case="thacker", min_level=level, max_level=level,
                         t_final=frac * exact.period, riemann_solver=solver).run()
        err = bowl.thacker_errors(sim, exact)["l1_depth_error_relative"]
    return {"benchmark": "thacker", "code": f"forestpy {solver}", "case": case, "n": n,
            "t": when, "steps": sim.steps, "wall_s": round(time.perf_counter() - t0, 3),
            "l1_depth_error_relative": err}


def geoclaw_record(case, n, when, ref: Path, planar, bowl) -> dict | None:
    path = ref / f"{case}_{n}_{when}.npy"
    if not path.exists():
        return None
    h = np.load(path)
    if case == "planar":
        exact, half_width = ThackerPlanar(), planar.HALF_WIDTH  # the demo's defaults
        t = 0.5 * exact.period
    else:
        exact, half_width = bowl.Thacker(0.1), bowl.HALF_WIDTH
        t = exact.period * (0.5 if when == "half" else 1.0)
    d = 2 * half_width / n
    c = -half_width + (np.arange(n) + 0.5) * d
    x, y = np.meshgrid(c, c)
    href = exact.cell_average_depth(x, y, d + 0 * x, d + 0 * x, t)
    return {"benchmark": "thacker", "code": "GeoClaw 5.14", "case": case, "n": n, "t": when,
            "l1_depth_error_relative": float(np.abs(h - href).sum() / href.sum())}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--riemann-solver", default="geoclaw",
                   help="comma-separated: geoclaw, geoclaw_hr")
    p.add_argument("--sizes", default="128,256")
    p.add_argument("--geoclaw", type=Path, help="folder of GeoClaw's final depths (.npy)")
    args = p.parse_args(argv)
    planar, bowl = _demo("thacker_planar"), _demo("bowl_radial")
    for case, n, when in _runs(int(s) for s in args.sizes.split(",")):
        for solver in args.riemann_solver.split(","):
            print(json.dumps(forestpy_record(case, n, when, solver, planar, bowl)), flush=True)
        if args.geoclaw:
            rec = geoclaw_record(case, n, when, args.geoclaw, planar, bowl)
            if rec:
                print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
