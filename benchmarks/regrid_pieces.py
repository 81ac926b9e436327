"""The host pieces of a regrid, one at a time, on forests saved by a run; one JSON record.

``python benchmarks/regrid.py --save-forests F.npz`` saves the old forest and the flags
of every regrid of its run; this script times, on those (CPU time, the best of
``--repeat``): the forest phase (``Forest.adapt``, or on a tree that has none the
separate operations and point locations the regrid used before), the ghost-fill and
time-sync plan builds and the patch geometry of the last forest at ``--mx 4`` and
``16``.  It runs on any tree (``PYTHONPATH=<tree>``), so the same forests give the
before and after of each piece:

    NUMBA_NUM_THREADS=1 python benchmarks/regrid_pieces.py F.npz [--label after]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def best(fn, repeat):
    fn()
    b = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        b = min(b, time.process_time() - t0)
    return round(1e3 * b, 3)


def separate(old, refine, coarsen):
    """The regrid's forest operations before Forest.adapt."""
    f = old.refine(refine)
    gx, gy = f.global_xy()
    src = old.locate_global(gx, gy)
    f = f.coarsen(coarsen[src] & (old.level[src] == f.level)).balance()
    return f, old.locate_global(*f.global_xy())


def main(argv=None):
    from forestpy.forest import Brick, Forest
    from forestpy.patches import build_ghost_plan, build_time_sync_plan
    from forestpy.patches.geometry import PatchGeometry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("forests")
    ap.add_argument("--label", default="")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    d = np.load(args.forests)
    b = d["brick"]
    conn = Brick(int(b[0]), int(b[1]), bool(b[2]), bool(b[3]), tuple(d["lower"]),
                 tuple(d["upper"]))
    rec = {"part": "pieces", "label": args.label, "forest_ms": []}
    for i in range(int(d["n"])):
        old = Forest(conn, d[f"tree{i}"], d[f"level{i}"], d[f"x{i}"], d[f"y{i}"])
        refine, coarsen = d[f"refine{i}"], d[f"coarsen{i}"]

        def forest(old=old, refine=refine, coarsen=coarsen):
            old._cache.clear()
            old._cache["balanced"] = True  # it came from a balance
            if hasattr(old, "adapt"):
                return old.adapt(refine, coarsen)
            return separate(old, refine, coarsen)

        rec["forest_ms"].append(best(forest, args.repeat))
    last = int(d["n"]) - 1
    f = Forest(conn, d[f"tree{last}"], d[f"level{last}"], d[f"x{last}"], d[f"y{last}"])
    rec["patches"] = f.n
    for mx in (4, 16):
        g = PatchGeometry.from_forest(f, mx, mx, 2)

        def sync(g=g):
            f._cache.pop("face", None)  # a new forest has no neighbour table yet
            build_time_sync_plan(f, g)

        rec[f"mx{mx}"] = {
            "ghost_plan_ms": best(lambda g=g: build_ghost_plan(f, g), args.repeat),
            "time_sync_ms": best(sync, args.repeat),
            "geometry_ms": best(lambda g=g, mx=mx: (PatchGeometry.from_forest(f, mx, mx, 2),
                                                    [g.on_side(s) for s in range(4)]),
                                args.repeat),
        }
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
