"""The CPU and the GPU backend stepped side by side on one demo: where do they part?

Each step starts both backends from the CPU's state (``--mode same-start``, the default:
the differences of one step) or lets each run on from its own state (``--mode free``:
how a difference grows), with the CPU's time steps and regrids.  ``--stages`` first
compares one step stage by stage (aux, ghost fill, step kernel, Courant numbers, edge
fluxes, the whole step).  One JSON record per step where the states differ (or every
``--every`` steps), with the worst cell.  On a machine without a GPU it runs in the CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``; small cases only: it is slow).

    python benchmarks/gpu_lockstep.py bowl_radial --steps 330 [--mode free] [--stages]
    python benchmarks/gpu_lockstep.py merewether --set min_level=1 --stages --steps 5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _interior(a, b):
    return a[:, :, b:-b, b:-b]


def _diff(tag, a, g, b):
    if a.ndim == 4:
        a, g = _interior(a, b), _interior(g, b)
    same = np.array_equal(a, g, equal_nan=True)
    rec = {"stage": tag, "bitwise": bool(same)}
    if not same:
        d = np.abs(a - g)
        where = np.unravel_index(np.nanargmax(d), d.shape)
        rec.update(max_abs=float(d[where]), count=int((d > 0).sum()),
                   at=[int(v) for v in where], cpu=float(a[where]), gpu=float(g[where]))
    return rec


def stages(cpu, gpu):
    """One step compared stage by stage.  Each stage starts both backends from the CPU's
    output of the stage before, so a record shows what that stage alone changes."""
    from forestpy.simulation import copy_ghost_frame, takes_context

    b, host, dev = cpu.mbc, gpu.backend.to_host, gpu.backend.to_device
    dt = cpu.dt
    out = [_diff("aux", cpu.aux, host(gpu.aux), b)]
    gpu.q[...] = dev(cpu.q)
    q0 = cpu.q.copy()
    cpu.fill_ghosts()
    gpu.fill_ghosts()
    out.append(_diff("ghost fill", cpu.q, host(gpu.q), b))
    gpu.q[...] = dev(cpu.q)
    if cpu.vtable.b4step is not None:
        cpu.vtable.b4step(cpu, dt)
        gpu.vtable.b4step(gpu, dt)
        out.append(_diff("b4step", cpu.q, host(gpu.q), b))
        gpu.q[...] = dev(cpu.q)
    qc, cc, ec = cpu._step_all(dt)
    qg, cg, eg = gpu._step_all(dt)
    out += [_diff("step kernel", qc, host(qg), b), _diff("courant", cc, host(cg), b),
            _diff("edge fluxes", ec, host(eg), b)]
    qg[...], eg[...] = dev(qc), dev(ec)
    if cpu.vtable.time_sync is not None:
        cpu.vtable.time_sync(cpu.layout.sync_plan, cpu.q, qc, cpu.aux, ec, dt)
        gpu.vtable.time_sync(gpu.layout.sync_plan, gpu.q, qg, gpu.aux, eg, dt)
        out.append(_diff("time sync", qc, host(qg), b))
        qg[...] = dev(qc)
    if cpu.vtable.src2 is not None:
        for s, qn in ((cpu, qc), (gpu, qg)):
            own, src2 = s._owned, s.vtable.src2
            copy_ghost_frame(own(s.q), own(qn), s.mbc, s.backend)
            if takes_context(src2):
                src2.apply(own(qn), own(s.aux), s.hook_context(s.t, dt))
            else:
                x, y = s.centers
                src2(own(qn), own(s.aux), own(x), own(y), s.t, dt)
        out.append(_diff("sources", qc, host(qg), b))
    cpu.q[...] = q0
    gpu.q[...] = dev(q0)
    cpu.step(dt)
    gpu.step(dt)
    out.append(_diff("whole step", cpu.q, host(gpu.q), b))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--mode", choices=("same-start", "free"), default="same-start")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--stages-at", type=int, default=0, metavar="K",
                    help="with --stages: step both in lockstep to step K first")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="demo option (int or float values)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks.gpu_parity import load

    kw = {"subcycle": False}
    for item in args.set:
        k, v = item.split("=", 1)
        kw[k] = float(v) if "." in v or "e" in v else int(v)
    demo = load(args.demo)
    cpu = demo.setup(backend="cpu", **kw)
    gpu = demo.setup(backend="gpu", **kw)
    for s in (cpu, gpu):
        s._warm_up()
        s.dt = s._estimate_dt()
    if args.stages and not args.stages_at:
        for rec in stages(cpu, gpu):
            print(json.dumps(rec), flush=True)
        return
    b, host, dev = cpu.mbc, gpu.backend.to_host, gpu.backend.to_device
    free = args.mode == "free"
    for k in range(args.steps):
        if cpu.t >= cpu.t_final - 1e-12:
            break
        dt = min(cpu.dt, cpu.dt_max, cpu.t_final - cpu.t)
        if args.stages and k == args.stages_at:
            gpu.q[...] = dev(cpu.q)
            gpu.t, cpu.dt = cpu.t, dt
            for rec in stages(cpu, gpu):
                print(json.dumps({"step": k, **rec}), flush=True)
            return
        if not free:
            gpu.q[...] = dev(cpu.q)
            gpu.t = cpu.t
        acc = (cpu.step(dt), gpu.step(dt))
        a, g = _interior(cpu.q, b), _interior(host(gpu.q), b)
        scale = np.maximum(np.abs(a).max(axis=(0, 2, 3)), 1e-300)
        rel = np.abs(a - g).max(axis=(0, 2, 3)) / scale
        if rel.max() > 0 or acc[0] != acc[1] or k % args.every == 0:
            print(json.dumps({"step": k, "t": cpu.t, "dt": dt, "accepted_courant": acc,
                              "max_rel_diff_per_field": rel.tolist()}), flush=True)
        courant = acc[0][1]
        if courant > 0:
            cpu.dt = min(cpu.dt_max, dt * cpu.cfl_desired / courant)
        if acc[0][0] and cpu.regrid_interval and cpu.steps % cpu.regrid_interval == 0 \
                and cpu.max_level > cpu.min_level:
            if not free:
                gpu.q[...] = dev(cpu.q)
            cpu.regrid()
            gpu.regrid()
            if gpu.forest != cpu.forest:
                print(json.dumps({"step": k, "forests_differ_after_regrid": True}))
                break
            after = [_diff("regrid q", cpu.q, host(gpu.q), b),
                     _diff("regrid aux", cpu.aux, host(gpu.aux), b)]
            if not all(r["bitwise"] for r in after):
                print(json.dumps({"step": k, "after_regrid": after}), flush=True)


if __name__ == "__main__":
    main()
