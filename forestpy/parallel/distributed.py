"""A :class:`~forestpy.Simulation` whose time steps are shared by MPI ranks.

Metadata replicated, step work distributed: every rank holds the whole forest and
builds the same global ghost and time-sync plans; the leaves are split into contiguous
Morton ranges (:meth:`Forest.partition`) and each rank steps only the patches it owns.
Each step receives, from their owners, the patches that the owned ghost cells read (the
"halo", one patch deep: every ghost source is an interior cell) while the owned patches
that need no remote data are stepped (communication overlap, de la Asuncion et al.
2012); then the others are stepped; the edge fluxes of remote fine patches that the
owned time sync needs follow.  The Courant number and the state checks are Allreduces.
A regrid gathers the flags, builds the same forest and partition on every rank and
moves to each new owner only the old patches it needs (point to point), transferred
into its new arrays.  Patch data is local: each rank allocates ``q``, ``aux`` and the
cell centres for its owned patches and its halo only (owned rows first, then the halo:
``l2g``/``g2l``), and the owned parts of the global plans are remapped to these rows
by a vectorised lookup; the ``src2`` hook runs on the owned rows.  ``totals()`` is a
gather of per-patch integrals (``npatch x nconserved`` floats, not the state) summed
with ``math.fsum`` on every rank: bitwise the serial totals.  Checkpoints and rank-0
callbacks gather the state to rank 0 only (Gatherv, :meth:`root_view`); the other
ranks never allocate a global-size state array after the setup.  ``gather_state()``
(Allgatherv to every rank) remains for explicit use.  The setup is distributed when
the Simulation is built as a DistributedSimulation (``distributed_setup(setup,
**options)``, ``build_distributed()``, the CLI under mpirun): at every initial level
each rank evaluates ``setaux``/``qinit`` on its owned and halo patches only, tags its
owned patches and the flags are gathered (bitwise the serial build for pointwise
``qinit``/``setaux``); ``distribute(sim)`` of a serially built Simulation still starts
from the whole initial state on every rank.
VTK frames and gauges are written per rank (:mod:`forestpy.parallel.io`).  See
docs/mpi.md for the design, what is not done yet and measurements.

Usage (same demo scripts, launched with ``mpirun -n 4 python script.py``)::

    from forestpy.parallel import distributed_setup
    sim = distributed_setup(setup, max_level=5)  # or DistributedSimulation(..., comm=...)
    sim.run()                                    # distribute(setup(...)): serial build
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from forestpy.patches import build_ghost_plan, build_time_sync_plan
from forestpy.patches.boundary import apply_physical_bc
from forestpy.patches.geometry import PatchGeometry
from forestpy.patches.ghost_plan import GhostPlan, copy_ghost_frame, fill_ghosts
from forestpy.patches.regrid import transfer
from forestpy.patches.surface_ghosts import fill_ghosts_surface
from forestpy.patches.surface_regrid import surface_fields, surface_regrid
from forestpy.patches.time_sync import TimeSyncPlan
from forestpy.simulation import Simulation, StateError

__all__ = ["DistributedSimulation", "build_distributed", "distribute", "distributed_setup",
           "select_device"]


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


def distribute(sim: Simulation, comm=None, overlap: bool | None = None) -> DistributedSimulation:
    """Turn a freshly built Simulation (identical on every rank: same setup, same
    initial refinement) into a :class:`DistributedSimulation`, in place; returns it.
    This keeps demo scripts unchanged: ``distribute(setup(**options)).run()``.
    ``overlap``: communication overlap in the step (see DistributedSimulation)."""
    if not isinstance(sim, Simulation):
        raise TypeError(f"distribute: expected a Simulation, got {type(sim).__name__}")
    if not isinstance(sim, DistributedSimulation):
        sim.__class__ = DistributedSimulation
    sim.overlap = sim.backend.is_gpu if overlap is None else bool(overlap)
    sim._init_parallel(comm)
    return sim


def distributed_setup(setup, *args, comm=None, overlap=None, **overrides):
    """``distribute(setup(*args, **overrides))`` with a distributed initial build:
    every :class:`~forestpy.Simulation` that ``setup`` constructs does its initial
    refinement over the ranks (``qinit``/``setaux`` on each rank's owned and halo
    patches only, :meth:`DistributedSimulation._initial_refinement`), so no rank holds
    the whole initial state.  Bitwise the serial initial state for pointwise
    ``qinit``/``setaux``.  Subclasses of Simulation are built serially, then
    distributed."""
    with build_distributed(comm):
        sim = setup(*args, **overrides)
    return distribute(sim, comm, overlap)


@contextlib.contextmanager
def build_distributed(comm=None):
    """Context: every :class:`~forestpy.Simulation` (exactly that class) constructed
    inside it becomes a DistributedSimulation over ``comm`` (default COMM_WORLD)
    whose initial refinement is distributed; pass it to :func:`distribute` afterwards
    (which wraps the callbacks).  The CLI builds this way under ``mpirun``."""
    from forestpy.simulation import BUILD_COMM

    token = BUILD_COMM.set(comm if comm is not None else _world())
    try:
        yield
    finally:
        BUILD_COMM.reset(token)


def _wrap_callback(cb):
    """VTK frames: written per rank (:class:`~forestpy.parallel.io.ParallelVTKOutput`);
    gauges: sampled where they lie, rank 0 writes (``ParallelGauges``); callbacks
    marked ``collective``: called on every rank as they are; the others run on rank 0
    on the gathered state (:class:`_RankZeroCallback`)."""
    from forestpy.callbacks import Gauges
    from forestpy.io.vtk import VTKOutput

    from .io import ParallelGauges, ParallelVTKOutput

    if type(cb) is VTKOutput and cb.kind == "amr":
        cb.__class__ = ParallelVTKOutput
    elif type(cb) is Gauges:
        cb.__class__ = ParallelGauges
    if isinstance(cb, _RankZeroCallback) or getattr(cb, "collective", False):
        return cb
    return _RankZeroCallback(cb)


class _RankZeroCallback:
    """A callback run on rank 0 only, on the state gathered to rank 0
    (:meth:`DistributedSimulation.root_view`: the other ranks allocate nothing global);
    ``next_time`` (the output times the steps must land on) is asked on every rank so
    that all take the same steps."""

    _HOOKS = ("on_start", "on_step", "on_end")

    def __init__(self, cb):
        self._cb = cb

    def __getattr__(self, name):
        attr = getattr(self._cb, name)
        if name not in self._HOOKS:
            return attr

        def hook(sim):
            with sim.root_view(0) as is_root:
                if is_root:
                    attr(sim)

        return hook


class DistributedSimulation(Simulation):
    """:class:`~forestpy.Simulation` over the ranks of ``comm`` (default COMM_WORLD).

    Same parameters as Simulation plus ``comm`` and ``overlap`` (step the patches that
    need no remote data while the halo travels; default: on the GPU backend only, where
    the host waits for MPI while the device computes; on the CPU, MPI moves large
    messages only inside MPI calls, so it gains nothing); every rank must build it
    with the same arguments.  The state after ``run()`` is bitwise that of the serial
    run (the per-patch arithmetic does not depend on the rank that does it, nor on the
    order in which the patches are stepped).  Built this way (not by ``distribute``),
    the initial refinement is distributed too (:meth:`_initial_refinement`).
    """

    overlap = True
    whole_range_fraction = 0.25  # see _step_overlapped
    early_split = 0.5  # GPU: share of the early patches in the first launch
    strip_fraction = 0.75  # halo exchange of whole patches above this share of cells

    def __init__(self, riemann, *, qinit, domain=None, comm=None, overlap=None, **options):
        self._pending_comm = comm if comm is not None else _world()
        super().__init__(riemann, qinit=qinit, domain=domain, **options)
        self.overlap = self.backend.is_gpu if overlap is None else bool(overlap)
        self._init_parallel(self._pending_comm)

    # ------------------------------------------------------------------ setup
    def _init_comm(self, comm) -> None:
        self.comm = comm if comm is not None else _world()
        self.rank, self.nranks = self.comm.rank, self.comm.size
        # True: q, aux, aux_setaux hold every patch (global indexing: the serial
        # initial state, a restored checkpoint, a gathered state); False: the compact
        # local layout (owned patches, then the halo); the step localises on entry
        self._full = True
        self.gathers = 0  # whole-state gathers (to every rank, or to rank 0 only)
        self._root_copy = None  # (root, global arrays on root): see root_view
        self.migrated = 0  # old patches received by their new owners, over all regrids
        self.exchange_bytes = 0

    def _init_parallel(self, comm) -> None:
        if getattr(self, "built_distributed", False):  # the layout is there already
            self.callbacks = [_wrap_callback(cb) for cb in self.callbacks]
            return
        self._init_comm(comm)
        self.built_distributed = False
        self.callbacks = [_wrap_callback(cb) for cb in self.callbacks]
        pa = self.patch_arrays  # the serial build's: keep the metadata on the host
        pa.sides = [self.backend.to_host(s) for s in pa.sides]
        self._build_layout()

    def _initial_refinement(self) -> None:
        """The serial initial refinement, distributed (when built as a
        DistributedSimulation, by :func:`distributed_setup` or under
        :func:`build_distributed`; not by :func:`distribute`): at every initial
        level each rank evaluates ``setaux`` and ``qinit`` on its owned and halo
        patches only, fills the ghosts of its owned patches (halo exchange), tags its
        owned patches, and the flags are gathered; every rank builds the same next
        forest.  ``qinit``/``setaux`` are called on the rows' cell centres (any subset of
        the patches: they must be pointwise, as the serial build assumes for its
        cells), so the initial state is bitwise the serial one.  No global-size state
        array is allocated."""
        comm = getattr(self, "_pending_comm", None)
        if comm is None or hasattr(self, "comm"):  # distribute(): the serial build
            return super()._initial_refinement()
        self._init_comm(comm)
        self.built_distributed = True
        self._full = False
        super()._initial_refinement()  # _set_forest and _qinit act on the local rows

    def _initial_state_set(self) -> None:
        if getattr(self, "_full", True):  # the serial build
            return super()._initial_state_set()
        self._spare = self._spare_of = None
        self._validate_all(self.q, "the initial condition")

    def _qinit(self):
        if getattr(self, "_full", True) or len(self.l2g):
            return super()._qinit()
        # a rank holding no patch: qinit is not called on empty arrays
        shape = (0, self.riemann.num_eqn) + self.geom.shape
        return self.backend.to_device(np.zeros(shape), self.dtype)

    def _make_aux(self):
        if getattr(self, "_full", True) or not hasattr(self, "l2g") or len(self.l2g) \
                or self.vtable.setaux is None:
            return super()._make_aux()
        return np.zeros((0, self.riemann.num_aux) + self.geom.shape)

    def _refine_flags(self) -> np.ndarray:
        if getattr(self, "_full", True):
            return super()._refine_flags()
        n = self.nown
        flags = np.zeros(0, dtype=bool)
        if n:
            flags = self.vtable.tag4refinement(self.q[:n], self.aux[:n], self.owned_geom,
                                               self.t)
        return self._host_flags(flags) & (self.geom.level < self.max_level)

    def _set_forest(self, forest) -> None:
        """New forest: the geometry on the host (metadata, replicated), then this rank's
        layout (with the ghost and time-sync plans of its owned patches); ``aux`` of the
        local patches only."""
        if not hasattr(self, "comm"):  # Simulation.__init__ of distribute()
            return super()._set_forest(forest)
        be = self.backend
        self.forest = forest
        geom = self.geom = PatchGeometry.from_forest(forest, self.mx, self.my, self.mbc)
        self.patch_arrays = SimpleNamespace(
            mx=geom.mx, my=geom.my, mbc=geom.mbc, npatch=geom.npatch,
            dx=be.to_device(geom.dx), dy=be.to_device(geom.dy),
            sides=[geom.on_side(side) for side in range(4)],
        )
        self._build_layout()
        full, self.geom = self.geom, self.local_geom  # _make_aux: the local patches
        try:
            self.aux_setaux = be.to_device(self._make_aux(), self.dtype)
        finally:
            self.geom = full
        self.aux = self.aux_setaux.copy()

    def partition_weights(self, forest):
        """Per-leaf weights of the partition of ``forest`` (None: equal, every patch has
        mx*my cells)."""
        return None

    def _centers_geometry(self):
        # the local layout (owned + halo rows), as q (a serial build: the whole forest)
        return getattr(self, "local_geom", self.geom)

    def _partition(self) -> None:
        """Repartition the current forest (new weights): gathers a local state first."""
        self.gather_state()
        self._build_layout()

    def _build_layout(self) -> None:
        """Owned range, halo, the local layout (``l2g``: owned patches in order, then
        the halo patches, sorted; ``g2l``: its inverse over all leaves, -1 elsewhere),
        the owned parts of the plans remapped to local rows, exchange schedules."""
        be = self.backend
        forest = self.forest
        self.offsets = forest.partition(self.nranks, self.partition_weights(forest))
        lo, hi = int(self.offsets[self.rank]), int(self.offsets[self.rank + 1])
        self.lo, self.hi, self.nown = lo, hi, hi - lo
        owner = np.searchsorted(self.offsets, np.arange(forest.n), side="right") - 1

        def owned(p):
            return (p >= lo) & (p < hi)

        # the ghost plan of the owned destinations (global patch ids; built for them
        # alone: the entries of the whole forest's plan with an owned destination)
        self.ghost_plan = build_ghost_plan(forest, self.geom, patches=np.arange(lo, hi))
        gplan = {k: getattr(self.ghost_plan, k) for k in GhostPlan.__dataclass_fields__}
        reads = [gplan["copy_src"][:, 0], gplan["avg_src"][..., 0].ravel(),
                 gplan["interp_center"][:, 0],
                 gplan["interp_nbr"][gplan["interp_valid"]][..., 0].ravel()]
        # the time-sync plan of the owned coarse patches (built for them alone: the
        # whole forest's entries with an owned coarse patch, in order)
        sync = build_time_sync_plan(forest, self.geom, patches=np.arange(lo, hi))
        sub = {k: getattr(sync, k) for k in TimeSyncPlan.__dataclass_fields__ if k != "nx"}
        nx = sync.nx
        reads.append(sub["fine"][:, 0])
        halo = _distinct(forest.n, *reads)
        halo = halo[~owned(halo)]
        edge_halo = _distinct(forest.n, sub["fine_edge"][:, 0])
        edge_halo = edge_halo[~owned(edge_halo)]
        # the local layout of the patch arrays
        self.l2g = np.concatenate([np.arange(lo, hi, dtype=np.int64), halo])
        g2l = np.full(forest.n, -1, dtype=np.int64)
        g2l[self.l2g] = np.arange(len(self.l2g))
        self.g2l = g2l
        self._l2g_dev = be.to_device(self.l2g)
        lplan = _remap_ghost_plan(gplan, g2l)
        # edge fluxes live in a local array: owned rows first, then remote fine patches
        rows = np.full(forest.n, -1, dtype=np.int64)
        rows[lo:hi] = np.arange(hi - lo)
        rows[edge_halo] = hi - lo + np.arange(len(edge_halo))
        for k, table in (("coarse_edge", rows), ("fine_edge", rows), ("coarse", g2l),
                         ("fine", g2l)):
            sub[k] = sub[k].copy()
            sub[k][:, 0] = _lookup(table, sub[k][:, 0])
        self.owned_sync_plan = TimeSyncPlan(**sub, nx=nx).to(be)
        self.owned_ghost_plan = GhostPlan(**lplan).to(be)
        self.n_edge_rows = hi - lo + len(edge_halo)
        self.q_exchange = self._schedule(halo, owner, g2l)
        self._exchange_cells(self.q_exchange, [gplan["copy_src"], gplan["avg_src"],
                                               gplan["interp_center"],
                                               gplan["interp_nbr"][gplan["interp_valid"]],
                                               sync.fine], owned)
        self.edge_exchange = self._schedule(edge_halo, owner, rows)
        geom, pa = self.geom, self.patch_arrays
        self.local_geom = _sub_geometry(geom, self.l2g)
        self.owned_geom = _sub_geometry(geom, np.arange(lo, hi))
        self.centers_host = self.centers = None  # the local patches', on first use
        self.local_arrays = SimpleNamespace(
            mx=pa.mx, my=pa.my, mbc=pa.mbc, npatch=hi - lo, dx=pa.dx[lo:hi], dy=pa.dy[lo:hi],
        )
        sides = [be.to_host(s) for s in pa.sides]
        self._owned_sides = [s[owned(s)] - lo for s in sides]  # local rows
        self.owned_sides = [be.to_device(s) for s in self._owned_sides]
        self.owned_arrays = SimpleNamespace(**vars(self.local_arrays), sides=self.owned_sides)
        self.halo = halo
        self._split_owned(gplan, lplan, owned)
        self._spare = self._spare_of = None

    def _localize(self) -> None:
        """Full (global) arrays -> the local layout (rows ``l2g``)."""
        if not self._full:
            return
        idx = self._l2g_dev
        self.q, self.aux, self.aux_setaux = self.q[idx], self.aux[idx], self.aux_setaux[idx]
        self._full = False
        self._spare = self._spare_of = None

    def _owned_rows(self) -> slice:
        """The rows of the owned patches in ``q`` (either layout)."""
        return slice(self.lo, self.hi) if self._full else slice(0, self.nown)

    def _split_owned(self, plan: dict, lplan: dict, owned) -> None:
        """Order the owned patches as early (their ghost fill reads owned patches only)
        then late (it reads remote ones), for the overlapped step; the ghost plan
        (``plan`` in global ids, ``lplan`` the same remapped to local rows) and the
        physical-boundary sides split by destination the same way.  Every ghost value
        depends on the plan entry's source interiors alone (surface fills included), so
        the split fill gives the serial ghost values."""
        be, lo, hi = self.backend, self.lo, self.hi
        kinds = {"copy": [plan["copy_src"][:, None, 0]],
                 "avg": [plan["avg_src"][:, None, 0]],
                 "interp": [plan["interp_center"][:, None, 0],
                            np.where(plan["interp_valid"], plan["interp_nbr"][..., 0],
                                     plan["interp_dst"][:, None, 0])]}
        remote = np.zeros(self.forest.n, dtype=bool)  # owned patches reading remote data
        entry_late = {}
        for k, srcs in kinds.items():
            dst = plan[f"{k}_dst"][:, 0].astype(np.int64)
            reads_remote = np.zeros(len(dst), dtype=bool)
            for src in srcs:
                reads_remote |= (~owned(src)).any(axis=1)
            remote[dst[reads_remote]] = True
        for k in kinds:
            entry_late[k] = remote[plan[f"{k}_dst"][:, 0].astype(np.int64)]
        rows = np.arange(hi - lo)  # owned patches: local rows 0..n-1
        early_rows, late_rows = rows[~remote[lo:hi]], rows[remote[lo:hi]]

        def sub_plan(mask_of):
            return GhostPlan(**{f: v[mask_of[f.split("_")[0]]] for f, v in lplan.items()}).to(be)

        self.early_plan = sub_plan({k: ~m for k, m in entry_late.items()})
        self.late_plan = sub_plan(entry_late)
        la = self.local_arrays

        def group(rows):
            contiguous = len(rows) == 0 or rows[-1] - rows[0] + 1 == len(rows)
            sel = slice(int(rows[0]), int(rows[-1]) + 1) if len(rows) and contiguous else (
                slice(0, 0) if not len(rows) else be.to_device(rows))
            return SimpleNamespace(
                n=len(rows), sel=sel, rows=be.to_device(rows), ids=rows + lo,
                sides=[be.to_device(s[np.isin(s, rows)]) for s in self._owned_sides],
                arrays=SimpleNamespace(mx=la.mx, my=la.my, mbc=la.mbc, npatch=len(rows),
                                       dx=la.dx[sel], dy=la.dy[sel]),
            )

        self.early, self.late = group(early_rows), group(late_rows)
        self._early_rows, self._late_rows = early_rows, late_rows
        self._plan_two_launches(None)

    def _plan_two_launches(self, wave) -> None:
        """GPU, patch-list launches (see _step_overlapped): ``early_split`` of the early
        patches first, then the late ones followed by the rest of the early ones.  With
        ``wave`` (patches the device steps at once) the first launch is a whole number
        of waves: a partial last wave would leave part of the device idle while the
        late patches wait for their ghost cells."""
        early, late = self._early_rows, self._late_rows
        na = int(round(self.early_split * len(early)))
        if wave and len(early) >= wave:
            na = min(max(wave, int(round(na / wave)) * wave), len(early) // wave * wave)
        be = self.backend
        self.first_rows = be.to_device(early[:na].astype(np.int64))
        self.second_rows = be.to_device(np.concatenate([late, early[na:]]).astype(np.int64))
        self._wave_planned = bool(wave) or not be.is_gpu or be.simulator

    def _exchange_cells(self, plan, triplets, owned) -> None:
        """The halo exchange moves boundary strips, not whole patches: only the cells
        of a patch that some rank's ghost fill or time sync reads from a remote patch
        (``triplets``: ``(..., 3)`` arrays of (global patch, j, i), or ``(..., 4)``
        blocks of the ghost plan, 4 cells each), the same cell set for every patch (the
        union over all ranks: a ring along the patch's sides).  ``plan.cells`` (flat
        indices into a padded patch) stays None when the ring would hold most of the
        patch anyway."""
        from mpi4py import MPI

        pa = self.patch_arrays
        ny, nx = pa.my + 2 * pa.mbc, pa.mx + 2 * pa.mbc
        mask = np.zeros(ny * nx, dtype=np.uint8)
        for t in triplets:
            t = np.asarray(t)
            t = t.reshape(-1, t.shape[-1]).astype(np.int64)
            t = t[~owned(t[:, 0])]
            step = t[:, 3] if t.shape[1] == 4 else 0
            for a, b in ((0, 0), (0, 1), (1, 0), (1, 1)):  # a block's 4 cells
                mask[(t[:, 1] + a * step) * nx + t[:, 2] + b * step] = 1
        both = np.empty_like(mask)
        self.comm.Allreduce(mask, both, op=MPI.MAX)
        cells = np.flatnonzero(both)
        if len(cells) > self.strip_fraction * mask.size:
            return
        plan.cells = cells
        plan.cells_dev = self.backend.to_device(cells)
        plan.eq_dev = self.backend.to_device(np.arange(self.riemann.num_eqn))

    def _schedule(self, needed, owner, rows):
        """Who sends which rows to whom: ``needed`` global ids this rank receives,
        stored at rows ``rows[id]``; the ids asked of this rank are sent from its owned
        rows (``id - lo``: owned patches come first in every local array); one
        all-to-all of id lists."""
        comm, n = self.comm, self.nranks
        src = owner[needed]
        want = [needed[src == r] for r in range(n)]
        asked = comm.alltoall(want)
        recv = {r: rows[want[r]] for r in range(n) if len(want[r])}
        send = {r: asked[r].astype(np.int64) - self.lo for r in range(n) if len(asked[r])}
        be = self.backend
        return SimpleNamespace(recv=recv, send=send,
                               recv_dev={r: be.to_device(v) for r, v in recv.items()},
                               send_dev={r: be.to_device(v) for r, v in send.items()},
                               cells=None)

    # ------------------------------------------------------------------ communication
    def _exchange(self, arr, plan, send_arr=None) -> None:
        """Receive the rows ``plan.recv`` of ``arr`` from their owners, sending ours
        (rows ``plan.send`` of ``send_arr``, default ``arr``); packed into contiguous
        host buffers (staged from the device on the GPU backend), non-blocking."""
        with self.timers("exchange"):
            pending = self._post(arr, plan, send_arr)
            self._complete(arr, plan, pending)

    def _post(self, arr, plan, send_arr=None):
        """Post the receives and pack the rows to send; on the CPU the sends go out now,
        on a GPU the packed rows are staged to pinned host buffers on a copy stream
        (they travel while the early patches' kernel runs) and :meth:`_complete` sends
        them.  Returns what :meth:`_complete` needs."""
        be, comm = self.backend, self.comm
        send_arr = arr if send_arr is None else send_arr
        cells = getattr(plan, "cells", None)
        shape = arr.shape[1:] if cells is None else (arr.shape[1], len(cells))
        staged = be.is_gpu and not be.simulator
        reqs, bufs = [], {}
        for r, ids in plan.recv.items():
            bufs[r] = self._host_buffer((len(ids),) + shape, arr.dtype, staged)
            reqs.append(comm.Irecv(bufs[r], source=r, tag=7))
        with self.timers("exchange.pack"):
            if staged:
                packed = self._stage(send_arr, plan)
            else:
                packed = {r: np.ascontiguousarray(be.to_host(self._pack(send_arr, plan, r)))
                          for r in plan.send}
        pending = SimpleNamespace(reqs=reqs, bufs=bufs, packed=packed, sent=False)
        if not staged:
            self._send(pending)
        return pending

    @staticmethod
    def _pack(arr, plan, r):
        """The rows sent to rank ``r`` (only ``plan.cells`` of each when set)."""
        rows = arr[plan.send_dev[r]]
        if getattr(plan, "cells", None) is None:
            return rows
        n, m, ny, nx = rows.shape
        return rows.reshape(n, m, ny * nx)[:, :, plan.cells_dev]

    def _send(self, pending) -> None:
        for r, buf in pending.packed.items():
            pending.reqs.append(self.comm.Isend(buf, dest=r, tag=7))
            self.exchange_bytes += buf.nbytes
        pending.sent = True

    def _host_buffer(self, shape, dtype, pinned):
        if not pinned:
            return np.empty(shape, dtype=dtype)
        import cupyx

        return cupyx.empty_pinned(shape, dtype=dtype)

    def _stage(self, send_arr, plan) -> dict:
        """Gather the rows to send on the device (current stream), then copy them to
        pinned host buffers on a non-blocking copy stream (returns at once)."""
        import cupy

        if getattr(self, "_copy_stream", None) is None:
            self._copy_stream = cupy.cuda.Stream(non_blocking=True)
        stream = self._copy_stream
        dev = {r: self._pack(send_arr, plan, r) for r in plan.send}
        ready = cupy.cuda.Event()
        ready.record()
        stream.wait_event(ready)
        packed = {}
        for r, d in dev.items():
            packed[r] = self._host_buffer(d.shape, d.dtype, True)
            d.get(stream=stream, out=packed[r], blocking=False)
            self.backend.host_transfers += 1
        self._staging = dev  # alive until the copies are done
        return packed

    def _complete(self, arr, plan, pending) -> None:
        """Send what :meth:`_post` staged, wait for every message, and unpack the
        received rows into ``arr``."""
        from mpi4py import MPI

        be = self.backend
        with self.timers("exchange.wait"):
            if not pending.sent:
                self._copy_stream.synchronize()
                self._staging = None
                self._send(pending)
            MPI.Request.Waitall(pending.reqs)
        with self.timers("exchange.unpack"):
            cells = getattr(plan, "cells", None)
            flat = None
            if cells is not None:
                if not arr.flags.c_contiguous:
                    raise RuntimeError("halo strips need a C-contiguous state array")
                flat = arr.reshape(arr.shape[0], arr.shape[1], arr.shape[2] * arr.shape[3])
            for r in plan.recv:
                buf = be.to_device(pending.bufs[r], arr.dtype)
                if flat is None:
                    arr[plan.recv_dev[r]] = buf
                else:  # a view of arr: the strips go into the halo rows in place
                    flat[plan.recv_dev[r][:, None, None], plan.eq_dev[None, :, None],
                         plan.cells_dev[None, None, :]] = buf

    def gather_state(self) -> None:
        """Make ``q``, ``aux`` and ``aux_setaux`` hold every patch on every rank, in
        global patch order (Allgatherv of the owned rows; the global layout until the
        next step localises again).  Collective.  Nothing in forestpy calls it during a
        run any more (totals gather per-patch integrals, checkpoints and rank-0
        callbacks gather to rank 0 only: :meth:`root_view`); ``_partition`` does."""
        if getattr(self, "_full", True):
            return
        be = self.backend
        self.gathers += 1
        self._root_copy = None
        with self.timers("gather"):
            for name in ("q", "aux", "aux_setaux"):
                local = getattr(self, name)
                shape = local.shape[1:]
                full = np.empty((self.forest.n,) + shape, dtype=local.dtype)
                row = int(np.prod(shape))
                if row:
                    mine = np.ascontiguousarray(be.to_host(local[: self.nown]))
                    counts = np.diff(self.offsets) * row
                    self.comm.Allgatherv(mine, [full, counts, self.offsets[:-1] * row, None])
                setattr(self, name, be.to_device(full, self.dtype))
        self._full = True
        self._spare = self._spare_of = None

    def _gather_to(self, root: int):
        """(q, aux, aux_setaux) of every patch, in global patch order, on rank ``root``
        (Gatherv of the owned rows); None on the other ranks, which allocate nothing
        of the global size.  Collective."""
        be = self.backend
        self.gathers += 1
        out = []
        with self.timers("gather"):
            for name in ("q", "aux", "aux_setaux"):
                local = getattr(self, name)
                shape = local.shape[1:]
                row = int(np.prod(shape))
                full = None
                if self.rank == root:
                    full = np.empty((self.forest.n,) + shape, dtype=local.dtype)
                if row:
                    mine = np.ascontiguousarray(be.to_host(local[: self.nown]))
                    recv = None
                    if self.rank == root:
                        recv = [full, np.diff(self.offsets) * row, self.offsets[:-1] * row, None]
                    self.comm.Gatherv(mine, recv, root=root)
                out.append(None if full is None else be.to_device(full, self.dtype))
        return tuple(out) if self.rank == root else None

    @contextlib.contextmanager
    def root_view(self, root: int = 0):
        """Collective context: inside it, on rank ``root``, ``q``, ``aux`` and
        ``aux_setaux`` hold every patch in global patch order (``_full`` is True there,
        so ``sample``/``totals`` run the serial code without communicating); the other
        ranks keep their local arrays.  The gathered copy (a Gatherv to ``root``) is
        kept on ``root`` until the state changes (the next step, regrid or restore), so
        several rank-0 callbacks of one step gather once.  Yields whether this rank is
        ``root``.  Rank-0 callbacks and checkpoints use it."""
        if getattr(self, "_full", True):  # every rank holds every patch already
            yield self.rank == root
            return
        if self._root_copy is None or self._root_copy[0] != root:
            self._root_copy = (root, self._gather_to(root))
        if self.rank != root:
            yield False
            return
        saved = self.q, self.aux, self.aux_setaux
        self.q, self.aux, self.aux_setaux = self._root_copy[1]
        self._full = True
        try:
            yield True
        finally:
            self.q, self.aux, self.aux_setaux = saved
            self._full = False

    def _allreduce(self, values: np.ndarray, op: str) -> np.ndarray:
        from mpi4py import MPI

        out = np.empty_like(values)
        self.comm.Allreduce(values, out, op={"max": MPI.MAX, "sum": MPI.SUM}[op])
        return out

    # ------------------------------------------------------------------ pieces
    def fill_ghosts(self, q=None) -> None:
        """Halo exchange, then the ghost fill of the owned patches (local layout)."""
        if q is not None or not hasattr(self, "comm"):  # (Simulation.__init__)
            return super().fill_ghosts(q)
        self._localize()
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
                                  sides=self.owned_sides)

    def _fill_ghosts_surface(self, q, i: int, j: int) -> None:
        if getattr(self, "_full", True):
            return super()._fill_ghosts_surface(q, i, j)
        aux_bc = tuple("extrap" if callable(k) else k for k in self.bc)
        apply_physical_bc(self.aux, self.geom, aux_bc, ((), ()), self.t,
                          backend=self.backend, sides=self.owned_sides)
        fill_ghosts_surface(self.ghost_plan, q, self.aux, i, j, self._surface_dry_tolerance(),
                            self.riemann.positive, backend=self.backend, timers=self.timers)

    def _host_flags(self, flags) -> np.ndarray:
        """Flags of the owned patches (one per owned patch), gathered so every rank
        sees all of them."""
        if getattr(self, "_full", True):  # the initial refinement, identical on every rank
            return super()._host_flags(flags)
        mine = np.ascontiguousarray(self.backend.to_host(flags)).astype(bool).astype(np.uint8)
        if mine.shape != (self.nown,):
            raise ValueError(f"tagging returned shape {mine.shape}, expected ({self.nown},)")
        out = np.empty(self.forest.n, dtype=np.uint8)
        self.comm.Allgatherv(mine, [out, np.diff(self.offsets), self.offsets[:-1], None])
        return out.astype(bool)

    def _warm_up(self) -> None:
        self._localize()
        q = self.q
        fill_ghosts(self.owned_ghost_plan, q.copy(), self.riemann.positive, backend=self.backend)
        if len(self.owned_sync_plan):
            edge = self.xp.zeros((self.n_edge_rows, 4, self.riemann.num_eqn, max(self.mx, self.my)))
            self.solver.time_sync(self.owned_sync_plan, q, q.copy(), self.aux, edge, 0.0)

    def _estimate_dt(self) -> float:
        """Simulation._estimate_dt over the owned patches, the Courant number
        Allreduced (a maximum: the serial value exactly)."""
        probe = min(self.geom.dx.min(), self.geom.dy.min()) * 1e-3
        self.fill_ghosts()
        c = 0.0
        if self.nown:
            n = self.nown
            _, cfl, _ = self.vtable.step(self.q[:n], self.aux[:n], self.local_arrays, probe)
            c = float(self.backend.to_host(cfl.max()))
        c = float(self._allreduce(np.array([c]), "max")[0])
        if c <= 0.0:
            return min(self.dt_max, self.t_final - self.t) or probe
        return probe * self.cfl_desired / c

    def totals(self) -> dict:
        """Collective: each rank integrates its owned patches (per patch,
        :meth:`Simulation._patch_totals`), an Allgatherv gives every rank these
        per-patch integrals (``npatch x nconserved`` floats, not the state), and every
        rank sums them with ``math.fsum`` (exactly rounded, so in any order): bitwise
        the serial totals."""
        if getattr(self, "_full", True):
            return super().totals()
        mine = self._patch_totals(slice(0, self.nown), self.owned_geom)
        k = mine.shape[1]
        parts = np.empty((self.forest.n, k))
        if k:
            self.comm.Allgatherv(mine, [parts, np.diff(self.offsets) * k,
                                        self.offsets[:-1] * k, None])
        return self._sum_patch_totals(parts)

    def sample(self, x, y, aux: bool = False):
        """Collective: each rank reads the points in its own patches, and every rank
        gets all of them (an allgather of the sampled values, not of the state)."""
        if self._full:
            return super().sample(x, y, aux)
        leaf, j, i = self._locate(x, y)
        mine = np.flatnonzero((leaf >= self.lo) & (leaf < self.hi))
        be = self.backend
        idx = tuple(be.to_device(a) for a in (leaf[mine] - self.lo, j[mine], i[mine]))
        part = be.to_host(self.q[idx[0], :, idx[1], idx[2]]).astype(np.float64)
        part_aux = be.to_host(self.aux[idx[0], :, idx[1], idx[2]]).astype(np.float64) \
            if aux else None
        values = np.empty((len(leaf), self.riemann.num_eqn))
        aux_values = np.empty((len(leaf), self.riemann.num_aux))
        for rows, vals, avals in self.comm.allgather((mine, part, part_aux)):
            values[rows] = vals
            if aux:
                aux_values[rows] = avals
        return (values, aux_values) if aux else values

    def save_checkpoint(self, path, meta: dict | None = None):
        """Collective: the state is gathered to rank 0 only (:meth:`root_view`), which
        writes the single-file checkpoint (readable on any number of ranks).  Returns
        the path on every rank; an error on rank 0 is raised on every rank."""
        from forestpy.io.checkpoint import write_checkpoint

        out = error = None
        with self.root_view(0) as is_root:
            if is_root:
                try:
                    out = write_checkpoint(self, path, meta=meta)
                except Exception as e:  # noqa: BLE001 - re-raised below, on every rank
                    error = e
        out, message = self.comm.bcast(
            (out, None if error is None else f"{type(error).__name__}: {error}"), root=0)
        if error is not None:
            raise error
        if message is not None:
            raise RuntimeError(f"rank 0 could not write the checkpoint {path}: {message}")
        return out

    def restore(self, data: dict):
        """The serial restore (global arrays; this rank's layout of the checkpoint's
        forest); the next step localises."""
        super().restore(data)
        self._full = True
        self._root_copy = None
        self._spare = self._spare_of = None
        return self

    def regrid(self) -> None:
        """The serial regrid on the local layout: the owned patches are tagged and the
        flags gathered, every rank builds the same new forest and partition, each rank
        receives (point to point) only the old patches that the transfer to its new
        patches reads (their conserved densities, and the surface fields of a
        surface-aware solver, computed by their old owners), and transfers them into
        the compact arrays of its new layout."""
        self._localize()
        self._root_copy = None
        be, xp, n = self.backend, self.xp, self.nown
        with self.timers("regrid"):
            self.fill_ghosts()
            q, aux = self.q[:n], self.aux[:n]
            refine = coarsen = np.zeros(0, dtype=bool)
            if n:
                refine = self.vtable.tag4refinement(q, aux, self.owned_geom, self.t)
                if self.vtable.tag4coarsening is not None:
                    coarsen = self.vtable.tag4coarsening(q, aux, self.owned_geom, self.t)
            forest = self._regridded_forest(
                refine, coarsen if self.vtable.tag4coarsening is not None else None)
            if forest is None:
                return
            # what the serial regrid transfers, on the owned old patches
            capa = self.capacity_index
            density = q * aux[:, capa : capa + 1] if capa >= 0 else q
            surface = self.riemann.surface_interp
            meqn = density.shape[1]
            if surface is not None:
                drytol = self._surface_dry_tolerance()
                density = xp.concatenate(
                    [density, surface_fields(density, aux, *surface, drytol, xp)], axis=1)
            old_forest, old_geom = self.forest, self.geom
            offsets = forest.partition(self.nranks, self.partition_weights(forest))
            lo, hi = int(offsets[self.rank]), int(offsets[self.rank + 1])
            with self.timers("regrid.migrate"):
                src, rows = self._migrate(forest, density, lo, hi)
            del density
            q_new = transfer(old_forest, old_geom, src, forest,
                             PatchGeometry.from_forest(forest, self.mx, self.my, self.mbc),
                             backend=be, new_ids=np.arange(lo, hi), old_rows=rows)
            del src
            self.q = self.aux = None  # the old local arrays are no longer needed
            self._set_forest(forest)
            if (self.lo, self.hi) != (lo, hi):
                raise RuntimeError("distributed regrid: partition_weights not deterministic")
            aux = self.aux[: self.nown]
            if surface is not None:
                gx, gy = forest.global_xy()
                dlev = self.geom.level - old_geom.level[old_forest.locate_global(gx, gy)]
                q_new = surface_regrid(q_new, meqn, aux, *surface, self.mbc, drytol,
                                        self.riemann.surface_regrid, dlev[lo:hi], be)
            if capa >= 0:
                b = self.mbc
                q_new[:, :, b:-b, b:-b] /= aux[:, capa : capa + 1, b:-b, b:-b]
            # halo rows: filled by the next exchange
            self.q = xp.zeros((len(self.l2g),) + q_new.shape[1:], dtype=q_new.dtype)
            self.q[: self.nown] = q_new
            self._full = False
            self._spare = self._spare_of = None
            self.regrids += 1

    def _regridded_forest(self, refine, coarsen):
        """The forest the serial regrid builds from these flags (gathered from the
        owners), or None when nothing changes; the same on every rank."""
        refine = self._host_flags(refine) & (self.geom.level < self.max_level)
        cflags = np.zeros_like(refine)
        if coarsen is not None:
            cflags = self._host_flags(coarsen) & (self.geom.level > self.min_level) & ~refine
        if not refine.any() and not cflags.any():
            return None
        old = self.forest
        forest = old.refine(refine)
        if cflags.any():
            gx, gy = forest.global_xy()
            src = old.locate_global(gx, gy)
            forest = forest.coarsen(cflags[src] & (old.level[src] == forest.level))
        forest = forest.balance()
        return None if forest == old else forest

    def _migrate(self, forest, density, lo, hi):
        """Receive from their current owners the old patches (whole, ghosts included)
        that cover the patches ``lo:hi`` of ``forest`` (this rank's under its new
        partition).  Returns (rows: the owned old patches' ``density``, then the
        received ones; their row per old leaf, -1 for the others)."""
        from forestpy.forest import MAX_LEVEL

        gx, gy = forest.global_xy()
        gx, gy, lvl = gx[lo:hi], gy[lo:hi], forest.level[lo:hi]
        half = np.left_shift(1, MAX_LEVEL - lvl - 1)
        need = _distinct(self.forest.n, *[
            self.forest.locate_global(gx + ox * half, gy + oy * half)
            for ox, oy in ((0, 0), (1, 0), (0, 1), (1, 1))])
        need = need[(need < self.lo) | (need >= self.hi)]
        owner = np.searchsorted(self.offsets, np.arange(self.forest.n), side="right") - 1
        n = self.nown
        rows = np.full(self.forest.n, -1, dtype=np.int64)
        rows[self.lo : self.hi] = np.arange(n)
        rows[need] = n + np.arange(len(need))
        src = self.xp.empty((n + len(need),) + density.shape[1:], dtype=density.dtype)
        src[:n] = density
        self.migrated += int(self.comm.allreduce(len(need)))
        self._exchange(src, self._schedule(need, owner, rows), send_arr=density)
        return src, rows

    # ------------------------------------------------------------------ stepping
    def step(self, dt: float) -> tuple[bool, float]:
        """One step of the owned patches (see Simulation.step): halo exchange, ghost
        fill of owned patches, step kernel on the owned patches, remote edge fluxes, time
        sync of owned coarse patches, Allreduced Courant number/checks.  With
        ``overlap`` (default) the halo travels while the patches that need no remote
        data are stepped (:meth:`_step_overlapped`)."""
        self._localize()
        self._root_copy = None  # the state changes
        n, xp = self.nown, self.xp
        if self.overlap and self.vtable.b4step is None:
            q_new, cfl, edge = self._step_overlapped(dt)
        else:
            self.fill_ghosts()
            if self.vtable.b4step is not None:
                with self.timers("sources"):
                    self.vtable.b4step(self, dt)
            with self.timers("step"):
                q_new, edge, cfl = self._new_state(), self._new_edge(), xp.zeros(0)
                if n:
                    cfl = self.vtable.step(self.q[:n], self.aux[:n], self.local_arrays, dt,
                                           out=q_new[:n], edge_out=edge[:n])[1]
        self._exchange(edge, self.edge_exchange)
        with self.timers("time_sync"):
            self.solver.time_sync(self.owned_sync_plan, self.q, q_new, self.aux, edge, dt)
        if self.vtable.src2 is not None:  # on every rank: a hook may communicate
            with self.timers("sources"):
                self._owned_hook(q_new, dt)
        with self.timers("cfl_check"):
            status = self._global_status(q_new[:n], cfl)
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
        self._spare, self.q = self.q, q_new
        self._spare_of = q_new  # the spare may be reused while self.q is q_new
        self.t += dt
        self.steps += 1
        self.cell_updates += self.geom.npatch * self.mx * self.my
        return True, courant

    def _owned_hook(self, q_new, dt) -> None:
        """``src2`` on the owned patches only (the halo rows are refreshed by the next
        exchange): the hook sees the owned rows of ``q``/``aux``/centres, and, while it
        runs, ``geom``, ``patch_arrays`` and ``centers_host`` of the owned patches (the
        GeoClaw hook reads them).  Called on every rank, also one owning no patch
        (empty arrays), so that a hook may use collectives (``sim.comm``)."""
        n = self.nown
        copy_ghost_frame(self.q[:n], q_new[:n], self.mbc)  # the hook sees no unset memory
        x, y = self.centers
        saved = self.geom, self.patch_arrays, self.centers_host
        self.geom, self.patch_arrays = self.owned_geom, self.owned_arrays
        self.centers_host = tuple(c[:n] for c in saved[2])
        try:
            self.vtable.src2(q_new[:n], self.aux[:n], x[:n], y[:n], self.t, dt)
        finally:
            self.geom, self.patch_arrays, self.centers_host = saved

    def _new_state(self):
        """The array the step writes: the previous state's array when nothing replaced
        ``q`` since (its rows are finite states of two steps ago; the owned rows are
        overwritten, the halo rows refreshed by the next exchange), else a copy."""
        if self._spare is not None and self._spare_of is self.q and \
                self._spare.shape == self.q.shape:
            return self._spare
        return self.q.copy()

    def _new_edge(self):
        """The edge fluxes of a step: owned rows (every entry written by the step
        kernel) then the edge halo (every row received), so left unset."""
        return self.xp.empty((self.n_edge_rows, 4, self.riemann.num_eqn,
                              max(self.mx, self.my)))

    def _step_kernel(self, group, dt, q_new, edge):
        """Step kernel on the owned patches ``group``, into their rows of ``q_new``
        (interiors: its ghost cells keep finite values of an earlier state) and
        ``edge``; returns their Courant numbers.  A contiguous group is stepped in
        place, another one gathered and its results scattered back."""
        if group.n == 0:
            return self.xp.zeros(0)
        sel = group.sel
        if isinstance(sel, slice):
            return self.vtable.step(self.q[sel], self.aux[sel], group.arrays, dt,
                                    out=q_new[sel], edge_out=edge[sel])[1]
        q_g, cfl, edge_g = self.vtable.step(self.q[sel], self.aux[sel], group.arrays, dt)
        edge[sel] = edge_g
        b = self.mbc
        q_new[sel, :, b:-b, b:-b] = q_g[:, :, b:-b, b:-b]  # q_g's ghost cells are unset
        return cfl

    def _fill_group(self, plan, group) -> None:
        """Ghost fill of the destinations in ``plan``, then the physical boundaries of
        the patches of ``group``."""
        q, be = self.q, self.backend
        if self.riemann.surface_interp is None:
            fill_ghosts(plan, q, self.riemann.positive, backend=be, timers=self.timers)
        else:
            full, self.ghost_plan = self.ghost_plan, plan
            try:
                self._fill_ghosts_surface(q, *self.riemann.surface_interp)
            finally:
                self.ghost_plan = full
        with self.timers("ghost_fill.physical_bc"):
            apply_physical_bc(q, self.geom, self.bc, self.riemann.wall_reflect, self.t,
                              self.aux, centers=self._centers_of, backend=be,
                              sides=group.sides)

    def _step_overlapped(self, dt):
        """The overlapping step of de la Asuncion et al. (2012): post the halo receives,
        pack and send; fill the ghosts of, and step, the early patches (no remote data);
        wait; fill the ghosts of, and step, the late patches.  The same arithmetic per
        patch as the plain step, so the result is bitwise the same.

        On the GPU (a step that takes a patch list, ``rows``) the owned patches go in
        two launches that write straight into the new state: the first
        ``early_split`` of the early patches, then, once the halo has arrived and the
        late ghosts are filled, the late patches followed by the remaining early ones.
        The host waits for MPI while the device runs the first launch, and the late
        patches (too few to fill the device alone) run beside the remaining early
        ones instead of as an under-filled launch of their own.  On a real GPU the
        halo unpack and the late ghost fill go to a high-priority side stream
        (:class:`_SideStream`), so that they run beside the first launch rather than
        queued after it.

        Otherwise, when the late patches are few (at most ``whole_range_fraction`` of
        the owned ones), the early kernel runs on the whole owned range, a view, and
        the late patches' results of that call (made with ghost cells not yet filled)
        are replaced by those of the late call: a little redundant work instead of
        gathering and scattering every early patch (they are not contiguous)."""
        early, late = self.early, self.late
        q, xp = self.q, self.xp
        n = self.nown
        if self._patch_list_step():
            return self._step_two_launches(dt)
        whole = 0 < late.n <= self.whole_range_fraction * n
        with self.timers("exchange"):
            pending = self._post(q, self.q_exchange)
        with self.timers("ghost_fill"):
            self._fill_group(self.early_plan, early)
        with self.timers("step"):
            q_new, edge = self._new_state(), self._new_edge()
            if whole:
                cfl = self.vtable.step(q[:n], self.aux[:n], self.local_arrays, dt,
                                       out=q_new[:n], edge_out=edge[:n])[1]
            else:
                cfl_e = self._step_kernel(early, dt, q_new, edge)
        with self.timers("exchange"):
            self._complete(q, self.q_exchange, pending)
        # the costs the overlap adds (a second fill pass, the late kernel): sub-phases
        with self.timers("ghost_fill"), self.timers("ghost_fill.late"):
            self._fill_group(self.late_plan, late)
        with self.timers("step"), self.timers("step.late"):
            cfl_l = self._step_kernel(late, dt, q_new, edge)
            if whole:
                cfl[late.rows] = cfl_l
            else:
                cfl = xp.concatenate([cfl_e, cfl_l])  # only its maximum is used
        return q_new, cfl, edge

    def _patch_list_step(self) -> bool:
        """Whether the step kernel takes a patch list (``rows``): GPU Clawpack."""
        got = self.__dict__.get("_rows_ok")
        if got is None:
            import inspect

            try:
                params = inspect.signature(self.vtable.step).parameters
            except (TypeError, ValueError):
                params = {}
            got = self._rows_ok = self.backend.is_gpu and "rows" in params
        return got

    def _step_two_launches(self, dt):
        """The overlapped step in two patch-list launches (see _step_overlapped)."""
        if not self._wave_planned:  # the kernel is compiled after its first launch
            waves = getattr(self.solver, "blocks_per_wave", None)
            self._plan_two_launches(waves(self.local_arrays) if waves else None)
        q, n = self.q, self.nown
        args = (q[:n], self.aux[:n], self.local_arrays, dt)
        with self.timers("exchange"):
            pending = self._post(q, self.q_exchange)
        with self.timers("ghost_fill"):
            self._fill_group(self.early_plan, self.early)
        side = self._side_stream()
        side.follow_default()  # the early ghosts and the previous step are in q
        with self.timers("step"):
            q_new, edge, cfl = self._new_state(), self._new_edge(), self.xp.zeros(n)
            out = dict(out=q_new[:n], edge_out=edge[:n], cfl_out=cfl)
            self.vtable.step(*args, rows=self.first_rows, **out)
        # on the side stream, beside the first launch: the unpack writes only halo rows
        # and the late fill only the late patches' ghost cells, neither read by it
        with side.active():
            with self.timers("exchange"):
                self._complete(q, self.q_exchange, pending)
            with self.timers("ghost_fill"), self.timers("ghost_fill.late"):
                self._fill_group(self.late_plan, self.late)
        side.join_default()
        with self.timers("step"), self.timers("step.second"):
            self.vtable.step(*args, rows=self.second_rows, **out)
        return q_new, cfl, edge

    def _side_stream(self):
        """The stream of the late patches' side of the overlapped GPU step (the halo
        unpack and the late ghost fill): a high-priority stream on a real GPU, so that
        it runs while the first launch occupies the device; the default stream itself
        (no concurrency) in the simulator."""
        side = self.__dict__.get("_side")
        if side is None:
            be = self.backend
            side = self._side = _SideStream(be.is_gpu and not be.simulator)
        return side

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

    def _validate_all(self, q_new, where: str | None = None) -> None:
        """Raise the same StateError on every rank (the first rank's message that found
        a problem in its owned patches)."""
        msg = None
        try:
            if self.nown:
                self._validate(q_new[: self.nown], where or f"step {self.steps + 1}")
        except StateError as err:
            msg = f"rank {self.rank}: {err}"
        msgs = [m for m in self.comm.allgather(msg) if m]
        if msgs:
            raise StateError(msgs[0])


class _SideStream:
    """A second CUDA stream whose work is ordered with the default stream's by events:
    ``follow_default()`` makes it wait for the default stream's work queued so far,
    ``active()`` sends CuPy work and forestpy's patch kernels to it, ``join_default()``
    makes the default stream wait for its work queued so far.  With ``real`` False
    (CPU, CUDA simulator) all three do nothing and the work stays in order."""

    def __init__(self, real: bool):
        self.stream = None
        if real:
            import cupy

            from forestpy.cuda_device import priority_stream

            self.stream = priority_stream()
            self._after_default = cupy.cuda.Event(disable_timing=True)
            self._after_side = cupy.cuda.Event(disable_timing=True)

    def follow_default(self) -> None:
        if self.stream is not None:
            self._after_default.record()  # on the current stream: the default one
            self.stream.wait_event(self._after_default)

    def active(self):
        if self.stream is None:
            return contextlib.nullcontext()
        from forestpy.cuda_device import on_stream

        return on_stream(self.stream)

    def join_default(self) -> None:
        if self.stream is not None:
            import cupy

            self._after_side.record(self.stream)
            cupy.cuda.get_current_stream().wait_event(self._after_side)


def _distinct(n, *ids):
    """The distinct patch ids among the arrays ``ids`` (each id < ``n``), sorted, as
    ``np.unique`` of their concatenation: a mask over the ``n`` leaves, no sort or hash
    of the millions of plan entries a large forest has."""
    seen = np.zeros(n, dtype=bool)
    for a in ids:
        seen[np.asarray(a).ravel()] = True
    return np.flatnonzero(seen)


def _lookup(table, ids):
    """``table[ids]`` (a global -> local lookup), checked: every id must be local."""
    out = table[ids]
    if (out < 0).any():
        raise RuntimeError("distributed layout: a plan reads a patch this rank does not hold")
    return out


def _remap_ghost_plan(plan: dict, g2l) -> dict:
    """The ghost plan's patch ids (column 0 of the triplets and blocks) -> local rows.
    Unused interpolation neighbours (``interp_valid`` False) point at their
    destination."""
    out = {k: v.copy() for k, v in plan.items()}
    for k in ("copy_dst", "copy_src", "avg_dst", "interp_dst", "interp_center"):
        out[k][:, 0] = _lookup(g2l, plan[k][:, 0])
    out["avg_src"][:, 0] = _lookup(g2l, plan["avg_src"][:, 0])
    nbr = np.where(plan["interp_valid"], plan["interp_nbr"][..., 0],
                   plan["interp_dst"][:, None, 0])
    out["interp_nbr"][..., 0] = _lookup(g2l, nbr)
    return out


def _sub_geometry(geom, ids):
    """The geometry of the patches ``ids`` (in that order)."""
    return replace(geom, level=geom.level[ids], gqx=geom.gqx[ids], gqy=geom.gqy[ids],
                   xlower=geom.xlower[ids], ylower=geom.ylower[ids], dx=geom.dx[ids],
                   dy=geom.dy[ids])
