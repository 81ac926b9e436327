"""Does the late work of the overlapped GPU step run beside its first launch?

One process, one GPU, no MPI.  The device side of the distributed ``Simulation``'s
overlapped step (``_step_two_launches``) is rebuilt on one rank's share of the scaling
problem (``benchmarks/scaling.py``: shallow_roe, walls, uniform 64x64 patches):

* first launch: the step kernel on the first ``first`` patches (a whole number of waves,
  as ``Layout.plan_two_launches`` chooses), into a new state array;
* late work: what arrives with the halo, on a rank whose last ``late`` patches need
  remote data: the copy of a pinned host buffer of boundary strips to the device and
  its scatter into those patches' rows (the unpack), their ghost fill (the ghost plan of
  those patches alone) and their physical boundaries;
* second launch: the step kernel on the other patches.

Variants, each timed ``--repeats`` times with CUDA events (median):
``nolate`` the two launches alone (the floor), ``onestream`` the late work queued on the
default stream between them (the step before 2026-11-24), ``side`` the late work on the
high-priority side stream as the step queues it now (``SideStream``).  ``hidden`` =
(onestream - side) / (onestream - nolate): the share of the late work's cost that the
side stream removes.  ``side_done_ms``: when the side stream's work was done, from the
start of the first launch, against ``first_done_ms``, when the first launch was.

    python benchmarks/side_stream.py --level 6 --mx 64 --late 64

Prints one JSON record.
"""

import argparse
import json
import os
import sys

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mx", type=int, default=64)
    ap.add_argument("--level", type=int, default=6)
    ap.add_argument("--late", type=int, default=64, help="patches that need remote data")
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args(argv)

    import cupy

    from forestpy import Domain, Simulation
    from forestpy.parallel.exchange import SideStream
    from forestpy.patches import apply_physical_bc, build_ghost_plan, fill_ghosts

    def qinit(x, y):
        h = np.where(np.hypot(x - 0.5, y - 0.5) < 0.25, 2.0, 1.0)
        return np.stack([h, np.zeros_like(x), np.zeros_like(x)])

    dx = 1.0 / (a.mx * 2**a.level)
    sim = Simulation("shallow_roe", qinit=qinit, domain=Domain((0.0, 0.0), (1.0, 1.0)),
                     bc="wall", params={"grav": 1.0}, mx=a.mx, min_level=a.level,
                     max_level=a.level, regrid_interval=0, dt_initial=0.3 * dx / 2.0,
                     t_final=1e9, backend="gpu")
    sim.run(max_steps=2)  # compiles the step and fill kernels
    be, geom, n = sim.backend, sim.geom, sim.geom.npatch
    wave = sim.solver.blocks_per_wave(sim.patch_arrays)
    late_ids = np.arange(n - a.late, n)
    early_n = n - a.late
    na = max(wave, (early_n // 2) // wave * wave) if wave else early_n // 2
    first = be.to_device(np.arange(na, dtype=np.int64))
    second = be.to_device(np.concatenate([late_ids, np.arange(na, early_n)]).astype(np.int64))
    plan = build_ghost_plan(sim.forest, geom, patches=late_ids).to(be)
    sides = [be.to_device(s[np.isin(s, late_ids)]) for s in
             (np.asarray(geom.on_side(k)) for k in range(4))]
    ny, nx = geom.shape
    b = geom.mbc
    ring = np.zeros((ny, nx), dtype=bool)  # the interior cells next to the sides
    ring[b:-b, b:-b] = True
    ring[2 * b:-2 * b, 2 * b:-2 * b] = False
    cells = be.to_device(np.flatnonzero(ring))
    meqn = sim.q.shape[1]
    import cupyx

    strips = cupyx.empty_pinned((a.late, meqn, int(ring.sum())), dtype=sim.q.dtype)
    strips[...] = 1.0
    rows = be.to_device(late_ids.astype(np.int64))
    eq = be.to_device(np.arange(meqn))

    q, aux, dt = sim.q, sim.aux, 0.3 * dx / 2.0
    q_new, cfl = q.copy(), cupy.zeros(n)
    edge = cupy.empty((n, 4, meqn, a.mx))
    out = dict(out=q_new, edge_out=edge, cfl_out=cfl)

    def late_work():
        flat = q.reshape(n, meqn, ny * nx)
        flat[rows[:, None, None], eq[None, :, None], cells[None, None, :]] = \
            be.to_device(strips)
        fill_ghosts(plan, q, sim.riemann.positive, backend=be)
        apply_physical_bc(q, geom, sim.bc, sim.riemann.wall_reflect, sim.t, aux,
                          backend=be, sides=sides)

    ev = [cupy.cuda.Event() for _ in range(4)]

    def once(variant, side):
        ev[0].record()
        side.follow_default()
        sim.vtable.step(q, aux, sim.patch_arrays, dt, rows=first, **out)
        ev[1].record()
        if variant != "nolate":
            with side.active():
                late_work()
                ev[2].record()
        side.join_default()
        sim.vtable.step(q, aux, sim.patch_arrays, dt, rows=second, **out)
        ev[3].record()
        ev[3].synchronize()
        got = [cupy.cuda.get_elapsed_time(ev[0], ev[k]) for k in (1, 3)]
        done = cupy.cuda.get_elapsed_time(ev[0], ev[2]) if variant != "nolate" else None
        return got[1], got[0], done

    streams = {"nolate": SideStream(False), "onestream": SideStream(False),
               "side": SideStream(True)}
    results = {v: [] for v in streams}
    for _ in range(3):  # warm-up: the late fill's kernels, the stream
        for v, s in streams.items():
            once(v, s)
    for _ in range(a.repeats):  # interleaved, so that a drift touches all alike
        for v, s in streams.items():
            results[v].append(once(v, s))
    med = {v: float(np.median([r[0] for r in rs])) for v, rs in results.items()}
    late_alone = []
    for _ in range(a.repeats):
        ev[0].record()
        late_work()
        ev[1].record()
        ev[1].synchronize()
        late_alone.append(cupy.cuda.get_elapsed_time(ev[0], ev[1]))
    rec = dict(
        bench="side_stream", device=be.device_name, mx=a.mx, level=a.level, patches=n,
        late=a.late, first_launch_patches=na, wave=wave, repeats=a.repeats,
        ms=med, ms_repeats={v: [r[0] for r in rs] for v, rs in results.items()},
        late_work_alone_ms=float(np.median(late_alone)),
        first_done_ms=float(np.median([r[1] for r in results["side"]])),
        side_done_ms=float(np.median([r[2] for r in results["side"]])),
        onestream_late_done_ms=float(np.median([r[2] for r in results["onestream"]])),
        hidden=(med["onestream"] - med["side"]) / (med["onestream"] - med["nolate"]),
        host=os.uname().nodename, python=sys.version.split()[0],
    )
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
