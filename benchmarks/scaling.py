"""Weak and strong scaling of forestpy.parallel (MPI ranks, CPU or one GPU per rank),
with and without communication overlap.

Launch with mpirun; rank 0 prints one JSON record per run (and appends it to --out)::

    mpirun -n 2 python benchmarks/scaling.py --mode weak --mx 32 --level 3 --trees 1
    mpirun -n 2 python benchmarks/scaling.py --backend gpu --mx 64 --level 6 --trees 1 \\
        --sizes 1,2 --mode weak,strong --overlap off,on

Problem: a shallow-water dam break (shallow_roe, walls) on a uniform grid of
``trees_x x 1`` unit trees at ``level`` with ``mx x mx`` cells per patch, no regrid.
``--mode weak``: ``trees`` trees per rank (cells per rank fixed); ``--mode strong``:
``trees`` trees in all.  ``--sizes``: run on the first k ranks of the job for each k
(the others wait), so one launch measures 1 and 2 GPUs with the kernels compiled once.

One rank runs the plain serial :class:`~forestpy.Simulation` (the reference); with
several ranks one simulation goes on through ``--repeats`` rounds of timed segments of
``--steps`` steps, one segment per overlap setting in each round (off, on, off, on,
...), so that a drift of the machine touches both settings alike.  ``--overlap`` takes
off, on, onestream and single: "on" is the default step (on the GPU two patch-list
launches, see ``Simulation._step_overlapped``, the halo unpack and the late
patches' ghost fill on a second, high-priority stream beside the first launch),
"onestream" the same with that work on the default stream, queued after the first
launch (the step before 2026-11-24's side stream), "single" the overlap without the two
launches (one launch for the early patches, one for the late ones).
Per segment: the wall time per step with timers that do not synchronise the device
(what a user sees; on the GPU the overlapped exchange runs while the early patches'
kernel runs), and the phases from a second segment whose timers synchronise the device
per phase (on the CPU the two are one segment), the largest over ranks: exchange (halo
and edge-flux exchanges: post + pack + wait + unpack), exchange.pack, exchange.wait,
exchange.unpack, ghost_fill, step, time_sync, cfl_check, and the two costs that the
overlap adds, inside ghost_fill and step: ghost_fill.late (the second fill pass, of the
late patches) and step.late (their kernel, with the gather and scatter of their rows;
with the GPU's two launches: step.second, the late patches and half of the early ones).
Per run: ``s_per_step`` is the median over the repeats (``s_per_step_repeats`` each,
``s_per_step_min``/``_max``, ``s_per_step_spread`` = (max - min) / median);
``phase_s_per_step`` the median of each phase (``phase_s_per_step_repeats`` each).  A
weak run records ``efficiency`` = s_per_step on 1 rank / s_per_step here and a strong run
``speedup``, when the 1-rank run was in the same launch.  An overlap-on run records
``exchange_hidden`` = (s_per_step off - s_per_step on) / exchange of the off run, from
the medians (1 when overlap hides the whole exchange), ``exchange_hidden_repeats`` the
same per round (its two adjacent segments, over the median exchange), and
``overlap_extra_s_per_step`` = ghost_fill.late + step.late, and ``overlap_variant``.
With "none" among the settings (put it last: it leaves the halo stale), an overlapped
run also records ``halo_cost_s_per_step`` = s_per_step(off) - s_per_step(none), the
halo exchange's cost as wall time, and ``exchange_hidden_wall`` = (s_per_step(off) -
s_per_step(on)) / that cost (per round: ``exchange_hidden_wall_repeats``): the share of
the exchange's wall-time cost that the overlap removes, with its own added costs
(second fill pass, two launches) counted against it.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

PHASES = ("exchange", "exchange.pack", "exchange.wait", "exchange.unpack", "ghost_fill",
          "step", "time_sync", "cfl_check", "ghost_fill.late", "step.late", "step.second")


def _list(kind):
    def parse(text):
        return [kind(v) for v in text.split(",") if v]

    return parse


def build(a, comm, mode):
    from forestpy import Domain, Simulation

    ntx = a.trees * comm.size if mode == "weak" else a.trees

    def qinit(x, y):
        h = np.where(np.hypot(x - 0.5 * ntx, y - 0.5) < 0.25, 2.0, 1.0)
        return np.stack([h, np.zeros_like(x), np.zeros_like(x)])

    dx = 1.0 / (a.mx * 2**a.level)
    # one rank: the plain serial Simulation, the reference of the scaling
    return Simulation(
        "shallow_roe", qinit=qinit, comm=comm if comm.size > 1 else None,
        domain=Domain((0.0, 0.0), (float(ntx), 1.0), ntrees=(ntx, 1)),
        bc="wall", params={"grav": 1.0}, mx=a.mx, min_level=a.level, max_level=a.level,
        regrid_interval=0, dt_initial=0.3 * dx / 2.0, cfl_desired=0.9, t_final=1e9,
        backend=a.backend,
    )


def timed(sim, comm, steps, sync):
    """Seconds per step of ``steps`` steps; the per-phase seconds (max over ranks)."""
    from mpi4py import MPI

    from forestpy.timers import Timers

    be = sim.backend
    sim.timers = Timers(sync=be.synchronize if sync else None)
    be.synchronize()
    comm.Barrier()
    t0 = time.perf_counter()
    sim.run(max_steps=steps)
    be.synchronize()
    comm.Barrier()
    wall = (time.perf_counter() - t0) / steps
    mine = np.array([sim.timers.seconds.get(p, 0.0) / steps for p in PHASES])
    worst = np.empty_like(mine)
    comm.Allreduce(mine, worst, op=MPI.MAX)
    return wall, {p: float(v) for p, v in zip(PHASES, worst)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", type=_list(str), default=["weak"], help="weak,strong")
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--mx", type=int, default=32)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--trees", type=int, default=1)
    ap.add_argument("--steps", type=int, default=50, help="steps per timed segment")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed segments per run, overlap settings interleaved")
    ap.add_argument("--overlap", type=_list(str), default=["off", "on"],
                    help="off,on,onestream,single,none")
    ap.add_argument("--sizes", type=_list(int), default=None,
                    help="run on the first k ranks for each k (default: all ranks)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    sizes = a.sizes or [world.size]
    if a.trees < 1 or a.steps < 1 or a.repeats < 1 or any(
            not 1 <= k <= world.size for k in sizes):
        raise SystemExit("--trees, --steps, --repeats must be positive and --sizes "
                         "within 1..ranks")
    if any(m not in ("weak", "strong") for m in a.mode) or any(
            o not in ("on", "off", "onestream", "single", "none") for o in a.overlap):
        raise SystemExit("--mode takes weak,strong and --overlap off,on,onestream,single,none")
    device = None
    if a.backend == "gpu":
        from forestpy.parallel import select_device

        device = select_device(world)
    one_rank = {}  # mode -> s_per_step on one rank
    for k in sizes:
        comm = world.Split(0 if world.rank < k else MPI.UNDEFINED, world.rank)
        for mode in a.mode:
            if k == 1 and mode == "strong" and "weak" in a.mode:
                continue  # the same problem as weak on one rank
            sim = build(a, comm, mode) if comm != MPI.COMM_NULL else None
            settings = a.overlap if k > 1 else ["off"]
            segments = {ov: [] for ov in settings}
            for _ in range(a.repeats if sim is not None else 0):
                for ov in settings:
                    segments[ov].append(segment(a, sim, comm, ov))
            off = None
            none = [w for w, _ in segments.get("none", [])]
            for ov in settings:
                rec = None
                if sim is not None:
                    rec = record(a, sim, comm, mode, ov != "off", device, segments[ov])
                    rec["overlap_variant"] = ov
                    if k == 1:
                        one_rank["weak"] = one_rank["strong"] = rec["s_per_step"]
                    elif mode in one_rank:
                        key = "efficiency" if mode == "weak" else "speedup"
                        rec[key] = one_rank[mode] / rec["s_per_step"]
                    if ov == "off":
                        off = rec
                    elif ov == "none":
                        pass
                    elif off is not None and none:
                        # the halo exchange's cost as wall time, T(off) - T(none), and
                        # the share of it the overlap removes
                        t_none = float(np.median(none))
                        rec["halo_cost_s_per_step"] = off["s_per_step"] - t_none
                        rec["exchange_hidden_wall"] = (
                            (off["s_per_step"] - rec["s_per_step"]) / (off["s_per_step"] - t_none))
                        rec["exchange_hidden_wall_repeats"] = [
                            (w_off - w_on) / (w_off - w_none) for (w_off, _), (w_on, _), w_none
                            in zip(segments["off"], segments[ov], none)]
                    if ov not in ("off", "none") and off is not None and \
                            off["phase_s_per_step"]["exchange"] > 0:
                        rec["exchange_hidden"] = (off["s_per_step"] - rec["s_per_step"]) / \
                            off["phase_s_per_step"]["exchange"]
                        rec["exchange_hidden_repeats"] = [
                            (w_off - w_on) / off["phase_s_per_step"]["exchange"]
                            for (w_off, _), (w_on, _) in zip(segments["off"], segments[ov])]
                world.Barrier()
                if world.rank == 0:
                    line = json.dumps(rec)
                    print(line, flush=True)
                    if a.out:
                        with open(a.out, "a") as f:
                            f.write(line + "\n")
            del sim
            if a.backend == "gpu" and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
                import cupy

                cupy.get_default_memory_pool().free_all_blocks()
        if comm != MPI.COMM_NULL:
            comm.Free()


def segment(a, sim, comm, overlap):
    """One timed segment of ``sim`` (which goes on) with overlap ``"off"``, ``"on"``,
    ``"onestream"`` (on, the late work on the default stream), ``"single"`` (on, without
    the GPU's two patch-list launches: one early launch and one of the late patches) or
    ``"none"`` (off, and the halo exchange skipped: the run without its communication,
    a timing reference whose state is wrong): seconds per step, the per-phase seconds."""
    if comm.size > 1:
        sim.overlap = overlap in ("on", "onestream", "single")
        sim.__dict__.pop("_rows_ok", None)  # "on": decided from the backend and the step
        sim.exchange.__dict__.pop("halo", None)
        sim.__dict__.pop("_side", None)  # "on": a side stream on a real GPU
        if overlap == "single":
            sim._rows_ok = False
        if overlap == "onestream":
            from forestpy.parallel.exchange import SideStream

            sim._side = SideStream(False)  # its work stays on the default stream
        if overlap == "none":
            ex = sim.exchange
            halo = type(ex).halo

            def skip_halo(arr, plan, timers, send_arr=None):
                if plan is not sim.layout.q_exchange:
                    halo(ex, arr, plan, timers, send_arr)

            ex.halo = skip_halo
    sim.run(max_steps=2)  # compile, first exchange; after a switch, the new mode's buffers
    wall, phases = timed(sim, comm, a.steps, sync=False)
    if a.backend == "gpu":  # the split needs synchronising timers: a second segment
        _, phases = timed(sim, comm, a.steps, sync=True)
    return wall, phases


def record(a, sim, comm, mode, overlap, device, segments):
    """The JSON record of one run from its timed segments (medians over them)."""
    from mpi4py import MPI

    walls = [w for w, _ in segments]
    wall = float(np.median(walls))
    phases = {p: float(np.median([ph[p] for _, ph in segments])) for p in PHASES}
    gpu = a.backend == "gpu"
    cells = sim.geom.npatch * a.mx * a.mx
    late = sim.layout.late.n if comm.size > 1 else 0
    # per-rank memory: patch rows held (owned + halo in a distributed run), bytes of
    # the state arrays, and on a GPU the device memory in use (CuPy's pool)
    state = sum(int(getattr(sim, k).nbytes) for k in ("q", "aux", "aux_setaux"))
    pool = 0
    if gpu and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        import cupy

        pool = int(cupy.get_default_memory_pool().used_bytes())
    nmax = comm.allreduce(max(sim.layout.nown, 1) if comm.size > 1 else 1, op=MPI.MAX)
    return dict(
        bench="scaling", mode=mode, backend=a.backend, ranks=comm.size,
        mpi=MPI.Get_library_version().splitlines()[0].strip().rstrip("\x00"),
        device=device, mx=a.mx, level=a.level, trees_x=int(sim.domain.ntrees[0]),
        npatch=int(sim.geom.npatch), cells=int(cells), cells_per_rank=int(cells // comm.size),
        steps=a.steps, overlap=overlap, s_per_step=wall, cell_updates_per_s=cells / wall,
        repeats=len(walls), s_per_step_repeats=walls, s_per_step_min=min(walls),
        s_per_step_max=max(walls), s_per_step_spread=(max(walls) - min(walls)) / wall,
        phase_s_per_step=phases, phases_synchronised=gpu,
        phase_s_per_step_repeats={p: [ph[p] for _, ph in segments] for p in PHASES},
        overlap_extra_s_per_step=phases["ghost_fill.late"] + phases["step.late"],
        distributed=comm.size > 1,
        halo_patches_per_rank=int(comm.allreduce(len(sim.layout.halo), op=MPI.MAX)),
        late_patches_per_rank=int(comm.allreduce(late, op=MPI.MAX)),
        first_launch_patches=int(len(sim.layout.first_rows)) if comm.size > 1 else None,
        late_fraction=float(comm.allreduce(late, op=MPI.MAX)) / nmax,
        patch_rows_per_rank=comm.allgather(int(sim.q.shape[0])),
        state_bytes_per_rank=comm.allgather(state),
        gpu_pool_bytes_per_rank=comm.allgather(pool) if pool else None,
        host=os.uname().nodename, python=sys.version.split()[0],
    )


if __name__ == "__main__":
    main()
