"""Gauges and fgmax of the Okushiri demo on a fixed state: time per step, host transfers; JSON.

The demo (its three gauges with derived fields, its runup fgmax grid) runs a few steps
(compiling the kernels); then each callback's ``on_step`` is called ``--calls`` times on
that state, the device synchronised before and after, and the time per call and the
host transfers per call (``backend.host_transfers``) are printed, with the time of
reading the results at the end (``flush``/``times`` for the gauges, the maxima for
fgmax).  Uses only the callbacks' public hooks, so the same script times another
checkout: run it with that checkout's Python (its virtualenv: the package imported)
and ``--root`` (where the demo is read)::

    python benchmarks/point_samples.py --backend gpu
    python benchmarks/point_samples.py --backend cpu --dx 0.028 --calls 200
    /path/to/main/.venv/bin/python benchmarks/point_samples.py --root /path/to/main --backend gpu
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--dx", type=float, default=0.014, help="finest cell size (m)")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = p.parse_args(argv)
    spec = importlib.util.spec_from_file_location(
        "okushiri", args.root / "demos" / "geoclaw" / "okushiri.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    sim = demo.setup(dx_finest=args.dx, backend=args.backend, t_final=22.5)
    sim.run(max_steps=5)
    be = sim.backend
    for cb in sim.callbacks:
        name = type(cb).__name__
        if name not in ("Gauges", "FGMax"):
            continue
        for _ in range(3):
            cb.on_step(sim)
        be.synchronize()
        moved = be.host_transfers
        t0 = time.perf_counter()
        for _ in range(args.calls):
            cb.on_step(sim)
        be.synchronize()
        per_call = (time.perf_counter() - t0) / args.calls
        moved = be.host_transfers - moved
        t0 = time.perf_counter()
        _ = cb.times if name == "Gauges" else cb.max_depth
        read = time.perf_counter() - t0
        print(json.dumps({
            "benchmark": "point_samples", "callback": name, "backend": args.backend,
            "device": be.describe().get("device"), "dx_finest": args.dx,
            "points": int(len(cb.x)), "patches": int(sim.geom.npatch), "calls": args.calls,
            "us_per_step": round(per_call * 1e6, 1),
            "host_transfers_per_step": moved / args.calls,
            "read_results_ms": round(read * 1e3, 3),
            "root": str(args.root),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }))


if __name__ == "__main__":
    main()
