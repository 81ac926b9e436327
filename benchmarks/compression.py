"""Compression of forestpy's own patch data: rate-distortion and throughput; JSON lines.

Data: frames of short runs of the radial dam (``demos/radial_dam.py``, depth and
momenta), of Okushiri (``demos/geoclaw/okushiri.py``) and of the Merewether urban flood
at 600 s (``demos/geoclaw/merewether.py``; 150 s with ``--quick``), the GeoClaw ones
coded as the surface elevation ``h + b`` and the momenta, as compressed checkpoints
store it; the patch interiors ``[npatch, 3, mx, mx]`` in float64.

Records (one JSON object per line, ``"kind"`` says which):

* ``rd`` -- for each codec and tolerance: ratio (input bytes / encoded bytes), and per
  field the largest error, NMSE and PSNR, plus whether each field's bound held.
  ``dwt53`` in its error-bounded mode (``rtol``: a bound of ``rtol`` times each field's
  range), ``dwt53`` in the seed's threshold mode (``tau`` relative to each field's
  range), ``zfpy`` (fixed accuracy) and ``sz3`` (absolute bound) field by field with
  the same per-field bound, ``lossless`` and ``fp16``;
* ``cpu`` -- encode and decode throughput of each codec on the host (GB/s of input,
  best of ``--repeat``; Numba threads: all cores unless ``NUMBA_NUM_THREADS``) on the
  frame tiled ``tiled`` times to about 200 MB (``ratio_tiled`` is the ratio of that
  tiled batch: codecs that see across patches, lossless and SZ3, find the repeats, so
  take ratios from the ``rd`` records);
* ``gpu`` (``--gpu``) -- ``dwt53`` encode and decode of a device-resident batch (the
  frames tiled to ``--gpu-patches`` patches), timed with CUDA events, best of
  ``--repeat``, end to end (``encode_GBps``: kernels, the size round trip, the copy of
  the compressed streams to the host; ``decode_GBps``: their upload and the kernel) and
  the kernels alone by CUDA events (``encode_kernels_GBps``, ``decode_kernel_GBps``);
  self-checking: the encoded bytes of the first ``--check-patches``
  patches must equal the CPU encoder's and the device decode must equal the CPU
  decode (``same_bytes``, ``max_decode_diff``).

    python benchmarks/compression.py                       # all three, CPU
    python benchmarks/compression.py --data radial_dam --quick
    python benchmarks/compression.py --gpu --data radial_dam   # on a machine with a GPU
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RTOLS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
TAUS = (1e-2, 1e-3, 1e-4, 1e-6)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def frames(data: str, quick: bool, okushiri_dx: float | None = None) -> dict:
    """``{"what", "t", "batch"}`` of a short run's final state (patch interiors)."""
    t0 = time.perf_counter()
    if data == "radial_dam":
        demo = _load(ROOT / "demos" / "radial_dam.py", "radial_dam")
        opts = dict(mx=16, min_level=2, max_level=4 if quick else 5, t_final=0.6)
        sim = demo.setup(**opts)
    elif data == "okushiri":
        demo = _load(ROOT / "demos" / "geoclaw" / "okushiri.py", "okushiri")
        dx = okushiri_dx or (0.112 if quick else 0.056)
        opts = dict(mx=16, dx_finest=dx, t_final=16.0, gauges=False)
        sim = demo.setup(**opts)
    elif data == "merewether":  # the urban flood mid-way, buildings and dry streets
        demo = _load(ROOT / "demos" / "geoclaw" / "merewether.py", "merewether")
        opts = dict(t_final=150.0 if quick else 600.0)
        sim = demo.setup(**opts)
    else:
        raise SystemExit(f"unknown data {data!r}")
    sim.run()
    b = sim.mbc
    q = np.asarray(sim.backend.to_host(sim.q))[:, :, b:-b, b:-b].astype(np.float64)
    surf = getattr(sim.riemann, "surface_interp", None)
    fields = list(sim.riemann.field_names)
    if surf is not None:
        i, j = surf
        q = q.copy()
        q[:, i] += np.asarray(sim.backend.to_host(sim.aux))[:, j, b:-b, b:-b]
        fields[i] = "surface"
    return {"what": data, "options": opts, "t": float(sim.t), "fields": fields,
            "batch": np.ascontiguousarray(q), "run_s": time.perf_counter() - t0}


def _field_tols(x, rel):
    rng = x.max(axis=(0, 2, 3)) - x.min(axis=(0, 2, 3))
    return rel * rng


def rd_records(d: dict):
    from forestpy.io.codecs import decode, encode, metrics

    x = d["batch"]
    base = {"kind": "rd", "data": d["what"], "t": d["t"], "shape": list(x.shape),
            "field_names": d["fields"]}

    def rec(codec, rel, blob_bytes, dec, tols=None):
        m = metrics(x, dec, blob_bytes)
        if tols is not None:
            for f, tol in zip(m["fields"], tols):
                f["bound"] = float(tol)
                f["bound_held"] = bool(f["max_error"] <= tol)
        return {**base, "codec": codec, "rel": rel, **m}

    for codec in ("lossless", "fp16"):
        try:
            blob = encode(x, codec)
        except Exception as e:  # noqa: BLE001 - fp16 overflow is a result too
            yield {**base, "codec": codec, "error": str(e)}
            continue
        yield rec(codec, None, len(blob), decode(blob))
    for rel in RTOLS:
        tols = _field_tols(x, rel)
        blob = encode(x, f"dwt53:rtol={rel!r}")
        yield rec("dwt53", rel, len(blob), decode(blob), tols)
        blob = encode(x, f"dwt53:rtol={rel!r},zstd=3")
        yield rec("dwt53+zstd", rel, len(blob), decode(blob), tols)
        for name in ("zfpy", "sz3"):
            dec = np.empty_like(x)
            nbytes = 0
            try:
                for m, tol in enumerate(tols):
                    part = np.ascontiguousarray(x[:, m:m + 1])
                    blob = encode(part, f"{name}:tol={max(float(tol), 1e-300)!r}")
                    nbytes += len(blob)
                    dec[:, m:m + 1] = decode(blob)
            except Exception as e:  # noqa: BLE001 - a missing package is a result too
                yield {**base, "codec": name, "rel": rel, "error": str(e)}
                continue
            yield rec(name, rel, nbytes, dec, tols)
    for tau in TAUS:  # the seed's thresholds, relative to the largest field range
        t = float(tau * (x.max() - x.min()))
        blob = encode(x, f"dwt53:tau={t!r}")
        r = rec("dwt53-tau", tau, len(blob), decode(blob))
        r["tau"] = t
        yield r


def _best(fn, repeat):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def cpu_records(d: dict, repeat: int):
    import numba

    from forestpy.io.codecs import decode, encode

    x = d["batch"]
    reps = max(1, int(2e8 // x.nbytes))  # about 200 MB of input
    big = np.ascontiguousarray(np.concatenate([x] * reps)) if reps > 1 else x
    for spec in ("lossless", "fp16", "dwt53:rtol=1e-6", "dwt53:rtol=1e-6,zstd=3",
                 "dwt53:rtol=1e-3", "dwt53:tau=1e-3", "zfpy:tol=1e-6", "sz3:tol=1e-6"):
        try:
            encode(x[:8], spec)  # compile / import
            te, blob = _best(lambda spec=spec: encode(big, spec), repeat)
            td, _ = _best(lambda blob=blob: decode(blob), repeat)
        except Exception as e:  # noqa: BLE001
            yield {"kind": "cpu", "data": d["what"], "codec": spec, "error": str(e)}
            continue
        yield {"kind": "cpu", "data": d["what"], "codec": spec, "bytes_in": big.nbytes,
               "tiled": reps, "ratio_tiled": big.nbytes / len(blob),
               "encode_GBps": big.nbytes / te / 1e9,
               "decode_GBps": big.nbytes / td / 1e9, "threads": numba.get_num_threads(),
               "cpu": platform.processor() or platform.machine(),
               "cores": os.cpu_count()}


def gpu_records(d: dict, repeat: int, npatch: int, ncheck: int):
    import cupy as cp

    from forestpy.io.codecs import dwt53 as D
    from forestpy.io.codecs import dwt53_gpu as G
    from forestpy.io.codecs import dwt53_kernels as K

    x = d["batch"]
    reps = -(-npatch // x.shape[0])
    host = np.ascontiguousarray(np.concatenate([x] * reps)[:npatch])
    dev = cp.asarray(host)
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    for spec in ({"rtol": 1e-6}, {"rtol": 1e-3}, {"tau": 1e-3 * float(x.max() - x.min())},
                 {}):
        c = D.DWT53(**spec)
        nlev, tol, e0 = c.plan(host)
        G.encode(dev[:64], nlev, c.tau, e0, c.tries, tol)  # compile

        times, kern = [], []
        for _ in range(repeat):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            tk = {}
            fd, bd, fo, bo = G.encode(dev, nlev, c.tau, e0, c.tries, tol, timings=tk)
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
            kern.append(tk)
        te = min(times)
        tke = min(k.get("analyse_s", np.nan) + k.get("pack_s", np.nan) for k in kern)
        # the same bytes as the CPU for the first ncheck patches
        k = min(ncheck, npatch)
        cf, cb, cfo, cbo = D.encode_host(host[:k], nlev, c.tau, e0, c.tries, tol)
        same = (np.array_equal(fd[:int(fo[k])].view(np.uint8), cf.view(np.uint8))
                and np.array_equal(bd[:int(bo[k])], cb)
                and np.array_equal(fo[:k + 1], cfo) and np.array_equal(bo[:k + 1], cbo))
        # decode on the device (kernel time incl. the upload of the compressed streams)
        G.decode(fd, bd, fo, bo, host.shape, nlev)  # compile
        times, kern = [], []
        for _ in range(repeat):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            tk = {}
            out, errs = G.decode(fd, bd, fo, bo, host.shape, nlev, timings=tk)
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
            kern.append(tk)
        td = min(times)
        tkd = min(k.get("unpack_s", np.nan) for k in kern)
        ref = np.empty((k,) + host.shape[1:])
        e2 = np.zeros((k, 2), np.int64)
        K.decode_cpu(cf, cb, cfo.astype(np.int64), cbo.astype(np.int64), ref, nlev, e2)
        diff = float(np.max(np.abs(cp.asnumpy(out[:k]) - ref)))
        nbytes = fd.nbytes + bd.nbytes + fo.nbytes + bo.nbytes
        yield {"kind": "gpu", "data": d["what"], "device": name, "params": spec,
               "patches": npatch, "bytes_in": host.nbytes, "ratio": host.nbytes / nbytes,
               "encode_GBps": host.nbytes / te / 1e9, "decode_GBps": host.nbytes / td / 1e9,
               "encode_kernels_GBps": host.nbytes / tke / 1e9,
               "decode_kernel_GBps": host.nbytes / tkd / 1e9,
               "encode_s": te, "decode_s": td, "encode_kernels_s": tke,
               "decode_kernel_s": tkd, "same_bytes": bool(same),
               "max_decode_diff": diff, "decode_errors": int(np.count_nonzero(errs[:, 0])),
               "checked_patches": k, "threads_per_block": G.threads_per_block(
                   host.shape[3] + 1, host.shape[2] + 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", choices=("radial_dam", "okushiri", "merewether", "all"),
                    default="all")
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-rd", action="store_true", help="skip rate-distortion")
    ap.add_argument("--no-cpu", action="store_true", help="skip CPU throughput")
    ap.add_argument("--gpu", action="store_true", help="GPU throughput (needs CuPy)")
    ap.add_argument("--gpu-patches", type=int, default=200_000)
    ap.add_argument("--check-patches", type=int, default=2000)
    ap.add_argument("--okushiri-dx", type=float, default=None,
                    help="finest cell size of the Okushiri run (default 0.056, quick 0.112)")
    args = ap.parse_args(argv)
    datas = ("radial_dam", "okushiri", "merewether") if args.data == "all" else (args.data,)
    for data in datas:
        d = frames(data, args.quick, args.okushiri_dx)
        print(json.dumps({"kind": "frame", "data": data, "options": d["options"],
                          "t": d["t"], "shape": list(d["batch"].shape),
                          "field_names": d["fields"], "run_s": d["run_s"]}), flush=True)
        gens = []
        if not args.no_rd:
            gens.append(rd_records(d))
        if not args.no_cpu:
            gens.append(cpu_records(d, args.repeat))
        if args.gpu:
            gens.append(gpu_records(d, args.repeat, args.gpu_patches, args.check_patches))
        for gen in gens:
            for r in gen:
                print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
