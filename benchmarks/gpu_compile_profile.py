"""Where the first GPU run of a demo spends its time compiling: every Numba-CUDA kernel
compilation of one run, timed (the dispatcher's ``compile``), with the run's wall time.
One JSON record per kernel (largest first), then a summary.

    python benchmarks/gpu_compile_profile.py okushiri [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from numba.cuda.dispatcher import CUDADispatcher

    from benchmarks.gpu_parity import load

    records = []
    compile_ = CUDADispatcher.compile

    def timed_compile(self, sig):
        t0 = time.perf_counter()
        try:
            return compile_(self, sig)
        finally:
            records.append({"kernel": getattr(self.py_func, "__qualname__", "?"),
                            "module": getattr(self.py_func, "__module__", "?"),
                            "s": time.perf_counter() - t0})

    CUDADispatcher.compile = timed_compile
    kw = {}
    for item in args.set:
        k, v = item.split("=", 1)
        kw[k] = float(v) if "." in v or "e" in v else int(v)
    t0 = time.perf_counter()
    sim = load(args.demo).setup(backend="gpu", **kw)
    t_setup = time.perf_counter() - t0
    sim.run()
    sim.backend.synchronize()
    wall = time.perf_counter() - t0
    records.sort(key=lambda r: -r["s"])
    for r in records:
        print(json.dumps(r))
    print(json.dumps({"demo": args.demo, "wall_s": wall, "setup_s": t_setup,
                      "kernels_compiled": len(records),
                      "compile_s": sum(r["s"] for r in records), "steps": sim.steps}))


if __name__ == "__main__":
    main()
