"""Size of compressed ParaView frames (bit rounding + VTK's own compressor); JSON lines.

Runs a short radial dam (``demos/radial_dam.py``: mx 16, levels 2-4, ``t_final`` 0.6)
and/or Okushiri (``demos/geoclaw/okushiri.py``: mx 16, ``dx_finest`` 0.056, 16 s),
then writes the final state as an AMR frame (:func:`forestpy.io.vtk.write_frame`: the
``.vthb``, the levels view ``.vtm`` and the block folder) with

* ``compression="none"`` -- the uncompressed frame, the reference of ``ratio``;
* VTK's default writer (zlib, level 5: what ``forestpy run --vtk`` wrote before) --
  the reference of ``ratio_vs_default``;
* each ``--tolerances`` value (relative to each field's range) with each compressor.

Every frame is read back with VTK's multiblock reader (the ``.vtm``, as ParaView's PVD
reader opens it); each record says the largest error per field against the unrounded
frame (``max_error_over_tol`` must be <= 1: ``bound_held``), the conserved totals
before and after rounding, and the time to write.

    python benchmarks/frame_compression.py                     # both data sets
    python benchmarks/frame_compression.py --data radial_dam --tolerances 1e-3,1e-6
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_demo(data: str, okushiri_dx: float):
    if data == "radial_dam":
        demo = _load(ROOT / "demos" / "radial_dam.py", "radial_dam")
        opts = dict(mx=16, min_level=2, max_level=4, t_final=0.6)
    elif data == "okushiri":
        demo = _load(ROOT / "demos" / "geoclaw" / "okushiri.py", "okushiri")
        opts = dict(mx=16, dx_finest=okushiri_dx, t_final=16.0, gauges=False)
    else:
        raise SystemExit(f"unknown data {data!r}")
    sim = demo.setup(**opts)
    sim.run()
    return sim, opts


def frame_bytes(path: Path) -> int:
    stem = path.with_suffix("")
    files = [stem.with_suffix(".vthb"), stem.with_suffix(".vtm")]
    files += [f for f in stem.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files if f.is_file())


def read_leaves(vtm: Path) -> dict:
    """``{field: concatenated leaf values}`` of a frame's levels view, read by VTK."""
    from vtkmodules.util.numpy_support import vtk_to_numpy
    from vtkmodules.vtkIOXML import vtkXMLMultiBlockDataReader

    reader = vtkXMLMultiBlockDataReader()
    reader.SetFileName(str(vtm))
    reader.Update()
    out: dict = {}
    top = reader.GetOutput()
    for k in range(top.GetNumberOfBlocks()):
        level = top.GetBlock(k)
        for j in range(level.GetNumberOfBlocks()):
            cd = level.GetBlock(j).GetCellData()
            for a in range(cd.GetNumberOfArrays()):
                if cd.GetArrayName(a) != "vtkGhostType":
                    out.setdefault(cd.GetArrayName(a), []).append(vtk_to_numpy(cd.GetArray(a)))
    return {k: np.concatenate(v) for k, v in out.items()}


def main(argv=None):
    from forestpy.io.vtk import write_frame

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("radial_dam", "okushiri", "both"), default="both")
    ap.add_argument("--tolerances", default="1e-2,1e-3,1e-4,1e-6,1e-8")
    ap.add_argument("--compressors", default="zlib,lz4,lzma")
    ap.add_argument("--okushiri-dx", type=float, default=0.056,
                    help="Okushiri's dx_finest (0.112: 10 patches, 0.056: 26)")
    args = ap.parse_args(argv)
    tols = [float(v) for v in args.tolerances.split(",")]
    datas = ["radial_dam", "okushiri"] if args.data == "both" else [args.data]
    machine = {"host": platform.node(), "cpu": platform.processor() or platform.machine()}
    tmp = Path(tempfile.mkdtemp(prefix="frame_compression."))
    try:
        for data in datas:
            t0 = time.perf_counter()
            sim, opts = run_demo(data, args.okushiri_dx)
            run_s = time.perf_counter() - t0
            sizes = {}
            ref = None
            cases = [("none", None), ("vtk_default", None)]
            cases += [(c, t) for t in tols for c in args.compressors.split(",")]
            for comp, tol in cases:
                name = f"{data}_{comp}_{tol}"
                rep: dict = {}
                kw = {} if comp == "vtk_default" else {"compression": comp}
                t1 = time.perf_counter()
                path = write_frame(sim, tmp / name, tolerance=tol, report=rep, **kw)
                write_s = time.perf_counter() - t1
                nbytes = frame_bytes(path)
                sizes[comp if tol is None else name] = nbytes
                leaves = read_leaves(path.with_suffix(".vtm"))
                if ref is None:
                    ref = leaves
                fields = {}
                held = True
                for f, v in leaves.items():
                    err = float(np.max(np.abs(v - ref[f]))) if v.size else 0.0
                    entry = {"max_error": err}
                    if tol is not None:
                        t_abs = rep[f]["tolerance"]
                        entry["tolerance"] = t_abs
                        entry["max_error_over_tol"] = err / t_abs if t_abs else 0.0
                        held &= err <= t_abs
                        for key in ("total", "total_change", "total_abs"):
                            if key in rep[f]:
                                entry[key] = rep[f][key]
                    else:
                        held &= err == 0.0
                    fields[f] = entry
                rec = {"kind": "frame", "data": data, "options": opts, "t": float(sim.t),
                       "npatch": int(sim.geom.npatch), "compressor": comp,
                       "tolerance_rel": tol, "bytes": nbytes,
                       "ratio": sizes["none"] / nbytes,
                       "ratio_vs_default": (sizes["vtk_default"] / nbytes
                                            if "vtk_default" in sizes else None),
                       "write_s": write_s, "bound_held": bool(held), "fields": fields,
                       "run_s": run_s, **machine}
                print(json.dumps(rec), flush=True)
                shutil.rmtree(tmp / name, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
