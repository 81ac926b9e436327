"""A :class:`~forestpy.Simulation` whose time steps are shared by MPI ranks.

Metadata replicated, step work distributed: every rank holds the whole forest and
builds the same global ghost and time-sync plans; the leaves are split into contiguous
Morton ranges (:meth:`Forest.partition`) and each rank steps only the patches it owns.
Before the ghost fill each rank receives, from their owners, the patches that its
owned ghost cells read (the "halo", one patch deep: every ghost source is an interior
cell); after the step it receives the edge fluxes of remote fine patches that its
coarse patches' time sync needs.  The Courant number and the state checks are
Allreduces.  Patch arrays keep the global patch indexing on every rank (rows of patches
neither owned nor in the halo hold stale values and are never read by the step); the
whole state is gathered (Allgatherv, in global patch order) only where the serial code
needs all of it: a regrid that changes the forest, totals, samples, checkpoints and
callbacks.  Totals are computed on the gathered state, so they are bitwise those of the
serial run.  See docs/mpi.md for the design, what is not done yet and measurements.

Usage (same demo scripts, launched with ``mpirun -n 4 python script.py``)::

    from forestpy.parallel import distribute
    sim = distribute(setup(max_level=5))   # or DistributedSimulation(..., comm=...)
    sim.run()
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from forestpy.patches.boundary import apply_physical_bc
from forestpy.patches.ghost_plan import GhostPlan, fill_ghosts
from forestpy.patches.time_sync import TimeSyncPlan
from forestpy.simulation import Simulation, StateError, _copy_ghost_frame

__all__ = ["DistributedSimulation", "distribute", "select_device"]


def _world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def select_device(comm=None) -> int:
    """Rank-local GPU selection: node-local rank modulo the visible GPUs (call it before
    any other CUDA call).  Returns the device index chosen."""
    from mpi4py import MPI
    from numba import cuda

    comm = comm or _world()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    ngpu = len(cuda.gpus)
    if ngpu == 0:
        raise RuntimeError("select_device: no GPU visible to this rank")
    dev = local.rank % ngpu
    cuda.select_device(dev)
    try:
        import cupy

        cupy.cuda.Device(dev).use()
    except ImportError:
        pass
    local.Free()
    return dev


def distribute(sim: Simulation, comm=None) -> DistributedSimulation:
    """Turn a freshly built Simulation (identical on every rank: same setup, same
    initial refinement) into a :class:`DistributedSimulation`, in place; returns it.
    This keeps demo scripts unchanged: ``distribute(setup(**options)).run()``."""
    if not isinstance(sim, Simulation):
        raise TypeError(f"distribute: expected a Simulation, got {type(sim).__name__}")
    if not isinstance(sim, DistributedSimulation):
        sim.__class__ = DistributedSimulation
    sim._init_parallel(comm)
    return sim


class _RankZeroCallback:
    """A callback run on rank 0 only, on the gathered state; ``next_time`` (the output
    times the steps must land on) is asked on every rank so that all take the same steps."""

    _HOOKS = ("on_start", "on_step", "on_end")

    def __init__(self, cb):
        self._cb = cb

    def __getattr__(self, name):
        attr = getattr(self._cb, name)
        if name not in self._HOOKS:
            return attr

        def hook(sim):
            sim.gather_state()
            if sim.rank == 0:
                attr(sim)

        return hook


class DistributedSimulation(Simulation):
    """:class:`~forestpy.Simulation` over the ranks of ``comm`` (default COMM_WORLD).

    Same parameters as Simulation plus ``comm``; every rank must build it with the same
    arguments.  The state after ``run()`` is bitwise that of the serial run (the
    per-patch arithmetic does not depend on the rank that does it).
    """

    def __init__(self, riemann, *, qinit, domain=None, comm=None, **options):
        self._pending_comm = comm if comm is not None else _world()
        super().__init__(riemann, qinit=qinit, domain=domain, **options)
        self._init_parallel(self._pending_comm)

    # ------------------------------------------------------------------ setup
    def _init_parallel(self, comm) -> None:
        self.comm = comm if comm is not None else _world()
        self.rank, self.nranks = self.comm.rank, self.comm.size
        self._full = True  # every row of self.q valid on this rank
        self.exchange_bytes = 0
        self.callbacks = [
            cb if isinstance(cb, _RankZeroCallback) else _RankZeroCallback(cb)
            for cb in self.callbacks
        ]
        self._partition()

    def _set_forest(self, forest) -> None:
        super()._set_forest(forest)
        if hasattr(self, "comm"):  # not during Simulation.__init__ of distribute()
            self._partition()

    def partition_weights(self):
        """Per-leaf weights of the partition (None: equal, every patch has mx*my cells)."""
        return None

    def _partition(self) -> None:
        """Owned range, owned parts of the plans, halo lists and exchange schedule."""
        be = self.backend
        forest = self.forest
        self.offsets = forest.partition(self.nranks, self.partition_weights())
        lo, hi = int(self.offsets[self.rank]), int(self.offsets[self.rank + 1])
        self.lo, self.hi = lo, hi
        owner = np.searchsorted(self.offsets, np.arange(forest.n), side="right") - 1

        def owned(p):
            return (p >= lo) & (p < hi)

        # ghost plan restricted to owned destinations (global patch ids kept)
        g = {k: be.to_host(getattr(self.ghost_plan, k)) for k in GhostPlan.__dataclass_fields__}
        keep = {"copy": owned(g["copy_dst"][:, 0]), "avg": owned(g["avg_dst"][:, 0]),
                "interp": owned(g["interp_dst"][:, 0])}
        local = {k: v[keep[k.split("_")[0]]] for k, v in g.items()}
        self.owned_ghost_plan = GhostPlan(**local).to(be)
        reads = [local["copy_src"][:, 0], local["avg_src"][..., 0].ravel(),
                 local["interp_center"][:, 0], local["interp_nbr"][local["interp_valid"]][..., 0]
                 .ravel()]
        # time sync restricted to owned coarse patches; pairs stay adjacent
        s = {k: be.to_host(getattr(self.sync_plan, k))
             for k in TimeSyncPlan.__dataclass_fields__ if k != "nx"}
        m = owned(s["coarse"][:, 0])
        sub = {k: v[m] for k, v in s.items() if k != "width"}
        sub["width"] = s["width"][m[::2]]
        nx = int(m[: self.sync_plan.nx].sum())
        reads.append(sub["fine"][:, 0])
        halo = np.unique(np.concatenate([r.astype(np.int64) for r in reads]))
        halo = halo[~owned(halo)]
        edge_halo = np.unique(sub["fine_edge"][:, 0].astype(np.int64))
        edge_halo = edge_halo[~owned(edge_halo)]
        # edge fluxes live in a local array: owned rows first, then remote fine patches
        rows = np.full(forest.n, -1, dtype=np.int64)
        rows[lo:hi] = np.arange(hi - lo)
        rows[edge_halo] = hi - lo + np.arange(len(edge_halo))
        for k in ("coarse_edge", "fine_edge"):
            sub[k] = sub[k].copy()
            sub[k][:, 0] = rows[sub[k][:, 0]]
        self.owned_sync_plan = TimeSyncPlan(**sub, nx=nx).to(be)
        self.n_edge_rows = hi - lo + len(edge_halo)
        self.q_exchange = self._schedule(halo, owner)
        self.edge_exchange = self._schedule(edge_halo, owner, rows)
        pa = self.patch_arrays
        self.local_arrays = SimpleNamespace(
            mx=pa.mx, my=pa.my, mbc=pa.mbc, npatch=hi - lo, dx=pa.dx[lo:hi], dy=pa.dy[lo:hi],
        )
        self.halo = halo

    def _schedule(self, needed, owner, rows=None):
        """Who sends which rows to whom: ``needed`` global ids this rank receives
        (stored at ``rows[id]``, default ``id``); one all-to-all of id lists."""
        comm, n = self.comm, self.nranks
        src = owner[needed]
        want = [needed[src == r] for r in range(n)]
        asked = comm.alltoall(want)
        recv = {r: (want[r] if rows is None else rows[want[r]]) for r in range(n) if len(want[r])}
        send = {r: asked[r].astype(np.int64) for r in range(n) if len(asked[r])}
        return SimpleNamespace(recv=recv, send=send)

    # ------------------------------------------------------------------ communication
    def _exchange(self, arr, plan, send_arr=None) -> None:
        """Receive the rows ``plan.recv`` of ``arr`` from their owners, sending ours
        (rows ``plan.send`` of ``send_arr``, default ``arr``); packed into contiguous
        host buffers (staged from the device on the GPU backend), non-blocking."""
        from mpi4py import MPI

        be, comm = self.backend, self.comm
        send_arr = arr if send_arr is None else send_arr
        shape = arr.shape[1:]
        reqs, bufs = [], {}
        with self.timers("exchange"):
            for r, ids in plan.recv.items():
                bufs[r] = np.empty((len(ids),) + shape, dtype=arr.dtype)
                reqs.append(comm.Irecv(bufs[r], source=r, tag=7))
            with self.timers("exchange.pack"):
                packed = {r: np.ascontiguousarray(be.to_host(send_arr[be.to_device(ids)]))
                          for r, ids in plan.send.items()}
            for r, buf in packed.items():
                reqs.append(comm.Isend(buf, dest=r, tag=7))
                self.exchange_bytes += buf.nbytes
            with self.timers("exchange.wait"):
                MPI.Request.Waitall(reqs)
            for r, ids in plan.recv.items():
                arr[be.to_device(ids)] = be.to_device(bufs[r], arr.dtype)

    def gather_state(self) -> None:
        """Make every row of ``q`` valid on every rank (Allgatherv in patch order)."""
        if getattr(self, "_full", True):
            return
        be = self.backend
        with self.timers("gather"):
            q = be.to_host(self.q)
            full = np.empty_like(q)
            row = int(np.prod(q.shape[1:]))
            counts = np.diff(self.offsets) * row
            mine = np.ascontiguousarray(q[self.lo : self.hi])
            self.comm.Allgatherv(mine, [full, counts, self.offsets[:-1] * row, None])
            self.q = be.to_device(full, self.dtype)
        self._full = True

    def _allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        from mpi4py import MPI

        out = np.empty_like(values)
        self.comm.Allreduce(values, out, op={"max": MPI.MAX, "sum": MPI.SUM}[op])
        return out

    # ------------------------------------------------------------------ pieces
    def fill_ghosts(self, q=None) -> None:
        if q is not None or self._full:
            return super().fill_ghosts(q)
        q = self.q
        self._exchange(q, self.q_exchange)
        with self.timers("ghost_fill"):
            if self.riemann.surface_interp is None:
                fill_ghosts(self.owned_ghost_plan, q, self.riemann.positive,
                            backend=self.backend, timers=self.timers)
            else:
                plan, self.ghost_plan = self.ghost_plan, self.owned_ghost_plan
                try:
                    self._fill_ghosts_surface(q, *self.riemann.surface_interp)
                finally:
                    self.ghost_plan = plan
            with self.timers("ghost_fill.physical_bc"):
                apply_physical_bc(q, self.geom, self.bc, self.riemann.wall_reflect, self.t,
                                  self.aux, centers=self._centers_of, backend=self.backend,
                                  sides=self.patch_arrays.sides)

    def _host_flags(self, flags) -> np.ndarray:
        """Flags of the owned patches, gathered so every rank sees all of them."""
        flags = super()._host_flags(flags)
        mine = np.ascontiguousarray(flags[self.lo : self.hi]).astype(np.uint8)
        out = np.empty(len(flags), dtype=np.uint8)
        self.comm.Allgatherv(mine, [out, np.diff(self.offsets), self.offsets[:-1], None])
        return out.astype(bool)

    def _estimate_dt(self) -> float:
        self.gather_state()
        return super()._estimate_dt()

    def totals(self) -> dict:
        self.gather_state()
        return super().totals()

    def sample(self, x, y, aux: bool = False):
        self.gather_state()
        return super().sample(x, y, aux)

    def save_checkpoint(self, path, meta: dict | None = None):
        """Gather to every rank; rank 0 writes the single-file checkpoint (readable on
        any number of ranks).  Returns the path on every rank."""
        from forestpy.io.checkpoint import write_checkpoint

        self.gather_state()
        out = write_checkpoint(self, path, meta=meta) if self.rank == 0 else None
        return self.comm.bcast(out, root=0)

    def restore(self, data: dict):
        super().restore(data)
        self._full = True
        return self

    def regrid(self) -> None:
        if not self._full:
            # the flags (gathered) decide whether anything can change; only then gather
            self.fill_ghosts()
            refine = self._refine_flags()
            if not refine.any():
                coarsen = np.zeros_like(refine)
                if self.vtable.tag4coarsening is not None:
                    coarsen = self._host_flags(
                        self.vtable.tag4coarsening(self.q, self.aux, self.geom, self.t))
                    coarsen &= self.geom.level > self.min_level
                if not coarsen.any():
                    return
            self.gather_state()
        super().regrid()

    # ------------------------------------------------------------------ stepping
    def step(self, dt: float) -> tuple[bool, float]:
        """One step of the owned patches (see Simulation.step): halo exchange, ghost
        fill of owned patches, step kernel on the owned contiguous range, remote edge
        fluxes, time sync of owned coarse patches, Allreduced Courant number/checks."""
        lo, hi, xp = self.lo, self.hi, self.xp
        self.fill_ghosts()
        if self.vtable.b4step is not None:
            with self.timers("sources"):
                self.vtable.b4step(self, dt)
        meqn = self.riemann.num_eqn
        with self.timers("step"):
            if hi > lo:
                q_loc, cfl, edge_loc = self.vtable.step(self.q[lo:hi], self.aux[lo:hi],
                                                        self.local_arrays, dt)
            else:
                q_loc, cfl = None, xp.zeros(0)
                edge_loc = xp.zeros((0, 4, meqn, max(self.mx, self.my)))
            q_new = self.q.copy()  # rows not owned: kept (finite; stale until received)
            if q_loc is not None:
                _copy_ghost_frame(self.q[lo:hi], q_loc, self.mbc)  # no unset memory
                q_new[lo:hi] = q_loc
            edge = xp.zeros((self.n_edge_rows,) + edge_loc.shape[1:], dtype=edge_loc.dtype)
            edge[: hi - lo] = edge_loc
        self._exchange(edge, self.edge_exchange, send_arr=_EdgeRows(edge, lo))
        with self.timers("time_sync"):
            self.solver.time_sync(self.owned_sync_plan, self.q, q_new, self.aux, edge, dt)
        if self.vtable.src2 is not None:
            with self.timers("sources"):
                _copy_ghost_frame(self.q, q_new, self.mbc)
                x, y = self.centers
                self.vtable.src2(q_new, self.aux, x, y, self.t, dt)
        with self.timers("cfl_check"):
            status = self._global_status(q_new[lo:hi], cfl)
        courant = float(status[0])
        if courant > self.cfl_max or not math.isfinite(courant):
            self.rejected_steps += 1
            if not math.isfinite(courant):
                self._validate_all(q_new)
            return False, courant
        if self.check_state and not (
            math.isfinite(status[1]) and all(v >= 0.0 for v in status[2:])
        ):
            self._validate_all(q_new)
        self.q = q_new
        self._full = self.nranks == 1
        self.t += dt
        self.steps += 1
        self.cell_updates += self.geom.npatch * self.mx * self.my
        return True, courant

    def _global_status(self, q_owned, cfl) -> np.ndarray:
        """[max Courant, sum of the interiors, min of each positive field] over ranks;
        non-finite values become +inf (Courant) or -inf (minima) before the reduction."""
        npos = len(self.riemann.positive) if self.check_state else 0
        if q_owned.shape[0]:
            local = np.asarray(self._step_status(q_owned, cfl), dtype=np.float64)
        else:
            local = np.array([0.0] + ([0.0] + [math.inf] * npos if self.check_state else []))
        c = local[0] if math.isfinite(local[0]) else math.inf
        if not self.check_state:
            return self._allreduce(np.array([c]), "max")
        lows = np.where(np.isfinite(local[2:]) | (local[2:] == math.inf), local[2:], -math.inf)
        mx = self._allreduce(np.concatenate([[c], -lows]), "max")
        total = self._allreduce(local[1:2].copy(), "sum")
        return np.concatenate([mx[:1], total, -mx[1:]])

    def _validate_all(self, q_new) -> None:
        """Raise the same StateError on every rank (the first rank's message that found
        a problem in its owned patches)."""
        msg = None
        try:
            self._validate(q_new[self.lo : self.hi], f"step {self.steps + 1}")
        except StateError as err:
            msg = f"rank {self.rank}: {err}"
        msgs = [m for m in self.comm.allgather(msg) if m]
        if msgs:
            raise StateError(msgs[0])


class _EdgeRows:
    """Global-id view of the local edge-flux array (owned rows start at ``lo``)."""

    def __init__(self, edge, lo):
        self.edge, self.lo = edge, lo

    def __getitem__(self, ids):
        return self.edge[ids - self.lo]
