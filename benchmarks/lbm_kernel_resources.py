"""Registers, spills, local memory and occupancy of the D3Q27 lattice-Boltzmann GPU
kernels, without a GPU: the cell kernel (``solvers/lbm/gpu.py``, the CPU's cell body
per thread) and the register kernel (``solvers/lbm/fast.py``, generated per grid).

Each kernel is compiled to PTX for compute capability 9.0 with NVVM (Numba-CUDA's
``compile_ptx``) and assembled with ``ptxas -arch=sm_90 -v`` (no register cap: the
kernels are launched without one); one JSON record per kernel variant:

* ``registers``, ``spill_store_bytes``, ``spill_load_bytes``, ``stack_bytes`` (the
  per-thread local memory: scratch arrays and spills), ``smem_bytes`` from ptxas;
* ``blocks_per_sm`` / ``warps_per_sm`` on an H100/H200 multiprocessor at the launch's
  block size, and ``occupancy`` (warps / 64);
* ``cap64_*`` / ``cap96_*``: registers and spills at ``--maxrregcount`` 64 and 96
  (``FORESTPY_LBM_MAXREG``);
* static PTX counts: ``ptx_fp64`` / ``ptx_fp32`` (add/sub/mul/fma/div/sqrt),
  ``ptx_local`` (``ld.local`` + ``st.local``), ``ptx_ld_global`` / ``ptx_st_global``,
  ``ptx_branches`` (``bra``) and ``ptx_lines`` (a size indicator);
* the kernel's specialisation: storage, arithmetic, ``fastmath``, step parity, what the
  grid holds (``case``: ``box`` a periodic box, ``sphere`` solid cells, ``open`` solid,
  inlet and outlet cells and a body force).

The toolchain is the one of ``benchmarks/gpu_kernel_resources.py`` (whose helpers this
script uses): numba-cuda in a separate virtual environment, libNVVM and ``ptxas`` of a
CUDA toolkit, no GPU and no driver::

    python3 -m venv /tmp/nc && /tmp/nc/bin/pip install numba-cuda==0.30.4 numba numpy
    /tmp/nc/bin/pip install --no-deps -e .
    /tmp/nc/bin/python benchmarks/lbm_kernel_resources.py [--n 128] [--keep DIR]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import gpu_kernel_resources as gkr  # noqa: E402  (sets up the compiler, no device)

CASES = {  # forced, walls, inlet, outlet normal
    "box": (False, False, False, None),
    "sphere": (False, True, False, None),
    "open": (True, True, True, (1, 0, 0)),
}


def counts(ptx: str) -> dict:
    """Static instruction counts of the PTX."""
    ops = r"(?:add|sub|mul|fma|div|sqrt|rcp)"
    return {"ptx_fp64": len(re.findall(rf"\b{ops}\.[a-z.]*f64\b", ptx)),
            "ptx_fp32": len(re.findall(rf"\b{ops}\.[a-z.]*f32\b", ptx)),
            "ptx_local": len(re.findall(r"\b(?:ld|st)\.local\b", ptx)),
            "ptx_ld_global": len(re.findall(r"\bld\.global\b", ptx)),
            "ptx_st_global": len(re.findall(r"\bst\.global\b", ptx)),
            "ptx_branches": len(re.findall(r"\bbra(?:\.uni)?\b", ptx)),
            "ptx_lines": ptx.count("\n")}


def variants(n: int, which, cases=tuple(CASES), storages=("float32", "float16", "float64")):
    """(record fields, python function, signature, threads) of each kernel variant."""
    import numpy as np
    from numba import types as T

    f8, i8, u1 = T.float64, T.int64, T.uint8
    store = {"float64": f8, "float32": T.float32, "float16": T.uint16}
    if "cell" in which:
        from forestpy.solvers.lbm import fp16, gpu

        for storage in ("float64", "float32", "float16"):
            fn = gpu._step
            if storage == "float16":
                fn = fp16.gpu_step_kernel16().py_func
            sig = ((T.Array(store[storage], 2, "C"), T.Array(u1, 1, "C"), i8, i8, i8, i8)
                   + (f8,) * 10 + (i8,) * 3)
            yield ({"kernel": "cell", "storage": storage, "arith": "float64",
                    "fastmath": False, "parity": "both", "case": "any"},
                   fn, sig, gpu.THREADS)
    if "register" in which:
        from forestpy.solvers.lbm.fast import THREADS, register_kernels

        h_type = {"float64": f8, "float32": T.float32, "float16": T.float16}
        for storage, arith in (("float32", "float32"), ("float16", "float32"),
                               ("float64", "float64"), ("float32", "float64"),
                               ("float16", "float64")):
            if storage not in storages:
                continue
            for case, (forced, walls, inlet, outlet) in CASES.items():
                if case not in cases:
                    continue
                fastmath = arith == "float32"
                fns = register_kernels((n, n, n), arith, storage, forced, walls, inlet,
                                       outlet, fastmath=fastmath, cuda_jit=False)
                sig = (T.Array(h_type[storage], 1, "C"), T.Array(u1, 1, "C")) + (f8,) * 10
                for parity, fn in zip(("even", "odd"), fns):
                    yield ({"kernel": "register", "storage": storage, "arith": arith,
                            "fastmath": fastmath, "parity": parity, "case": case},
                           fn, sig, THREADS)
    del np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128, help="cube edge the register kernel "
                    "is generated for")
    ap.add_argument("--kernels", default="cell,register")
    ap.add_argument("--cases", default=",".join(CASES), help="register kernel cases")
    ap.add_argument("--storage", default="float32,float16,float64",
                    help="register kernel storages")
    ap.add_argument("--ptxas", default=shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas")
    ap.add_argument("--keep", default=None, help="folder to keep the PTX files in")
    args = ap.parse_args(argv)
    gkr._no_device()
    from numba import cuda

    from forestpy.backend import contract_multiply_add

    contract_multiply_add(False)  # as the GPU backend compiles by default
    try:
        import numba_cuda

        toolchain = "numba-cuda " + numba_cuda.__version__
    except ImportError:
        import numba

        toolchain = "numba " + numba.__version__
    ver = subprocess.run([args.ptxas, "--version"], capture_output=True, text=True).stdout
    toolchain += ", ptxas " + (re.findall(r"release [\d.]+, V[\d.]+", ver) or ["?"])[0]
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="forestpy_lbm_ptx_")
    folder = args.keep or tmp.name
    os.makedirs(folder, exist_ok=True)
    for rec, fn, sig, threads in variants(args.n, args.kernels.split(","),
                                          args.cases.split(","), args.storage.split(",")):
        t0 = time.perf_counter()
        ptx, _ = cuda.compile_ptx(fn, sig, cc=gkr.CC, fastmath=rec["fastmath"])
        name = "_".join(str(rec[k]) for k in ("kernel", "storage", "arith", "case", "parity"))
        path = os.path.join(folder, name + ".ptx")
        with open(path, "w") as f:
            f.write(ptx)
        res = gkr.ptxas(path, args.ptxas, None)
        for cap in (64, 96):  # FORESTPY_LBM_MAXREG: what a register cap would spill
            capped = gkr.ptxas(path, args.ptxas, cap)
            res.update({f"cap{cap}_{k}": v for k, v in capped.items()
                        if k in ("registers", "spill_store_bytes", "spill_load_bytes")})
        blocks, warps = gkr.occupancy(res["registers"], res["smem_bytes"], threads)
        rec.update({"part": "lbm_resources", "n": args.n, "threads": threads, **res,
                    "blocks_per_sm": blocks, "warps_per_sm": warps,
                    "occupancy": round(warps / 64, 3), **counts(ptx),
                    "compile_s": round(time.perf_counter() - t0, 1),
                    "ptx": path if args.keep else None, "toolchain": toolchain,
                    "date": time.strftime("%Y-%m-%d")})
        print(json.dumps(rec), flush=True)
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
