"""Time per regrid of a distributed adaptive run, repartition and migration included
(issue 36), on 1..N MPI ranks (CPU, or one GPU per rank).

Launch with mpirun; rank 0 prints one JSON record per rank count (and appends it to
--out)::

    mpirun -n 2 python benchmarks/regrid_mpi.py --sizes 1,2
    mpirun -n 4 python benchmarks/regrid_mpi.py --backend gpu --mx 32 --levels 3,7 \\
        --trees 2 --sizes 1,2,4 --steps 40

Problem: an adaptive radial dam break (shallow_roe, walls) on ``trees x 1`` unit trees
(the dam off the centre, so that the split between the ranks moves as the front grows),
levels ``--levels lo,hi`` (the undivided-difference flags), one time step for all levels
(``subcycle=False``), a regrid every ``--interval`` steps; the forest follows the
circular front, so most regrids change it and the leaves change owner.  Each rank count
``k`` of ``--sizes`` runs on the first k ranks (the others wait): k = 1 is the plain
serial :class:`~forestpy.Simulation`, k > 1 one built distributed (``comm=``), whose
regrids repartition the new forest (equal weights per leaf) and migrate the old patches
to their new owners.  ``--warm`` steps (compilation, the first regrids) are run first,
then ``--steps`` steps are timed with timers that synchronise the device per phase
(GPU), so each phase is charged its own device time.

Per record, seconds per regrid call (the largest over the ranks; ``regrid_calls`` calls
in the timed steps, ``regrid_changes`` of them changed the forest):

* ``regrid_s``: the whole call (its ghost fill included), timed around ``Simulation.
  regrid``;
* ``tagging_s`` (criterion, the device test, the flags gathered), ``forest_s`` (refine,
  coarsen, balance on every rank), ``repartition_weights_s`` (``partition_weights``),
  ``repartition_partition_s`` (``Forest.partition``: the new owners), ``migration_s``
  (the old patches each new owner needs: their ids, the schedule and the point-to-point
  exchange of their data; the partition it computes excluded), ``transfer_s`` (old
  patches -> new ones), ``plans_s`` (the new layout: ghost and time-sync plans, halo,
  exchange schedules, early/late split; the partition excluded), ``aux_s``
  (``setaux`` of the local patches), ``ghost_fill_s`` (the fill before the tagging and
  the transfer) and ``other_s`` (the rest of the call);
* ``migrated_patches`` and ``migrated_bytes`` per regrid call: old patches received by
  their new owners (summed over the ranks) and the bytes the ranks sent for them (the
  halo exchange of the regrid's ghost fill not counted).

``--rounds`` (default 2) repeats the sizes: the first round also compiles what the warm
steps did not reach (a record per round, ``round`` in it; take the last).

Self-check: every record holds ``max_diff_vs_1rank``, the largest difference between the
final state gathered to rank 0 and the 1-rank run's (0: bitwise; the 1-rank run must be
in the same launch, ``--sizes`` starting with 1), and with ``--cpu-check`` (GPU)
``max_diff_vs_cpu``, against a serial CPU run of the same steps on rank 0.

``--profile-layout STEM``: cProfile of the new layouts (``Layout.partitioned``) on each
rank, written to ``STEM_rank<r>.txt`` (docs/mpi.md, "A cheaper new layout").
"""

import argparse
import json
import os
import sys
import time

import numpy as np

SUBPHASES = ("tagging", "forest", "migrate", "transfer", "plans", "aux", "shoreline")


def _list(kind):
    def parse(text):
        return [kind(v) for v in text.split(",") if v]

    return parse


def build(a, comm, backend):
    """The adaptive radial dam on ``comm``'s ranks (None: serial)."""
    from forestpy import Domain, Simulation

    ntx = a.trees

    def qinit(x, y):
        h = np.where(np.hypot(x - 0.35 * ntx, y - 0.4) < 0.2, 2.0, 1.0)
        return np.stack([h, np.zeros_like(x), np.zeros_like(x)])

    lo, hi = a.levels
    dx = 1.0 / (a.mx * 2**hi)
    return Simulation(
        "shallow_roe", qinit=qinit, comm=comm,
        domain=Domain((0.0, 0.0), (float(ntx), 1.0), ntrees=(ntx, 1)),
        bc="wall", params={"grav": 1.0}, mx=a.mx, min_level=lo, max_level=hi,
        regrid_interval=a.interval, subcycle=False, dt_initial=0.3 * dx / 2.0,
        cfl_desired=0.9, t_final=1e9, backend=backend, refine_threshold=a.threshold,
    )


class RegridClock:
    """Times the regrid calls of ``sim`` and the repartition inside them: wraps
    ``sim.regrid``, ``sim.partition_weights`` and ``Forest.partition`` (restored by
    :meth:`close`).  A repartition's seconds are charged to the regrid sub-phase open
    when it runs (``plans`` or ``migrate``), so that they can be taken out of it."""

    def __init__(self, sim, sync):
        from forestpy.forest import Forest

        self.sim, self.sync = sim, sync
        self.calls, self.wall = 0, 0.0
        self.bytes = self.migrated = 0
        self.inside = {"weights": {}, "partition": {}}
        self._forest_cls, self._partition = Forest, Forest.partition
        self._weights = sim.partition_weights
        self._regrid, self._migrate = sim.regrid, sim._migrate
        clock = self

        def partition(forest, nparts, weights=None):
            return clock._timed("partition", clock._partition, forest, nparts, weights)

        Forest.partition = partition
        sim.partition_weights = lambda forest: self._timed("weights", self._weights, forest)
        sim.regrid = self.regrid
        sim._migrate = self.migrate

    def _timed(self, kind, fn, *args):
        opened = [p for p, _ in self.sim.timers._open if p.startswith("regrid.")]
        where = opened[-1].split(".", 1)[1] if opened else "outside"
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            d = self.inside[kind]
            d[where] = d.get(where, 0.0) + time.perf_counter() - t0

    def regrid(self, *args, **kw):
        self.sync()
        t0 = time.perf_counter()
        try:
            return self._regrid(*args, **kw)
        finally:
            self.sync()
            self.wall += time.perf_counter() - t0
            self.calls += 1

    def migrate(self, *args, **kw):
        ex = self.sim.exchange
        b0, m0 = ex.bytes, ex.migrated
        try:
            return self._migrate(*args, **kw)
        finally:
            self.bytes += ex.bytes - b0
            self.migrated += ex.migrated - m0

    def reset(self):
        self.calls, self.wall, self.bytes, self.migrated = 0, 0.0, 0, 0
        self.inside = {"weights": {}, "partition": {}}

    def close(self):
        self._forest_cls.partition = self._partition
        del self.sim.partition_weights, self.sim.regrid, self.sim._migrate


def final_state(sim):
    """The final state on rank 0 (host array in global patch order; None elsewhere)."""
    with sim.root_view(0) as root:
        return None if root is None else np.array(sim.backend.to_host(root.q), copy=True)


def interior_diff(a, b, mbc):
    if a.shape != b.shape:
        return float("inf")
    s = (slice(None), slice(None), slice(mbc, -mbc), slice(mbc, -mbc))
    return float(np.abs(a[s] - b[s]).max())


def run_size(a, comm, device):
    """The timed run on ``comm`` (its size > 1: distributed); returns (record on rank 0
    or None, final state on rank 0)."""
    from mpi4py import MPI

    from forestpy.timers import Timers

    k = comm.size
    sim = build(a, comm if k > 1 else None, a.backend)
    be = sim.backend
    sync = be.synchronize if be.is_gpu else (lambda: None)
    clock = RegridClock(sim, sync)
    try:
        sim.run(max_steps=a.warm)
        sim.timers = Timers(sync=be.synchronize if be.is_gpu else None)
        clock.reset()
        regrids0 = sim.regrids
        be.synchronize()
        comm.Barrier()
        t0 = time.perf_counter()
        sim.run(max_steps=a.steps)
        be.synchronize()
        comm.Barrier()
        wall = time.perf_counter() - t0
    finally:
        clock.close()
    calls = max(clock.calls, 1)
    sec = sim.timers.seconds
    w, p = clock.inside["weights"], clock.inside["partition"]

    def sub(name):
        return sec.get(f"regrid.{name}", 0.0)

    repart = {ph: w.get(ph, 0.0) + p.get(ph, 0.0) for ph in ("plans", "migrate")}
    mine = {
        "regrid_s": clock.wall,
        "tagging_s": sub("tagging"),
        "forest_s": sub("forest"),
        "repartition_weights_s": sum(w.values()),
        "repartition_partition_s": sum(p.values()),
        "migration_s": sub("migrate") - repart["migrate"],
        "transfer_s": sub("transfer"),
        "plans_s": sub("plans") - repart["plans"],
        "aux_s": sub("aux"),
        "shoreline_s": sub("shoreline"),
    }
    # the ghost fill a regrid does (before the tagging and the transfer): the whole
    # call minus its own (exclusive) time and the sub-phases outside it
    mine["ghost_fill_s"] = max(0.0, clock.wall - sec.get("regrid", 0.0))
    mine["other_s"] = max(0.0, clock.wall - mine["ghost_fill_s"] - sum(
        v for key, v in mine.items() if key not in ("regrid_s", "ghost_fill_s")))
    names = list(mine)
    worst = np.empty(len(names))
    comm.Allreduce(np.array([mine[n] for n in names]) / calls, worst, op=MPI.MAX)
    moved = comm.allreduce(clock.bytes)
    state = final_state(sim)
    rec = None
    if comm.rank == 0:
        cells = sim.geom.npatch * a.mx * a.mx
        rec = dict(
            bench="regrid_mpi", backend=a.backend, ranks=k, device=device,
            mpi=MPI.Get_library_version().splitlines()[0].strip().rstrip("\x00"),
            mx=a.mx, levels=list(a.levels), trees_x=a.trees, interval=a.interval,
            threshold=a.threshold, warm_steps=a.warm, steps=a.steps,
            npatch_final=int(sim.geom.npatch), cells_final=int(cells),
            patches_per_level=sim.patches_per_level(),
            regrid_calls=clock.calls, regrid_changes=int(sim.regrids - regrids0),
            wall_s=wall, s_per_step=wall / a.steps,
            regrid_share_of_wall=clock.wall / wall if wall > 0 else None,
            **{n: float(v) for n, v in zip(names, worst)},
            migrated_patches=clock.migrated / calls, migrated_bytes=moved / calls,
            host=os.uname().nodename, python=sys.version.split()[0],
        )
    del sim
    return rec, state


def profile_layout(stem, skip):
    """cProfile every ``Layout.partitioned`` call after the first ``skip`` (compilation)
    on this rank; the statistics (cumulative and internal time) go to
    ``stem_rank<r>.txt`` at exit."""
    import atexit
    import cProfile
    import io
    import pstats

    from mpi4py import MPI

    from forestpy.parallel.layout import Layout

    prof, calls = cProfile.Profile(), [0]
    build = Layout.partitioned.__func__

    def partitioned(cls, *args, **kw):
        calls[0] += 1
        if calls[0] <= skip:
            return build(cls, *args, **kw)
        prof.enable()
        try:
            return build(cls, *args, **kw)
        finally:
            prof.disable()

    Layout.partitioned = classmethod(partitioned)

    def write():
        out = io.StringIO()
        out.write(f"Layout.partitioned calls: {calls[0]}, profiled: {max(calls[0] - skip, 0)}\n")
        for key in ("cumulative", "tottime"):
            pstats.Stats(prof, stream=out).sort_stats(key).print_stats(25)
        with open(f"{stem}_rank{MPI.COMM_WORLD.rank}.txt", "w") as f:
            f.write(out.getvalue())

    atexit.register(write)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--mx", type=int, default=16)
    ap.add_argument("--levels", type=_list(int), default=[2, 5], help="lo,hi")
    ap.add_argument("--trees", type=int, default=1)
    ap.add_argument("--interval", type=int, default=4, help="steps between regrids")
    ap.add_argument("--threshold", type=float, default=0.05, help="refine_threshold")
    ap.add_argument("--warm", type=int, default=8, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=40, help="timed steps")
    ap.add_argument("--sizes", type=_list(int), default=None,
                    help="run on the first k ranks for each k (default: 1 and all ranks)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds over --sizes (a record each; the first compiles)")
    ap.add_argument("--cpu-check", action="store_true",
                    help="GPU: compare with a serial CPU run of the same steps (rank 0)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile-layout", default=None, metavar="STEM",
                    help="cProfile Layout.partitioned (after its first --skip-layouts "
                         "calls) on each rank; writes STEM_rank<r>.txt")
    ap.add_argument("--skip-layouts", type=int, default=4)
    a = ap.parse_args(argv)
    if a.profile_layout:
        profile_layout(a.profile_layout, a.skip_layouts)

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    sizes = a.sizes or sorted({1, world.size})
    if (len(a.levels) != 2 or not 0 <= a.levels[0] <= a.levels[1] or a.trees < 1
            or a.interval < 1 or a.steps < 1 or a.warm < 0 or a.rounds < 1
            or any(not 1 <= k <= world.size for k in sizes)):
        raise SystemExit("--levels lo,hi with 0 <= lo <= hi; --trees, --interval, --steps "
                         "positive; --sizes within 1..ranks")
    device = None
    if a.backend == "gpu" and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        from forestpy.parallel import select_device

        device = select_device(world)
    reference = cpu = None
    if a.cpu_check and a.backend == "gpu" and world.rank == 0:
        ref = build(a, None, "cpu")
        ref.run(max_steps=a.warm + a.steps)
        cpu = np.array(ref.q, copy=True)
        del ref
    for rnd, k in ((r, k) for r in range(a.rounds) for k in sizes):
        comm = world.Split(0 if world.rank < k else MPI.UNDEFINED, world.rank)
        rec = state = None
        if comm != MPI.COMM_NULL:
            rec, state = run_size(a, comm, device)
        if world.rank == 0:
            mbc = 2
            rec["round"] = rnd
            if k == 1:
                reference = state
            rec["max_diff_vs_1rank"] = (None if reference is None
                                        else interior_diff(state, reference, mbc))
            if cpu is not None:
                rec["max_diff_vs_cpu"] = interior_diff(state, cpu, mbc)
            line = json.dumps(rec)
            print(line, flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(line + "\n")
        if comm != MPI.COMM_NULL:
            comm.Free()
        if a.backend == "gpu" and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
            import cupy

            cupy.get_default_memory_pool().free_all_blocks()
        world.Barrier()


if __name__ == "__main__":
    main()
