"""Registers, spills, shared memory and occupancy of the GPU step kernels, without a GPU.

Compiles the row-tile kernel (``solvers/clawpack/gpu_kernel.py``) and the whole-patch
kernel (``solvers/clawpack/gpu_patch_kernel.py``) for shallow water (Roe, MC,
transverse_waves 2, FP64 arithmetic, multiply-adds not contracted as on the GPU
backend) to PTX for compute capability 9.0 with NVVM, assembles the PTX with
``ptxas -arch=sm_90 -v`` at the kernel's register cap and without one, and prints one
JSON record per kernel and patch size:

* ``registers``, ``spill_store_bytes``, ``spill_load_bytes``, ``stack_bytes``,
  ``smem_bytes`` from ptxas (at the cap the launch uses, and ``free_*`` without it);
* ``blocks_per_sm`` and ``warps_per_sm`` on an H100/H200 multiprocessor (65536
  registers allocated per warp in units of 256, 228 KB shared memory with 1 KB
  reserved per block, 2048 threads, 32 blocks);
* ``barriers_per_patch`` (``syncthreads`` executed per patch, from the kernel's phase
  structure) and ``bar_sites`` (``bar.sync`` in the PTX);
* ``rpn2_per_cell`` / ``rpt2_per_cell``: Riemann solves per cell update (tile halos
  included);
* for the whole-patch kernel: ``work_sharing`` (the solver's work-sharing pieces
  called: shallow water Roe has them), ``cell_states`` (cell states once per step in
  shared memory), ``record_doubles`` (per face record) and ``cell_state_doubles``;
* ``ptx_fp64``: static double-precision ``add``/``mul``/``fma``/``div``/``sqrt`` in the
  PTX (a size indicator, not the dynamic count).

Needs the numba-cuda package (the GPU machines' compiler; Numba's built-in CUDA target,
deprecated, cannot type ``min``/``max`` of two numbers), libNVVM and ``ptxas`` (a CUDA
toolkit; ``CUDA_HOME`` defaults to ``/usr/local/cuda``), no GPU and no driver: the
device queries compilation makes are answered with compute capability 9.0.  On this
project's development machine::

    python3 -m venv /tmp/nc && /tmp/nc/bin/pip install numba-cuda==0.30.4 numba numpy
    /tmp/nc/bin/pip install --no-deps -e .
    /tmp/nc/bin/python benchmarks/gpu_kernel_resources.py

Usage::

    python benchmarks/gpu_kernel_resources.py [--mx 16,32] [--kernels tile,patch]
        [--ptxas ptxas] [--keep DIR] [--caps 96,104]
        (kernels: tile, patch, patch+status; +noshare: the patch kernel calling
        rpn2/rpt2 instead of the work-sharing pieces, as before they were used;
        +nocells: the cell states computed in the threads, not once into shared memory;
        tile+float32, tile+mixed: the tile kernel in that precision, float32 storage
        for float32)

``--caps``: also assemble at these register caps (``caps`` in the record: registers,
spills and warps per multiprocessor at each).
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # compile for the device, before Numba loads
if "CUDA_HOME" not in os.environ and os.path.isdir("/usr/local/cuda/nvvm"):
    os.environ["CUDA_HOME"] = "/usr/local/cuda"  # libNVVM and libdevice of a toolkit

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

CC = (9, 0)
SM_REGS = 65536
SM_SMEM = 228 * 1024
BLOCK_RESERVED_SMEM = 1024
SM_THREADS = 2048
SM_BLOCKS = 32


def _no_device():
    """Answer the compute-capability queries compilation makes without a GPU."""
    fake = types.SimpleNamespace(compute_capability=CC)
    import numba.cuda.dispatcher as disp

    disp.get_current_device = lambda: fake
    try:  # numba-cuda: the closest architecture NVRTC supports, and its library path
        from numba.cuda.cudadrv import nvrtc

        nvrtc.get_supported_ccs = lambda: [CC]
        from numba.cuda import cuda_paths

        cuda_paths._get_nvrtc_path = lambda: None
    except (ImportError, AttributeError):
        pass


def occupancy(regs: int, smem: int, threads: int) -> tuple[int, int]:
    """(blocks, warps) per multiprocessor of compute capability 9.0."""
    warps = -(-threads // 32)
    per_warp = -(-(max(regs, 1) * 32) // 256) * 256
    by_regs = SM_REGS // (per_warp * warps)
    by_smem = SM_SMEM // (smem + BLOCK_RESERVED_SMEM)
    blocks = min(by_regs, by_smem, SM_THREADS // (warps * 32), SM_BLOCKS)
    return blocks, blocks * warps


def ptxas(ptx_path: str, exe: str, cap: int | None) -> dict:
    cmd = [exe, "-arch=sm_90", "-v", ptx_path, "-o", os.devnull]
    if cap is not None:
        cmd.insert(2, f"--maxrregcount={cap}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    out = r.stderr

    def num(pattern):
        m = re.search(pattern, out)
        return int(m.group(1)) if m else 0

    return {"registers": num(r"Used (\d+) registers"),
            "spill_store_bytes": num(r"(\d+) bytes spill stores"),
            "spill_load_bytes": num(r"(\d+) bytes spill loads"),
            "stack_bytes": num(r"(\d+) bytes stack frame"),
            "smem_bytes": num(r"(\d+) bytes smem")}


def ptx_counts(ptx: str) -> dict:
    fp64 = len(re.findall(r"\b(?:add|sub|mul|fma|div|sqrt)\.[a-z.]*f64\b", ptx))
    fp32 = len(re.findall(r"\b(?:add|sub|mul|fma|div|sqrt)\.[a-z.]*f32\b", ptx))
    return {"ptx_fp64": fp64, "ptx_fp32": fp32,
            "bar_sites": len(re.findall(r"\bbar(?:rier)?\.sync", ptx))}


def _signature(patch: bool, status: bool, tiled: bool = False, storage: str = "float64"):
    from numba import types as T

    f8, i8 = T.float64, T.int64
    fs = T.float32 if storage == "float32" else f8

    def arr(dt, nd):
        return T.Array(dt, nd, "C")

    if patch:
        return (arr(i8, 1), arr(f8, 1), arr(f8, 1), arr(f8, 1), arr(f8, 1), arr(f8, 1), f8,
                arr(f8, 1), arr(i8, 1), arr(f8, 1), arr(f8, 1),
                arr(f8, 2) if status else arr(f8, 1),
                arr(f8, 2) if tiled else arr(f8, 1), arr(T.int32, 1) if tiled else arr(i8, 1))
    return (arr(i8, 1), arr(fs, 4), arr(fs, 4), arr(fs, 4), arr(f8, 1), arr(f8, 1), f8,
            arr(f8, 1), arr(i8, 1), arr(f8, 1), arr(f8, 4))


def describe(kind: str, mx: int, status: bool = False, share: bool = True,
             cells: bool | None = None, precision: str = "float64"):
    """(compiled kernel, its register cap, threads, facts of the plan) of one kernel."""
    from forestpy.vtable import get_riemann

    rs = get_riemann("shallow_roe")
    meqn = mwaves = 3
    if kind == "tile":
        from forestpy.solvers.clawpack.gpu_kernel import (
            make_gpu_step_kernel,
            plan_tiles,
            register_cap,
        )

        kernel, nt = make_gpu_step_kernel(rs, mx, mx, 2, precision=precision)
        R = plan_tiles(mx, mx, meqn, mwaves, word=4 if precision == "float32" else 8)[0]
        cap = register_cap(nt, precision)
        tiles = -(-mx // R)
        # 4 barriers per pass and tile; the block reduction: 1 + log2(threads)
        barriers = 8 * tiles + 1 + (nt - 1).bit_length()
    else:
        from forestpy.solvers.clawpack.gpu_patch_kernel import make_gpu_patch_kernel

        k = make_gpu_patch_kernel(rs, mx, mx, 2, status=status, work_sharing=share,
                                  cell_states=cells)
        nt, R = k.nthreads, k.rows_per_tile
        cap = k.max_registers
        tiles = -(-mx // R)
        # per block (one a tile): 4 per pass, less the one after the last pass; the
        # epilogue's one, one more for a patch of several tiles (the ticket), one for
        # the cell states of the work-sharing contract, and one for the fused status
        # (in the last block of a patch)
        barriers = (tiles * (7 + 1 + (1 if tiles > 1 else 0) + (1 if k.cell_states else 0))
                    + (1 if status else 0))
        kernel = k.kernel
    fn = kernel.py_func if hasattr(kernel, "py_func") else kernel.dispatcher.py_func
    rpn2 = rpt2 = 0
    for tile in range(tiles):
        rt = min(R, mx - tile * R)
        rpn2 += (rt + 2) * (mx + 3) + (rt + 3) * (mx + 2)
        if kind == "tile":  # both splittings at every limited face
            rpt2 += 2 * ((rt + 2) * (mx + 1) + (rt + 1) * (mx + 2))
        else:  # the two entering each cell of the pass
            rpt2 += 2 * ((rt + 2) * mx + (mx + 2) * rt)
    cells = mx * mx
    facts = {"threads": nt, "rows_per_tile": R, "tiles": tiles,
             "barriers_per_patch": barriers, "rpn2_per_cell": round(rpn2 / cells, 3),
             "rpt2_per_cell": round(rpt2 / cells, 3)}
    if kind != "tile":
        facts.update(work_sharing=k.work_sharing, cell_states=k.cell_states,
                     record_doubles=k.record_doubles,
                     cell_state_doubles=k.cell_state_doubles,
                     smem_plan_bytes=8 * k.shared_doubles)
    return fn, cap, nt, facts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mx", default="16,32")
    ap.add_argument("--kernels", default="tile,patch,patch+status")
    ap.add_argument("--ptxas", default=shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas")
    ap.add_argument("--keep", default=None, help="folder to keep the PTX files in")
    ap.add_argument("--caps", default="", help="more register caps to assemble at")
    args = ap.parse_args(argv)
    _no_device()
    from numba import cuda

    from forestpy.backend import contract_multiply_add

    contract_multiply_add(False)  # as the GPU backend compiles by default
    try:
        import numba_cuda

        numba_version = "numba-cuda " + numba_cuda.__version__
    except ImportError:
        import numba

        numba_version = "numba " + numba.__version__
    ver = subprocess.run([args.ptxas, "--version"], capture_output=True, text=True).stdout
    ptxas_version = (re.findall(r"release [\d.]+, V[\d.]+", ver) or ["?"])[0]
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="forestpy_ptx_")
    folder = args.keep or tmp.name
    os.makedirs(folder, exist_ok=True)
    for mx in map(int, args.mx.split(",")):
        for kind in args.kernels.split(","):
            mods = kind.split("+")[1:]
            status = "status" in mods
            base = kind.split("+")[0]
            t0 = time.perf_counter()
            arith = next((m for m in mods if m in ("float32", "mixed")), "float64")
            fn, cap, nt, facts = describe(base, mx, status, "noshare" not in mods,
                                          False if "nocells" in mods else None, arith)
            sig = _signature(base == "patch", status, facts["tiles"] > 1,
                             "float32" if arith == "float32" else "float64")
            ptx, _ = cuda.compile_ptx(fn, sig, cc=CC)
            path = os.path.join(folder, f"{kind.replace('+', '_')}_mx{mx}.ptx")
            with open(path, "w") as f:
                f.write(ptx)
            capped = ptxas(path, args.ptxas, cap)
            free = ptxas(path, args.ptxas, None)
            blocks, warps = occupancy(capped["registers"], capped["smem_bytes"], nt)
            fblocks, fwarps = occupancy(free["registers"], free["smem_bytes"], nt)
            caps = {}
            for c in (int(x) for x in args.caps.split(",") if x):
                got = ptxas(path, args.ptxas, c)
                caps[c] = {"registers": got["registers"],
                           "spill_store_bytes": got["spill_store_bytes"],
                           "spill_load_bytes": got["spill_load_bytes"],
                           "warps_per_sm": occupancy(got["registers"], got["smem_bytes"],
                                                     nt)[1]}
            rec = {"part": "resources", "kernel": kind, "mx": mx, "solver": "shallow_roe",
                   "arith": arith, "fma": False, "register_cap": cap, **facts,
                   **capped, "blocks_per_sm": blocks, "warps_per_sm": warps,
                   **{f"free_{k}": v for k, v in free.items() if k != "smem_bytes"},
                   "free_warps_per_sm": fwarps, **({"caps": caps} if caps else {}),
                   **ptx_counts(ptx),
                   "compile_s": round(time.perf_counter() - t0, 1),
                   "ptx": path if args.keep else None,
                   "toolchain": f"{numba_version}, ptxas {ptxas_version}",
                   "date": time.strftime("%Y-%m-%d")}
            print(json.dumps(rec), flush=True)
            del fblocks
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
