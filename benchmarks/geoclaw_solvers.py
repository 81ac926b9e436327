"""Step-kernel cost of the wet/dry Riemann solvers, one JSON record per solver.

The 40 m hump in the 80 m bowl (tests/extensions/geoclaw/test_geoclaw_solver.py's
``bowl``) on a uniform grid (mx 8, level 5: 256^2 cells), a few steps of warm-up, then
``--steps`` steps timed by the ``step`` timer; solvers interleaved over ``--repeats``
rounds.  Reports nanoseconds per cell update of the step kernel (best and all rounds) and
the ratio to the first solver.  Set ``NUMBA_NUM_THREADS`` before starting it.

    NUMBA_NUM_THREADS=1 python benchmarks/geoclaw_solvers.py
"""

from __future__ import annotations

import argparse
import json
import platform

import numpy as np
from forestpy.extensions.geoclaw.model import geoclaw_simulation

from forestpy import Domain


def bowl(riemann_solver, level):
    """The bowl b = 0.01 r^2 - 80 (exact cell averages) with a 40 m hump off centre."""
    return geoclaw_simulation(
        lambda x, y, dx, dy: 1e-2 * (x**2 + y**2 + (dx**2 + dy**2) / 12.0) - 80.0,
        domain=Domain((-100, -100), (100, 100)),
        eta_init=lambda x, y: 40.0 * np.exp(-((x - 20.0) ** 2 + (y - 10.0) ** 2) / 200.0),
        mx=8, min_level=level, max_level=level, wave_tolerance=1.0, t_final=100.0,
        riemann_solver=riemann_solver)


def main(argv=None) -> None:
    import numba

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--riemann-solver", default="geoclaw_hr,geoclaw")
    p.add_argument("--level", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    solvers = args.riemann_solver.split(",")
    ns = {s: [] for s in solvers}
    for _ in range(args.repeats):
        for solver in solvers:
            sim = bowl(solver, args.level)
            sim.run(max_steps=2)
            before = sim.timers.as_dict().get("step", 0.0)
            sim.run(max_steps=args.steps)
            seconds = sim.timers.as_dict()["step"] - before
            ns[solver].append(seconds / (args.steps * sim.geom.npatch * sim.mx * sim.my) * 1e9)
    for solver in solvers:
        print(json.dumps({
            "benchmark": "geoclaw_solvers", "riemann_solver": solver, "level": args.level,
            "cells": sim.geom.npatch * sim.mx * sim.my, "steps": args.steps,
            "threads": numba.config.NUMBA_NUM_THREADS, "cpu": platform.processor(),
            "step_ns_per_cell_update": [round(v, 1) for v in ns[solver]],
            "best_ns": round(min(ns[solver]), 1),
            "ratio_to_first": round(min(ns[solver]) / min(ns[solvers[0]]), 3)}))


if __name__ == "__main__":
    main()
