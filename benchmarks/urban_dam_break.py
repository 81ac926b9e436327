"""Dam break through an idealised city: GeoClaw-like AMR vs HWFV1 vs uniform FV1.

    python benchmarks/urban_dam_break.py                    # CPU, every run below
    python benchmarks/urban_dam_break.py --backend gpu      # the same on the GPU
    python benchmarks/urban_dam_break.py --runs hwfv1 fv1_channel --t-final 6

Runs (``--runs``; the case is ``demos/geoclaw/urban_dam_break.py`` and
``demos/hwfv1/urban_dam_break.py``, same geometry, DEM and initial state):

* ``geoclaw``: the GeoClaw-like solver, adaptive (``--levels``, default 0-3: finest
  0.02 m), speed flags with a patch buffer, barrier and city at the finest level;
* ``geoclaw_uniform``: the same on the uniform finest grid (not in the default list);
* ``hwfv1``: HWFV1 at ``--L`` (11: 0.02 m) for every ``--eps`` (1e-3 and 1e-4);
* ``fv1_channel``: the uniform FV1 of HWFV1 (same flux code, ``eps=None``) on the
  channel's cells alone (1800 x 180 at L = 11: the DEM grid, as the paper's GPU-FV1 in
  LISFLOOD-FP 8.0 runs it);
* ``fv1_square``: the same scheme on HWFV1's whole padded 2^L square (4^L cells per
  step, 13x the channel at L = 11; HWFV1's own ``eps=None``).

One JSON line per run (solver, eps, backend, device, wall seconds to the profile time
and to the end, steps, cell updates, leaves or patches at the profile time, volume
change, RMS difference to the measured profiles, front position; the GeoClaw-like runs
also their regrids and the Simulation's timers per phase), then one summary
line with the speed-ups of HWFV1 over the uniform runs (the seed's GPU-HWFV1 / GPU-FV1
ratio: ~2.4x for both eps) and the largest profile differences between the runs and the
reference run (``--reference``, default the finest uniform run present).  Writes
``profiles.npz`` (per run ``<name>_x``, ``_depth``, ``_speed``; the measurements) and
``urban_dam_break_profiles.png`` into ``--out``.  Compilation is excluded: a short
warm-up of every solver kind runs first (``--no-warmup`` skips it).  With
``--backend gpu`` every run is on the GPU (GeoClaw-like: ``backend="gpu"`` of the
Simulation, patches resident on the device; HWFV1 and FV1: Numba-CUDA with CUDA graphs
when CuPy is present).  On the CPU set ``NUMBA_NUM_THREADS`` to the cores to use.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, rel: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / rel)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# the HWFV1 demo loads the GeoClaw-like one under this name: one copy of the geometry
geo = _load("_urban_dam_break_geometry", "demos/geoclaw/urban_dam_break.py")
hw = _load("_urban_dam_break_hwfv1", "demos/hwfv1/urban_dam_break.py")

RUNS = ("geoclaw", "geoclaw_uniform", "hwfv1", "fv1_channel", "fv1_square")
DEFAULT_RUNS = ("geoclaw", "hwfv1", "fv1_channel", "fv1_square")


def device_name(backend: str) -> str:
    if backend != "gpu":
        return platform.processor() or platform.machine()
    from numba import cuda

    try:
        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - CUDA simulator or no device
        return "cuda simulator" if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else "?"


def run_geoclaw(args, uniform: bool, backend: str):
    lo, hi = args.levels
    sim = geo.setup(min_level=lo, max_level=hi, adaptive=not uniform, t_final=args.t_final,
                    profile_time=args.profile_time, backend=backend)
    sim.run()
    out = Path(args.out) / ("geoclaw_uniform" if uniform else "geoclaw")
    rep = geo.report(sim, out, plot=False)
    prof = rep["profile"]
    rec = sim.urban["profile"].result
    record = dict(
        solver="geoclaw_uniform" if uniform else "geoclaw", eps=None, levels=[hi, hi]
        if uniform else [lo, hi], dx_finest=geo.DX, wall_s=rep["wall_s"],
        wall_s_to_profile=prof["wall_s"], steps=rep["steps"], steps_to_profile=prof["steps"],
        cell_updates=rep["cell_updates"], cell_updates_to_profile=prof["cell_updates"],
        patches_at_profile=prof["patches"], cells_at_profile=prof["cells"],
        patches_per_level_at_profile=prof["patches_per_level"],
        volume_change_relative=rep["volume_change_relative"],
        front_x_centreline=rep["front_x_centreline"],
        rms_depth=prof["vs_measured"]["depth"]["rms"],
        rms_velocity=prof["vs_measured"]["velocity"]["rms"], regrids=rep["regrids"],
        timers={k: round(v, 3) for k, v in sim.timers.as_dict(sim.wall_s).items()})
    label = (f"GeoClaw-like uniform {geo.DX:g} m" if uniform
             else f"GeoClaw-like AMR levels {lo}-{hi}")
    return record, dict(label=label, x=rec["x"], depth=rec["depth"], speed=rec["speed"])


def run_hwfv1(args, eps, grid: str, backend: str):
    res, prof = hw.simulate(L=args.L, eps=eps, t_final=args.t_final,
                            profile_time=args.profile_time, backend=backend,
                            uniform_grid=grid)
    p = res["profile"]
    record = dict(
        solver=res["solver"], eps=eps, L=args.L, dx=res["dx"], cells=res["cells"],
        wall_s=res["wall_s"], wall_s_to_profile=p["wall_s"], steps=res["steps"],
        steps_to_profile=p["steps"], cell_updates=res["cell_updates"],
        cell_updates_to_profile=p["cell_updates"], leaves_at_profile=p["leaves"],
        mean_leaves=res["mean_leaves"], sparse_steps=res["sparse_steps"],
        full_steps=res["full_steps"], volume_change_relative=res["volume_change_relative"],
        front_x_centreline=res["front_x_centreline"],
        rms_depth=p["vs_measured"]["depth"]["rms"],
        rms_velocity=p["vs_measured"]["velocity"]["rms"])
    return record, dict(label=hw.label(res), **prof)


def warm_up(runs, backend: str) -> None:
    """Compile every kernel the timed runs use (short, coarse runs of the same code)."""
    if any(r.startswith("geoclaw") for r in runs):
        geo.setup(min_level=0, max_level=1, t_final=0.02, profile_time=0.01,
                  backend=backend).run()
    if "hwfv1" in runs:
        hw.simulate(L=6, eps=1e-3, t_final=0.05, profile_time=0.02, backend=backend)
    if "fv1_square" in runs or "fv1_channel" in runs:
        hw.simulate(L=6, eps=None, t_final=0.05, profile_time=0.02, backend=backend)
    if "fv1_channel" in runs:
        hw.simulate(L=9, eps=None, t_final=0.02, profile_time=0.01, backend=backend,
                    uniform_grid="channel")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu", choices=("cpu", "gpu"))
    ap.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS), choices=RUNS)
    ap.add_argument("--eps", nargs="+", type=float, default=[1e-3, 1e-4])
    ap.add_argument("--L", type=int, default=11, help="HWFV1 finest level (11: 0.02 m)")
    ap.add_argument("--levels", nargs=2, type=int, default=[0, 3], metavar=("MIN", "MAX"),
                    help="GeoClaw-like levels (MAX = 3: 0.02 m with mx = 16)")
    ap.add_argument("--t-final", type=float, default=10.0)
    ap.add_argument("--profile-time", type=float, default=geo.PROFILE_T)
    ap.add_argument("--reference", default=None,
                    help="run name the others' profiles are compared with (default: "
                         "fv1_channel, else fv1_square, else geoclaw_uniform)")
    ap.add_argument("--out", default="out/urban_dam_break_bench")
    ap.add_argument("--no-warmup", action="store_true")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(bench="urban_dam_break", backend=a.backend, device=device_name(a.backend),
               machine=platform.node(), cpu_count=os.cpu_count(),
               numba_threads=numba.get_num_threads(), t_final=a.t_final,
               profile_time=a.profile_time)
    if not a.no_warmup:
        t0 = time.perf_counter()
        warm_up(a.runs, a.backend)
        print(json.dumps(dict(env, warmup_s=round(time.perf_counter() - t0, 2))), flush=True)
    records, profiles = {}, {}
    plan = []
    for r in a.runs:
        if r == "hwfv1":
            plan += [(f"hwfv1_eps{e:g}", lambda e=e: run_hwfv1(a, e, "square", a.backend))
                     for e in a.eps]
        elif r in ("fv1_channel", "fv1_square"):
            plan.append((r, lambda r=r: run_hwfv1(a, None, r[4:], a.backend)))
        else:
            plan.append((r, lambda r=r: run_geoclaw(a, r == "geoclaw_uniform", a.backend)))
    for name, fn in plan:
        rec, prof = fn()
        records[name], profiles[name] = rec, prof
        print(json.dumps(dict(env, run=name, **rec), default=float), flush=True)
    summary = dict(env, summary=True)
    for name, rec in records.items():
        if not name.startswith("hwfv1"):
            continue
        for base in ("fv1_channel", "fv1_square"):
            if base in records:
                b = records[base]
                summary[f"{name}_speedup_vs_{base}"] = round(b["wall_s"] / rec["wall_s"], 3)
                summary[f"{name}_speedup_vs_{base}_to_profile"] = round(
                    b["wall_s_to_profile"] / rec["wall_s_to_profile"], 3)
    if "geoclaw" in records and "geoclaw_uniform" in records:
        summary["geoclaw_speedup_vs_uniform"] = round(
            records["geoclaw_uniform"]["wall_s"] / records["geoclaw"]["wall_s"], 3)
    ref = a.reference or next((r for r in ("fv1_channel", "fv1_square", "geoclaw_uniform")
                               if r in profiles), None)
    if ref is not None and ref in profiles:
        summary["reference"] = ref
        rp = profiles[ref]
        for name, p in profiles.items():
            if name == ref or len(p["x"]) != len(rp["x"]) or not np.allclose(p["x"], rp["x"]):
                continue
            summary[f"{name}_max_depth_diff_vs_{ref}"] = float(np.nanmax(
                np.abs(p["depth"] - rp["depth"])))
            summary[f"{name}_mean_depth_diff_vs_{ref}"] = float(np.nanmean(
                np.abs(p["depth"] - rp["depth"])))
            summary[f"{name}_mean_speed_diff_vs_{ref}"] = float(np.nanmean(
                np.abs(p["speed"] - rp["speed"])))
    measured = geo.measured_profiles()
    arrays = {"measured_depth_x": measured["depth"][0], "measured_depth": measured["depth"][1],
              "measured_velocity_x": measured["velocity"][0],
              "measured_velocity": measured["velocity"][1]}
    for name, p in profiles.items():
        for key in ("x", "depth", "speed"):
            arrays[f"{name}_{key}"] = p[key]
    np.savez(out / "profiles.npz", **arrays)
    title = (f"Idealised city dam break, t = {a.profile_time:g} s, y = {geo.PROFILE_Y} m "
             f"({a.backend}: {env['device']})")
    png = geo.plot_profiles(out / "urban_dam_break_profiles.png", list(profiles.values()),
                            measured, t=a.profile_time, title=title)
    summary["files"] = [str(out / "profiles.npz")] + ([str(png)] if png else [])
    print(json.dumps(summary, default=float), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
