"""Every demo of the Clawpack solver on the CPU and on the GPU backend, compared.

For each demo (at its default size unless ``--small``), with local time stepping on and
off (the same setting on both backends): forests (identical or not), steps, level
steps, regrids, the final interior states (max |difference| relative to max |q|),
conserved totals, and the gauge series and fgmax maxima of its callbacks; then the
radial dam break with float32 storage on the GPU against float64 (max and L1
difference of the depth, and each one's L1 depth error along y = 0 against the radial
reference solution).  One JSON record each.  ``--geoclaw`` compares the GeoClaw demos
(``demos/geoclaw``) instead of the Clawpack ones.

    python benchmarks/gpu_parity.py [--small]
    python benchmarks/gpu_parity.py --geoclaw [--demo okushiri] [--subcycle on,off]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEMOS = ("radial_dam", "advection_swirl", "euler_quadrants")
GEOCLAW_DEMOS = ("bowl_radial", "thacker_planar", "dam_break_dem", "okushiri", "merewether",
                 "urban_dam_break")
SMALL = dict(mx=8, min_level=2, max_level=3)


def load(name):
    path = ROOT / "demos" / f"{name}.py"
    if not path.exists():
        path = ROOT / "demos" / "geoclaw" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interior(sim):
    b = sim.mbc
    return sim.backend.to_host(sim.q)[:, :, b:-b, b:-b].astype(np.float64)


def timed_run(demo, **kw):
    sim = demo.setup(**kw)
    t0 = time.perf_counter()
    sim.run()
    sim.backend.synchronize()
    return sim, time.perf_counter() - t0


def _callback_arrays(sim) -> dict:
    """The gauge series and fgmax maxima of a simulation's callbacks, by name."""
    out = {}
    for k, cb in enumerate(sim.callbacks):
        if hasattr(cb, "data") and hasattr(cb, "ids"):  # Gauges
            for gid, d in cb.data().items():
                for field, v in d.items():
                    out[f"gauges{k}.{gid}.{field}"] = np.asarray(v, dtype=np.float64)
        elif hasattr(cb, "results"):  # FGMax
            for field, v in cb.results().items():
                out[f"fgmax{k}.{field}"] = np.asarray(v, dtype=np.float64)
    return out


def _rel_diff(a, b) -> float:
    """max |a - b| / max |a| over the entries finite in both (NaN where one is)."""
    if a.shape != b.shape:
        return float("inf")
    both = np.isfinite(a) & np.isfinite(b)
    if (np.isfinite(a) != np.isfinite(b)).any():
        return float("inf")
    if not both.any():
        return 0.0
    scale = max(float(np.abs(a[both]).max()), 1e-300)
    return float(np.abs(a[both] - b[both]).max() / scale)


def parity(name, subcycle: bool, small: bool = False):
    """One demo (its defaults, or :data:`SMALL` for a Clawpack demo with ``small``) on
    both backends with the same ``subcycle`` (the CPU's default is on, the GPU's off)."""
    demo = load(name)
    kw = dict(SMALL) if small and name in DEMOS else {}
    cpu, t_cpu = timed_run(demo, **kw, backend="cpu", subcycle=subcycle)
    gpu, t_gpu = timed_run(demo, **kw, backend="gpu", subcycle=subcycle)
    same_forest = gpu.forest == cpu.forest
    rec = {
        "part": "geoclaw_parity" if name in GEOCLAW_DEMOS else "parity", "demo": name,
        "options": kw, "subcycle": subcycle,
        "steps": [cpu.steps, gpu.steps], "regrids": [cpu.regrids, gpu.regrids],
        "level_steps": [cpu.level_steps, gpu.level_steps],
        "patches": [int(cpu.geom.npatch), int(gpu.geom.npatch)],
        "same_forest": bool(same_forest),
        "wall_s": [round(t_cpu, 3), round(t_gpu, 3)],
        "totals_rel_diff": {k: abs(gpu.totals()[k] - v) / max(abs(v), 1e-300)
                            for k, v in cpu.totals().items()},
    }
    if same_forest:
        rec["max_rel_diff"] = _rel_diff(interior(cpu), interior(gpu))
    a, b = _callback_arrays(cpu), _callback_arrays(gpu)
    diffs = {k: _rel_diff(a[k], b[k]) for k in a if k in b}
    rec["callbacks_max_rel_diff"] = max(diffs.values(), default=0.0)
    rec["callbacks_worst"] = max(diffs, key=diffs.get) if diffs else None
    print(json.dumps(rec), flush=True)
    return rec


def float32_accuracy(small):
    from forestpy.extensions.reference import solve_radial_dam

    from benchmarks.radial_dam import depth_error_along_axis

    demo = load("radial_dam")
    kw = dict(SMALL) if small else {}
    f64, t64 = timed_run(demo, **kw, backend="gpu")
    f32, t32 = timed_run(demo, **kw, backend="gpu", dtype="float32")
    ref = solve_radial_dam(ncells=20000, t_final=f64.t)
    rec = {"part": "float32", "demo": "radial_dam", "options": kw,
           "steps": [f64.steps, f32.steps], "wall_s": [round(t64, 3), round(t32, 3)],
           "l1_depth_error_y0": [depth_error_along_axis(f64, ref),
                                 depth_error_along_axis(f32, ref)],
           "mass_rel_change": [
               abs(s.totals()["h"] / s.totals_initial["h"] - 1.0) for s in (f64, f32)]}
    if f64.forest == f32.forest:
        a, b = interior(f64)[:, 0], interior(f32)[:, 0]
        rec["depth_max_abs_diff"] = float(np.abs(a - b).max())
        rec["depth_mean_abs_diff"] = float(np.abs(a - b).mean())
    else:
        rec["same_forest"] = False
    print(json.dumps(rec), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--demo", action="append", choices=DEMOS + GEOCLAW_DEMOS)
    ap.add_argument("--geoclaw", action="store_true", help="the GeoClaw demos")
    ap.add_argument("--subcycle", default="on,off", help="on, off or both (on,off)")
    ap.add_argument("--no-float32", action="store_true", help="skip the float32 record")
    args = ap.parse_args(argv)
    names = args.demo or (GEOCLAW_DEMOS if args.geoclaw else DEMOS)
    for name in names:
        for sub in args.subcycle.split(","):
            parity(name, sub == "on", args.small)
    if not args.geoclaw and not args.no_float32:
        float32_accuracy(args.small)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    main()
