"""Cost of building the ghost-fill and time-sync plans (done at every regrid).

Random 2:1-balanced forests on one tree (uniform level ``base`` with 30 % of the leaves
refined once, then balanced), mx = my = 16, mbc = 2; one JSON record per forest.

    python benchmarks/ghost_plan.py
"""

from __future__ import annotations

import json
import platform
import time

import numpy as np

from forestpy.forest import Brick, Forest
from forestpy.patches import PatchGeometry, build_ghost_plan, build_time_sync_plan


def main() -> None:
    rng = np.random.default_rng(0)
    for base in (5, 6, 7):
        forest = Forest.new(Brick(), base)
        forest = forest.refine(rng.random(len(forest)) < 0.3).balance()
        t0 = time.perf_counter()
        geom = PatchGeometry.from_forest(forest, 16, 16, 2)
        plan = build_ghost_plan(forest, geom)
        t1 = time.perf_counter()
        build_time_sync_plan(forest, geom)
        t2 = time.perf_counter()
        print(json.dumps({
            "benchmark": "ghost_plan", "patches": len(forest), "mx": 16, "mbc": 2,
            "ghost_plan_s": round(t1 - t0, 4), "time_sync_plan_s": round(t2 - t1, 4),
            "us_per_patch": round(1e6 * (t1 - t0) / len(forest), 1),
            "entries": plan.counts, "machine": platform.machine(),
            "date": time.strftime("%Y-%m-%d"),
        }))


if __name__ == "__main__":
    main()
