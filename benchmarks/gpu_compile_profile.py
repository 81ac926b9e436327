"""Where a GPU run of a demo spends its time compiling: every Numba-CUDA kernel
compilation of one run, timed (the dispatcher's ``compile``; kernels loaded from
forestpy's disk cache, ``forestpy.cuda_cache``, are not compiled), with what keeps a
kernel out of that cache and the run's wall time.  One JSON record per kernel (largest
first), then a summary.  Run it twice to see a warm cache.

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
    from forestpy.cuda_cache import uncacheable_reason

    records = []
    compile_ = CUDADispatcher.compile

    def timed_compile(self, sig):
        t0 = time.perf_counter()
        try:
            return compile_(self, sig)
        finally:
            records.append({"kernel": getattr(self.py_func, "__qualname__", "?"),
                            "module": getattr(self.py_func, "__module__", "?"),
                            "s": time.perf_counter() - t0,
                            "uncacheable": uncacheable_reason(self)})

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
    import hashlib

    state = hashlib.sha256(sim.backend.to_host(sim.q).tobytes()).hexdigest()[:16]
    print(json.dumps({"demo": args.demo, "wall_s": wall, "setup_s": t_setup,
                      "state_sha256": state, "cached_kernels_dir": str(_cuda_dir()),
                      "kernels_compiled": len(records),
                      "compile_s": sum(r["s"] for r in records), "steps": sim.steps}))


def _cuda_dir():
    from forestpy.kernel_files import cache_dir

    return cache_dir() / "cuda"


if __name__ == "__main__":
    main()
