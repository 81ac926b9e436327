"""The CPU step kernel with and without the work-sharing solver contract (issue 32);
one JSON record per run, then one summary record per case and variant.

Variants, each run in a fresh process (``NUMBA_NUM_THREADS`` from ``--threads``,
default 1), taken in turn round after round so that the load of a shared machine
drifts over all of them alike:

* ``shared``: this checkout as it runs by default (the kernel calls the solvers'
  ``cell_state``/``edge_state``/``rpn2e``/``rpt2e``);
* ``legacy``: this checkout with ``FORESTPY_WORK_SHARING=0`` (the kernel calls the
  composed ``rpn2``/``rpt2``; bitwise the same results);
* ``base``: another checkout, ``--base DIR`` (for example ``git worktree add
  /tmp/main main``), imported through a package view of its ``forestpy``, ``solvers``
  and ``extensions`` folders (no install needed): the before/after against main.

Cases: ``kernel`` (``benchmarks/clawpack_kernel.py``: the step kernel alone, shallow
water Roe, MC, transverse 2, 256 patches of 32^2, best of 7 calls) and ``uniform``
(``benchmarks/radial_dam.py --case uniform``: the radial dam break on 512^2 cells, mx 32
at level 4, t = 1, the whole run); the scripts are this checkout's for every variant.
Each record carries the checkout's commit and two rates: per second of wall time and
per second of the process's CPU time (``time.process_time``), which a machine shared
with other jobs disturbs far less.  The summary gives, per case and variant, the best
and median of both and the ratio of the best CPU-time rates to ``base`` (or ``legacy``
without ``--base``).

    python benchmarks/kernel_sharing.py --base /tmp/main --rounds 5
    python benchmarks/kernel_sharing.py --case kernel --rounds 3     # no base
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_view(checkout: Path, into: Path) -> Path:
    """A folder with a ``forestpy`` package made of links to ``checkout``'s
    ``forestpy/*``, ``solvers``, ``extensions`` and ``demos`` (where pyproject.toml puts
    them when it installs), to put first on ``PYTHONPATH``."""
    pkg = into / "forestpy"
    pkg.mkdir(parents=True)
    for entry in (checkout / "forestpy").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for name in ("solvers", "extensions", "demos"):
        (pkg / name).symlink_to(checkout / name)
    return into


def commit(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command(case: str) -> list[str]:
    if case == "kernel":
        return [sys.executable, str(ROOT / "benchmarks" / "clawpack_kernel.py"),
                "--npatch", "256", "--mx", "32", "--repeat", "7"]
    return [sys.executable, str(ROOT / "benchmarks" / "radial_dam.py"), "--inline",
            "--case", "uniform"]


def run_one(case, variant, checkout, env) -> dict:
    out = subprocess.run(command(case), env=env, capture_output=True, text=True, check=True)
    record = json.loads(out.stdout.strip().splitlines()[-1])
    if case == "kernel":
        per_cpu = record["cell_updates_per_cpu_s"]
    else:
        per_cpu = round(record["cell_updates"] / record["cpu_s"])
    return {"benchmark": "kernel_sharing", "case": case, "variant": variant,
            "commit": commit(checkout), "cell_updates_per_s": record["cell_updates_per_s"],
            "cell_updates_per_cpu_s": per_cpu, "record": record}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=("kernel", "uniform"), action="append")
    p.add_argument("--base", type=Path, help="checkout to compare against (e.g. main)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    cases = a.case or ["kernel", "uniform"]
    common = {**os.environ, "NUMBA_NUM_THREADS": str(a.threads)}
    variants = {"shared": (ROOT, {**common, "FORESTPY_WORK_SHARING": "1"}),
                "legacy": (ROOT, {**common, "FORESTPY_WORK_SHARING": "0"})}
    with tempfile.TemporaryDirectory(prefix="forestpy_base_") as tmp:
        if a.base is not None:
            view = package_view(a.base.resolve(), Path(tmp))
            path = os.pathsep.join(filter(None, [str(view), common.get("PYTHONPATH")]))
            variants = {"base": (a.base.resolve(), {**common, "PYTHONPATH": path}),
                        **variants}
        results: dict = {}
        for case in cases:
            for variant, (checkout, env) in variants.items():  # warm-up: compile, cache
                run_one(case, variant, checkout, env)
        for _ in range(a.rounds):
            for case in cases:
                for variant, (checkout, env) in variants.items():
                    rec = run_one(case, variant, checkout, env)
                    print(json.dumps(rec), flush=True)
                    results.setdefault((case, variant), []).append(
                        (rec["cell_updates_per_s"], rec["cell_updates_per_cpu_s"]))
    ref = "base" if a.base is not None else "legacy"
    for (case, variant), rates in results.items():
        wall = [w for w, _ in rates]
        cpu = [c for _, c in rates]
        print(json.dumps({
            "benchmark": "kernel_sharing_summary", "case": case, "variant": variant,
            "threads": a.threads, "runs": len(rates),
            "best_cell_updates_per_s": max(wall),
            "median_cell_updates_per_s": round(statistics.median(wall)),
            "best_cell_updates_per_cpu_s": max(cpu),
            "median_cell_updates_per_cpu_s": round(statistics.median(cpu)),
            f"cpu_rate_over_{ref}": round(max(cpu) / max(c for _, c in results[(case, ref)]),
                                          3),
            "date": time.strftime("%Y-%m-%d"),
        }), flush=True)


if __name__ == "__main__":
    main()
