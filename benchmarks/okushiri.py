"""Okushiri (Monai valley) to 22.5 s: speed, uniform vs adaptive, gauge errors; JSON lines.

Runs ``demos/geoclaw/okushiri.py`` as it is (gauges and the runup fgmax included),
each case in a fresh process so that ``NUMBA_NUM_THREADS`` takes effect:

* ``uniform``  -- the finest grid everywhere (``adaptive=false``);
* ``adaptive`` -- the demo's default AMR (flags + regions), same finest level;

after a warm-up run that compiles the kernels (a 0.112 m grid for 0.2 s).  Reported:
wall time of the run, cell updates per second (cell updates / wall time of the run),
steps, regrids, patches per level, timers, and per gauge the RMS difference to the
measurement over 10-22.5 s and the errors in peak height and time.  ``--series DIR``
keeps each run's ``gauges.csv`` (``DIR/<backend>_<case>/``) for CPU-vs-GPU comparisons
(:func:`compare_series`).

    python benchmarks/okushiri.py                                 # 1 thread and all cores
    python benchmarks/okushiri.py --threads 1 --case uniform --dx 0.028
    python benchmarks/okushiri.py --backend gpu --threads 1 --series out/series
    python benchmarks/okushiri.py --compare out/series/cpu_uniform out/series/gpu_uniform
    python benchmarks/okushiri.py --threads 1 --case adaptive --riemann-solver geoclaw_hr
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CASES = ("uniform", "adaptive")


def _demo():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "okushiri", ROOT / "demos" / "geoclaw" / "okushiri.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _device(backend: str) -> str:
    if backend != "gpu":
        return _cpu_model()
    try:
        from numba import cuda

        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - a description only
        return "gpu"


class _TimedStep:
    """``sim.vtable`` with each ``step`` call (the step kernel) between two CUDA events:
    the device seconds of the step kernels of a run (graphs off: an event recorded
    while a graph is captured does not time its replays)."""

    def __init__(self, vtable):
        self._vtable, self.events = vtable, []

    def __getattr__(self, name):
        return getattr(self._vtable, name)

    def step(self, *args, **kwargs):
        import cupy

        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        out = self._vtable.step(*args, **kwargs)
        end.record()
        self.events.append((start, end))
        return out

    def device_seconds(self) -> float:
        import cupy

        if not self.events:
            return 0.0
        self.events[-1][1].synchronize()
        return sum(cupy.cuda.get_elapsed_time(a, b) for a, b in self.events) / 1e3


def run_case(case: str, backend: str, dx: float, t_final: float, series: str | None,
             mx: int, max_level: int, riemann_solver: str = "geoclaw",
             subcycle: bool = True, step_events: bool = False,
             precision: str = "float64") -> dict:
    import numba

    from forestpy.cuda_device import kernel_launches

    demo = _demo()
    common = dict(backend=backend, mx=mx, max_level=max_level, riemann_solver=riemann_solver,
                  precision=precision)
    # compile the kernels (those of the subcycled steps too)
    demo.setup(dx_finest=0.112, t_final=0.2, subcycle=subcycle, **common).run()
    sim = demo.setup(dx_finest=dx, t_final=t_final, adaptive=(case == "adaptive"),
                     subcycle=subcycle, **common)
    if step_events:
        if backend != "gpu" or sim.gpu_graph:
            raise SystemExit("--step-events times GPU runs with FORESTPY_GPU_GRAPH=0")
        sim.vtable = _TimedStep(sim.vtable)
    load_before = round(os.getloadavg()[0], 2)
    launches0 = kernel_launches()
    t0 = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - t0
    launches = kernel_launches() - launches0
    events = {}
    if step_events:
        kernel_s = sim.vtable.device_seconds()
        events = {"step_kernel_device_s": round(kernel_s, 4),
                  "step_kernel_share_of_wall": round(kernel_s / wall, 4)}
    out = Path(series) / f"{backend}_{case}" if series else Path("/tmp") / f"okushiri_{os.getpid()}"
    rep = demo.report(sim, out, plot=False)
    gauges = {g: {k: round(v, 6) for k, v in e.items()
                  if k in ("rms", "peak_error", "peak_time_error", "rms_best_shift",
                           "best_time_shift")}
              for g, e in rep["gauges"].items()}
    return {
        "benchmark": "okushiri",
        "case": case,
        "riemann_solver": riemann_solver,
        "backend": backend,
        "precision": precision,
        "device": _device(backend),
        "dx_finest": dx,
        "mx": mx,
        "max_level": max_level,
        "subcycle": sim.subcycling,
        "t_final": sim.t,
        "threads": numba.config.NUMBA_NUM_THREADS,
        "cpus": os.cpu_count(),
        "load_avg_1min_before": load_before,
        "load_avg_1min_after": round(os.getloadavg()[0], 2),
        "steps": sim.steps,
        "level_steps": sim.level_steps,
        "regrids": sim.regrids,
        "patches_per_level": sim.patches_per_level(),
        "cell_updates": sim.cell_updates,
        "wall_s": round(wall, 3),
        "cell_updates_per_s": round(sim.cell_updates / wall),
        # device-to-host transfers (GPU: host synchronisations) of the whole run
        "host_transfers": sim.backend.host_transfers,
        "host_transfers_per_step": round(sim.backend.host_transfers / max(sim.steps, 1), 2),
        "timers": sim.timers.as_dict(),
        **sim.graph_summary(),
        # forestpy's kernel launches from the host (a graph's captured ones counted at
        # capture) and, with graphs, the graph launches: what the host launches per step
        # (CuPy's own array operations are not counted)
        "kernel_launches": launches,
        "host_launches_per_step": round(
            (launches + sim.graph_summary()["graph_replays"]) / max(sim.steps, 1), 2),
        **events,
        "interior_digest": sim.interior_digest(),
        "defer_callbacks": sim._defers_callbacks(),
        "gauge_digest": _gauge_digest(sim),
        "gauges": gauges,
        "runup": rep["runup"],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _gauge_digest(sim) -> list:
    """``[samples, sum of the samples]`` of the run's gauges: runs that should agree
    bit for bit compare these."""
    from forestpy.callbacks import Gauges

    g = next((cb for cb in sim.callbacks if isinstance(cb, Gauges)), None)
    if g is None:
        return []
    values = np.array(g._values, dtype=np.float64)
    return [len(g.times), float(values.sum())]


def compare_series(a, b) -> dict:
    """Largest absolute difference (m) per gauge between the model columns of two
    ``gauges.csv`` files (same times), e.g. a CPU and a GPU run."""
    def read(d):
        with open(Path(d) / "gauges.csv") as f:
            rows = list(csv.DictReader(f))
        return {k: [float(r[k]) for r in rows] for k in rows[0] if k.endswith("_model")}

    sa, sb = read(a), read(b)
    n = min(len(next(iter(sa.values()))), len(next(iter(sb.values()))))
    return {k[:-6]: max(abs(x - y) for x, y in zip(sa[k][:n], sb[k][:n])) for k in sa}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=CASES, action="append")
    p.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--threads", type=int, action="append",
                   help="NUMBA_NUM_THREADS values (default: 1 and all cores)")
    p.add_argument("--dx", type=float, default=0.014, help="finest cell size (m)")
    p.add_argument("--mx", type=int, default=16)
    p.add_argument("--max-level", type=int, default=2)
    p.add_argument("--t-final", type=float, default=22.5)
    p.add_argument("--riemann-solver", default="geoclaw", choices=("geoclaw", "geoclaw_hr"))
    p.add_argument("--series", help="keep the gauge CSV of every run under this folder")
    p.add_argument("--compare", nargs=2, metavar="DIR", help="compare two gauges.csv folders")
    p.add_argument("--subcycle", choices=("on", "off"), default="on",
                   help="local time stepping of the adaptive case (default on)")
    p.add_argument("--inline", action="store_true", help="run in this process")
    p.add_argument("--precision", default="float64", choices=("float64", "float32", "mixed"),
                   help="arithmetic of the GPU step kernel")
    p.add_argument("--step-events", action="store_true",
                   help="GPU, graphs off (FORESTPY_GPU_GRAPH=0): time the step kernels "
                        "with CUDA events (step_kernel_device_s)")
    args = p.parse_args(argv)
    if args.compare:
        print(json.dumps({"benchmark": "okushiri_series_difference", "a": args.compare[0],
                          "b": args.compare[1],
                          "max_abs_diff_m": compare_series(*args.compare)}))
        return
    cases = args.case or list(CASES)
    if args.inline:
        for case in cases:
            print(json.dumps(run_case(case, args.backend, args.dx, args.t_final, args.series,
                                      args.mx, args.max_level, args.riemann_solver,
                                      args.subcycle == "on", args.step_events,
                                      args.precision)),
                  flush=True)
        return
    for threads in args.threads or [1, os.cpu_count()]:
        for case in cases:
            env = {**os.environ, "NUMBA_NUM_THREADS": str(threads)}
            cmd = [sys.executable, __file__, "--inline", "--case", case, "--backend",
                   args.backend, "--dx", str(args.dx), "--t-final", str(args.t_final),
                   "--mx", str(args.mx), "--max-level", str(args.max_level),
                   "--riemann-solver", args.riemann_solver, "--subcycle", args.subcycle,
                   "--precision", args.precision]
            if args.series:
                cmd += ["--series", args.series]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
