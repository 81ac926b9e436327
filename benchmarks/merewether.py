"""Merewether flash flood (demos/geoclaw/merewether.py): speed and peak stages.

One JSON record per run on stdout: machine, backend, Numba threads, the demo options,
steps, regrids, patches per level at the end, wall time, startup (compilation) time,
cell updates per second (over the stepping, startup excluded), the timer breakdown,
the volume balance and the modelled peak stage at the five observation points beside
the observed ones.  Cases:

* ``amr``     -- the demo's defaults: 2 m / 1 m cells, refinement follows the water;
* ``uniform`` -- the whole grid at 1 m (320 x 416 cells);
* ``coarse``  -- 4 m / 2 m cells (mx = 8), a quick check.

Each case runs in this process; set ``NUMBA_NUM_THREADS`` before starting it (one
process per thread count)::

    NUMBA_NUM_THREADS=1 python benchmarks/merewether.py --case amr
    python benchmarks/merewether.py --case uniform --backend gpu --out out/mw_gpu
    python benchmarks/merewether.py --backend gpu --riemann-solver geoclaw_hr
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "amr": {},
    "uniform": dict(uniform=True),
    "coarse": dict(mx=8),
}


def load_demo():
    spec = importlib.util.spec_from_file_location(
        "merewether", ROOT / "demos" / "geoclaw" / "merewether.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def run_case(case: str, backend: str, t_final: float | None, out: Path | None,
             riemann_solver: str = "geoclaw", subcycle: bool = True) -> dict:
    import numba

    demo = load_demo()
    options = dict(CASES[case], backend=backend, riemann_solver=riemann_solver,
                   subcycle=subcycle)
    if t_final is not None:
        options["t_final"] = t_final
    t0 = time.perf_counter()
    sim = demo.setup(**options)
    setup_s = time.perf_counter() - t0
    sim.run()
    summary = sim.summary()
    report = demo.report(sim, out or Path("/tmp") / f"merewether_bench_{os.getpid()}")
    return {
        "benchmark": "merewether",
        "case": case,
        "machine": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "backend": summary.get("backend"),
        "device": summary.get("device"),
        "options": {k: v for k, v in sim.merewether["options"].items()},
        "setup_s": setup_s,
        "subcycle": sim.subcycling,
        "steps": sim.steps,
        "level_steps": sim.level_steps,
        "rejected_steps": sim.rejected_steps,
        "regrids": sim.regrids,
        "t_final": sim.t,
        "patches_per_level": summary["patches_per_level"],
        "cell_updates": summary["cell_updates"],
        "wall_s": summary["wall_s"],
        "startup_s": summary["startup_s"],
        "cell_updates_per_s": summary["cell_updates_per_s"],
        # device-to-host transfers (GPU: host synchronisations) of the whole run
        "host_transfers": sim.backend.host_transfers,
        "host_transfers_per_step": round(sim.backend.host_transfers / max(sim.steps, 1), 2),
        "timers": summary["timers"],
        **sim.graph_summary(),
        "interior_digest": sim.interior_digest(),
        "volume_injected": report["volume_injected"],
        "volume_in_domain": report["volume_in_domain"],
        "volume_outflow": report["volume_outflow"],
        "peak_stages": [{k: r[k] for k in ("id", "modelled", "observed", "tuflow")}
                        for r in report["peak_stages"]],
        "rms_modelled_minus_observed": report["rms_modelled_minus_observed"],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(CASES), default="amr")
    p.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--t-final", type=float, default=None, help="end time (default 1000 s)")
    p.add_argument("--out", type=Path, default=None, help="folder for the report files")
    p.add_argument("--riemann-solver", default="geoclaw", choices=("geoclaw", "geoclaw_hr"))
    p.add_argument("--subcycle", choices=("on", "off"), default="on",
                   help="local time stepping (default on)")
    args = p.parse_args(argv)
    print(json.dumps(run_case(args.case, args.backend, args.t_final, args.out,
                              args.riemann_solver, args.subcycle == "on")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
