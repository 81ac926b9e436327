"""Cost of building the ghost-fill and time-sync plans (done at every regrid).

Random 2:1-balanced forests on one tree (uniform level ``base`` with 30 % of the leaves
refined once, then balanced), mx = my = 16, mbc = 2; one JSON record per forest (the
median of 3 builds, geometry included), after one record of the first call (Numba's
cache load).

    python benchmarks/ghost_plan.py [--reference]
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

import numpy as np

from forestpy.forest import Brick, Forest
from forestpy.patches import PatchGeometry, build_ghost_plan, build_time_sync_plan


def reference(forest, base) -> dict:
    """With ``--reference``: the NumPy builder the compiled one replaced
    (``tests/core/patches/ghost_plan_reference.py``), once, on forests up to ``base`` 7."""
    if "--reference" not in sys.argv or base > 7:
        return {}
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from ghost_plan_reference import build_ghost_plan_reference

    geom = PatchGeometry.from_forest(forest, 16, 16, 2)
    t0 = time.perf_counter()
    build_ghost_plan_reference(forest, geom)
    return {"numpy_reference_s": round(time.perf_counter() - t0, 4)}


def main() -> None:
    rng = np.random.default_rng(0)
    # the builder's compiled passes: loaded from Numba's cache (compiled on a first run)
    t0 = time.perf_counter()
    small = Forest.new(Brick(), 1)
    build_ghost_plan(small, PatchGeometry.from_forest(small, 16, 16, 2))
    first = round(time.perf_counter() - t0, 4)
    print(json.dumps({"benchmark": "ghost_plan", "first_call_s": first}))
    for base in (5, 6, 7, 8):
        forest = Forest.new(Brick(), base)
        forest = forest.refine(rng.random(len(forest)) < 0.3).balance()
        t_plan, t_sync = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            geom = PatchGeometry.from_forest(forest, 16, 16, 2)
            plan = build_ghost_plan(forest, geom)
            t1 = time.perf_counter()
            build_time_sync_plan(forest, geom)
            t_plan.append(t1 - t0)
            t_sync.append(time.perf_counter() - t1)
        t_plan, t_sync = float(np.median(t_plan)), float(np.median(t_sync))
        print(json.dumps({
            "benchmark": "ghost_plan", "patches": len(forest), "mx": 16, "mbc": 2,
            "ghost_plan_s": round(t_plan, 4), "time_sync_plan_s": round(t_sync, 4),
            "us_per_patch": round(1e6 * t_plan / len(forest), 1), "of": "median of 3",
            "entries": plan.counts, **reference(forest, base), "machine": platform.machine(),
            "date": time.strftime("%Y-%m-%d"),
        }))


if __name__ == "__main__":
    main()
