"""The cost of one regrid, phase by phase, on the adaptive radial dam; one JSON record each.

Issue 29's case: the radial dam break (``demos/radial_dam.py``) with levels
``min..max`` (default 7-9, about 18-20 K patches), one time step for all levels (the
GPU default; ``--subcycle`` for local time stepping) and a regrid every 2 steps.  The
host cost of a regrid scales with the number of patches, not of cells: on a small
machine ``--mx 4`` gives the same forest sizes as the GPU runs' ``--mx 16`` at a
sixteenth of the cells.

After a warm-up (the kernels compiled, every transfer kind run once) the timers are
synchronised with the device (``Timers(sync=...)``) and each regrid of ``--nsteps``
steps gives one ``regrid`` record: patches before and after, whether the forest
changed, and the milliseconds of every phase:

* ``tagging`` (of it ``criterion``: the regrid criterion's pass over the cells),
  ``forest`` (refine, coarsen, 2:1 balance and the map from new to old leaves),
  ``transfer`` (geometry and index arrays; of it ``transfer_cells``: the copy,
  interpolate and average kernels), ``plans`` (ghost-fill and time-sync plans),
  ``aux`` (``setaux`` of the new patches), ``rest`` (the regrid's Python around
  them), ``ghost_fill`` (the fill before the transfer, a step's phase, not counted in
  ``total``);
* ``total``: the regrid phase (exclusive of the ghost fill); ``host``: ``total`` less
  the kernels over patch data (``criterion``, ``transfer_cells``, ``aux``).

A last ``summary`` record gives the means over the regrids that changed the forest
and over those that did not.  ``--check`` rebuilds, at every regrid, the forest with
:meth:`~forestpy.forest.Forest.refine`, ``coarsen`` and ``balance`` and the plans
with the vectorised builders, and compares (``check`` in each record: ``true`` when
identical; it is left out of the timings).  ``--compare-cpu`` (with ``--backend
gpu``) runs the same steps on the CPU backend and prints the largest difference of
the final states and whether every forest was the same.  ``--forest separate`` makes
the forests as the regrid did before :meth:`~forestpy.forest.Forest.adapt` (the same
forests; the cost of the old forest phase on the same machine in the same way).

Usage::

    python benchmarks/regrid.py [--backend cpu|gpu] [--levels 7,9] [--mx 4]
        [--nsteps 20] [--forest adapt|separate] [--check] [--compare-cpu]
        [--save-forests FILE.npz] [--profile N]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("tagging", "criterion", "forest", "transfer", "transfer_cells", "plans", "aux",
          "shoreline")


def emit(rec):
    print(json.dumps(rec), flush=True)


def radial_dam():
    spec = importlib.util.spec_from_file_location("radial_dam", ROOT / "demos" / "radial_dam.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def make_sim(backend, levels, mx, subcycle):
    return radial_dam().setup(mx=mx, min_level=levels[0], max_level=levels[1],
                              backend=backend, subcycle=subcycle, regrid_interval=2,
                              t_final=1e9)


def reference_forest(old, refine, coarsen, max_level=None):
    """The regrid's forest as the separate operations make it (refine; coarsen the
    leaves left as they were, found by point location; balance from every leaf) and
    the new leaves' old leaves by point location: what ``Simulation.regrid`` did before
    ``Forest.adapt``."""
    forest = old.refine(refine, max_level)
    gx, gy = forest.global_xy()
    src = old.locate_global(gx, gy)
    forest = forest.coarsen(coarsen[src] & (old.level[src] == forest.level))
    forest._cache.pop("balanced", None)
    forest = forest.balance()
    return forest, old.locate_global(*forest.global_xy())


def check_regrid(sim, old_forest, flags, new_forest):
    """The forest of the separate operations, the ghost plan of the NumPy reference
    builder (``tests/core/patches/ghost_plan_reference.py``) and the vectorised
    time-sync plan (``time_sync_reference.py``) against what the regrid made (compared
    on the host)."""
    from forestpy.patches.geometry import PatchGeometry
    from forestpy.patches.ghost_plan import GhostPlan
    from forestpy.patches.time_sync import TimeSyncPlan

    sys.path.insert(0, str(ROOT / "tests" / "core" / "patches"))
    from ghost_plan_reference import build_ghost_plan_reference
    from time_sync_reference import build_time_sync_plan_reference

    refine, coarsen = flags
    ref, _ = reference_forest(old_forest, refine, coarsen)
    if not (ref == new_forest):
        return False
    be = sim.backend
    geom = PatchGeometry.from_forest(new_forest, sim.mx, sim.my, sim.mbc)
    plan = sim.layout.ghost_plan
    want = build_ghost_plan_reference(new_forest, geom)
    for name in ("avg_src", "interp_nbr"):  # the reference's 4 cells as one block
        cells = getattr(want, name)
        step = cells[..., 3, 1] - cells[..., 0, 1]
        setattr(want, name, np.concatenate([cells[..., 0, :], step[..., None]], axis=-1))
    for name in GhostPlan.__dataclass_fields__:
        a = be.to_host(getattr(plan, name))
        if not np.array_equal(a, getattr(want, name).astype(a.dtype)):
            return False
    sync = sim.layout.sync_plan
    want = build_time_sync_plan_reference(new_forest, geom)
    for name in TimeSyncPlan.__dataclass_fields__:
        a, b = getattr(sync, name), getattr(want, name)
        if name == "nx":
            if int(a) != int(b):
                return False
        elif not np.array_equal(be.to_host(a), b):
            return False
    return True


def instrument(sim, records, check, saved):
    """Wrap ``sim.regrid``: one record per call (timer differences); ``saved`` gets the
    old forest and the flags of every regrid that fetched flags."""
    orig = sim.regrid
    seen = {}

    def flags_hook(*a, **k):
        f = orig_flags(*a, **k)
        seen["flags"] = None if f is None else (f[0].copy(), f[1].copy())
        return f

    orig_flags = sim._regrid_flags
    sim._regrid_flags = flags_hook

    def regrid(*a, **k):
        t = sim.timers.seconds
        before = dict(t)
        n0, old = sim.geom.npatch, sim.forest
        seen.clear()
        changed = orig(*a, **k)
        d = {k: 1e3 * (t.get(k, 0.0) - before.get(k, 0.0)) for k in t}
        ms = {p: d.get("regrid." + p, 0.0) for p in PHASES}
        ms["total"] = d.get("regrid", 0.0)
        ms["rest"] = ms["total"] - sum(ms[p] for p in PHASES
                                       if p not in ("criterion", "transfer_cells"))
        ms["host"] = ms["total"] - ms["criterion"] - ms["transfer_cells"] - ms["aux"]
        ms["ghost_fill"] = d.get("ghost_fill", 0.0)
        rec = {"part": "regrid", "patches_before": n0, "patches": sim.geom.npatch,
               "changed": bool(changed), "ms": {k: round(v, 3) for k, v in ms.items()}}
        if check and seen.get("flags") is not None:
            rec["check"] = check_regrid(sim, old, seen["flags"], sim.forest) if changed \
                else True
        if seen.get("flags") is not None:
            saved.append((old, *seen["flags"]))
        records.append(rec)
        return changed

    sim.regrid = regrid


def run(args):
    from forestpy.jit import CompileWatch
    from forestpy.timers import Timers

    levels = tuple(int(v) for v in args.levels.split(","))
    if args.forest == "separate":  # the forest operations as before Forest.adapt
        from forestpy.forest import Forest

        Forest.adapt = reference_forest
    t0 = time.perf_counter()
    sim = make_sim(args.backend, levels, args.mx, args.subcycle)
    setup_s = time.perf_counter() - t0
    be = sim.backend
    info = {"backend": args.backend, "levels": list(levels), "mx": args.mx,
            "forest": args.forest,
            "subcycle": sim.subcycling, "setup_s": round(setup_s, 2),
            "patches": int(sim.geom.npatch)}
    # warm-up: compile the steps, the tagging and a regrid's kernels (every transfer
    # kind: refine and coarsen both happen in the first regrids of this run)
    t0 = time.perf_counter()
    sim.run(max_steps=args.warmup)
    be.synchronize()
    info["warmup_s"] = round(time.perf_counter() - t0, 2)
    info["warmup_regrids"] = sim.regrids
    if args.gc == "freeze":  # what exists now is never traversed by a collection again
        gc.collect()
        gc.freeze()
    elif args.gc == "off":
        gc.disable()
    info["gc"] = args.gc
    info["gc_collections"] = [g["collections"] for g in gc.get_stats()]
    records, saved = [], []
    sim.timers = Timers(sync=be.synchronize)
    instrument(sim, records, args.check, saved)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    with CompileWatch(timers=sim.timers) as watch:
        steps0 = sim.steps
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        sim.run(max_steps=args.nsteps)
        be.synchronize()
        wall = time.perf_counter() - t0
        if profiler is not None:
            profiler.disable()
    for i, rec in enumerate(records):
        emit({**rec, "index": i, "backend": args.backend, "mx": args.mx})
    changed = [r for r in records if r["changed"]]
    unchanged = [r for r in records if not r["changed"]]

    def mean(recs):
        if not recs:
            return None
        keys = recs[0]["ms"].keys()
        return {k: round(float(np.mean([r["ms"][k] for r in recs])), 3) for k in keys}

    info["gc_collections"] = [g["collections"] - c for g, c in
                              zip(gc.get_stats(), info["gc_collections"])]
    summary = {
        "part": "summary", **info, "steps": sim.steps - steps0, "wall_s": round(wall, 3),
        "regrids": len(records), "changed": len(changed),
        "patches_final": int(sim.geom.npatch),
        "ms_changed": mean(changed), "ms_unchanged": mean(unchanged),
        "compile_s": round(watch.seconds, 3),
        "step_phases_s": {k: round(v, 4) for k, v in sim.timers.seconds.items()
                          if v and not k.startswith("regrid")},
    }
    if args.check:
        summary["check"] = all(r.get("check", True) for r in records)
    emit(summary)
    if args.save_forests:  # for benchmarks/regrid_pieces.py
        arrays = {}
        for i, (f, refine, coarsen) in enumerate(saved):
            for name, a in (("tree", f.tree), ("level", f.level), ("x", f.x), ("y", f.y),
                            ("refine", refine), ("coarsen", coarsen)):
                arrays[f"{name}{i}"] = a
        c = sim.forest.conn
        np.savez_compressed(args.save_forests, n=len(saved), mx=args.mx,
                            brick=np.array([c.nx, c.ny, c.periodic_x, c.periodic_y]),
                            lower=np.array(c.lower), upper=np.array(c.upper), **arrays)
    if profiler is not None:
        import pstats

        pstats.Stats(profiler, stream=sys.stderr).sort_stats(args.profile_sort).print_stats(
            args.profile)
    return sim


def compare_cpu(args, gpu_sim):
    """The same run on the CPU backend: forests and the final state."""
    from forestpy.timers import Timers

    levels = tuple(int(v) for v in args.levels.split(","))
    sim = make_sim("cpu", levels, args.mx, args.subcycle)
    sim.run(max_steps=args.warmup)
    sim.timers = Timers()
    sim.run(max_steps=args.nsteps)
    be = gpu_sim.backend
    q_gpu, q_cpu = be.to_host(gpu_sim.q), np.asarray(sim.q)
    same = gpu_sim.forest == sim.forest and gpu_sim.steps == sim.steps
    b = sim.mbc
    diff = float(np.abs(q_gpu[..., b:-b, b:-b] - q_cpu[..., b:-b, b:-b]).max()) if same \
        else None
    emit({"part": "compare_cpu", "same_forest": bool(same), "steps": [sim.steps,
          gpu_sim.steps], "regrids": [sim.regrids, gpu_sim.regrids],
          "max_abs_difference": diff})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--levels", default="7,9", help="min,max level")
    ap.add_argument("--mx", type=int, default=4, help="cells per patch side")
    ap.add_argument("--nsteps", type=int, default=20, help="measured steps")
    ap.add_argument("--warmup", type=int, default=6, help="steps before measuring")
    ap.add_argument("--subcycle", action="store_true", help="local time stepping")
    ap.add_argument("--forest", default="adapt", choices=("adapt", "separate"),
                    help="separate: refine, coarsen, balance from every leaf and point "
                         "location, as before Forest.adapt (same forests)")
    ap.add_argument("--check", action="store_true",
                    help="compare every regrid with the reference operations")
    ap.add_argument("--compare-cpu", action="store_true",
                    help="GPU: rerun on the CPU backend and compare")
    ap.add_argument("--save-forests", default="",
                    help="write each regrid's old forest and flags (.npz) for "
                         "benchmarks/regrid_pieces.py")
    ap.add_argument("--profile", type=int, default=0,
                    help="cProfile the measured steps, print N lines to stderr")
    ap.add_argument("--profile-sort", default="cumulative", choices=("cumulative", "tottime"))
    ap.add_argument("--gc", default="default", choices=("default", "freeze", "off"),
                    help="Python's cycle collector during the measured steps")
    args = ap.parse_args(argv)
    emit({"part": "info", "argv": sys.argv, "date": time.strftime("%Y-%m-%d %H:%M"),
          "host": platform.node(), "host_cpus": os.cpu_count(),
          "numba_threads": int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count()))})
    sim = run(args)
    if args.compare_cpu and args.backend == "gpu":
        compare_cpu(args, sim)


if __name__ == "__main__":
    main()
