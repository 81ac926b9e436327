"""Local time stepping: each refinement level takes its own time step (subcycling).

A level takes one or two steps per step of the next coarser level (the time ratio
``r``; the space ratio is 2), as in AMRClaw/GeoClaw (variable time ratios) and
ForestClaw (``subcycle = T``, ratio 2).  One *coarse step* of the coarsest level
present is the recursion of Berger and Oliger (1984)::

    advance(l, t, dt):
        step level l from t to t + dt
        if level l + 1 exists:
            r times: advance(l + 1, ..., dt / r);  regrid levels >= l + 1 if due
            time sync of level l with level l + 1
        split sources of level l

* **Ghost cells in time.**  A level's ghost cells are filled from its own level and
  the next finer one at its own time; those covered by the next coarser level, which
  is then at the end of its step, are interpolated in space (the ghost plan's limited
  interpolation, surface-aware for GeoClaw) from the coarse state interpolated in
  time between the start and the end of the coarse step (weights ``1 - i/r, i/r`` for
  substep ``i``).  A convex combination of two states of non-negative depth keeps the
  depth non-negative, and of two lakes at rest is a lake at rest.
* **Conservation.**  The coarse cells beside a finer level used their own flux for the
  whole coarse step; the fine cells used theirs over the substeps.  After the last
  substep the coarse cells take the fine fluxes, summed over the substeps (the time
  sync of :mod:`forestpy.patches.time_sync` over a coarse step: each fine substep adds
  ``dt_f`` times its face terms, measured against the coarse step's starting state), so
  totals change only through the physical boundary, to round-off.
* **Regrids per level** (AMRClaw's cadence): the levels ``>= m`` are regridded once
  level ``m`` has taken ``regrid_interval`` steps since their last regrid, at a time
  when levels ``>= m`` are synchronised; coarser leaves, in the middle of their step,
  stay as they are (:meth:`Simulation.regrid`'s ``frozen_below``; a regrid the 2:1
  balance would carry to them waits for a coarser synchronisation), and their state
  at the start of their step moves with them (``carry``).
* **Time step and ratios.**  Every level step measures its Courant number, hence the
  level's speed; from the speeds and the cells per level the next coarse step picks
  the ratios with the fewest cell updates per unit time and the largest coarse ``dt``
  they allow (:meth:`Subcycler._plan_ratios`).  A level step above ``cfl_max`` rejects
  the whole coarse step: the forest and the state are put back and it is retaken with
  what the speeds now say.  Output times cut the coarse step, so all levels land on
  them together.
* **Hooks.**  ``b4step(sim, dt_c)`` runs once per coarse step (at its start);
  ``src2`` runs once per level step on that level's patches (gathered: ``q``, ``aux``,
  ``x``, ``y`` of the level, its time and ``dt``), after the level's time sync with
  the finer level (the order of the global step: update, time sync, sources), with
  ``sim.hook_rows`` the rows of those patches among the owned ones (None otherwise);
  a hook that takes a context (:mod:`forestpy.hooks`) gets the whole state and the
  level's rows in its context instead (it updates them in place);
  callbacks' ``on_step`` after every coarse step, when all levels are at one time.

Batches are per level: a level's patches go to the step kernel in one call (a patch
list, ``rows``), its ghost cells are filled by the ghost plan's entries for that level
(split once per regrid).  On several MPI ranks every level step exchanges the halo
(the coarse state at the start of its step and the fine edge fluxes too, where the
finer levels need them); the result is bitwise the serial one.  Design and
measurements: docs/time_stepping.md.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numba
import numpy as np

from forestpy.hooks import takes_context
from forestpy.patches.ghost_plan import GhostPlan
from forestpy.patches.time_sync import (
    coarse_face_fluxes,
    correct_coarse,
    fine_face_terms,
    subset_plan,
)
from forestpy.vtable import step_takes_patch_list

__all__ = ["Subcycler", "supports_subcycling"]


def supports_subcycling(sim) -> bool:
    """Whether ``sim`` can subcycle: adaptive, and a step kernel that takes a patch list
    (``rows``)."""
    return sim.max_level > sim.min_level and step_takes_patch_list(sim.vtable.step)


@numba.njit(inline="always")
def _to_time_cell(q, q_old, saved, src, alpha, k, j, i, mbc):
    """Interior cell ``(j, i)`` of the coarse patch ``src[k]``: its value saved, ``q``
    set to the state interpolated in time between ``q_old`` and it (weight ``alpha``
    on the current state, the expression of the array version)."""
    p = src[k]
    y = j + mbc
    x = i + mbc
    for m in range(q.shape[1]):
        v = q[p, m, y, x]
        saved[k, m, j, i] = v
        if alpha == 0.0:
            q[p, m, y, x] = q_old[p, m, y, x]
        else:
            q[p, m, y, x] = (1.0 - alpha) * q_old[p, m, y, x] + alpha * v


@numba.njit(inline="always")
def _restore_cell(q, saved, src, k, j, i, mbc):
    p = src[k]
    for m in range(q.shape[1]):
        q[p, m, j + mbc, i + mbc] = saved[k, m, j, i]


@numba.njit(inline="always")
def _commit_entry(q, q_old, scratch, rows, keep_old, k):
    """Cell ``k`` of the patches ``rows`` (ghost cells included, row-major): its value
    in ``q`` kept in ``q_old`` (when ``keep_old``), then replaced by ``scratch``'s."""
    ny, nx = q.shape[2], q.shape[3]
    p = rows[k // (ny * nx)]
    c = k % (ny * nx)
    j = c // nx
    i = c % nx
    for m in range(q.shape[1]):
        if keep_old:
            q_old[p, m, j, i] = q[p, m, j, i]
        q[p, m, j, i] = scratch[p, m, j, i]


class _Rejected(Exception):
    """A level step's Courant number was above ``cfl_max``: retake the coarse step."""

    def __init__(self, courant):
        self.courant = courant


@dataclass
class LevelPlans:
    """The per-level pieces of one layout, built once per regrid: for each level present,
    its rows (host and backend), the ghost-plan entries whose destination is on it, the
    physical-boundary sides of its patches, the rows of the next coarser level its
    ghost fill reads (``coarse_src``), and the time-sync entries with their fine cell on
    it (coarse cells one level coarser)."""

    layout: object
    levels: list
    rows_host: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)
    ghost: dict = field(default_factory=dict)
    sides: dict = field(default_factory=dict)
    coarse_src: dict = field(default_factory=dict)
    sync: dict = field(default_factory=dict)
    ncells: dict = field(default_factory=dict)

    @classmethod
    def build(cls, sim) -> LevelPlans:
        """The plans of ``sim``'s layout: levels and cell counts of the whole forest
        (every rank plans the same steps), rows and plan entries of this rank's owned
        patches (local rows; coarse sources and fine time-sync partners may be halo
        rows)."""
        be, L, geom = sim.backend, sim.layout, sim.geom
        xp = be.xp
        level = np.asarray(L.local_geom.level)  # of the local rows: owned, then halo
        level_dev = be.to_device(level)
        every = np.asarray(geom.level)
        self = cls(layout=L, levels=sorted(int(v) for v in np.unique(every)))
        # the ghost plan is split by level where it lives (on a GPU: on the device, no
        # copy of the plan crosses the bus); each level's entries keep their order
        plan = L.ghost_plan
        sync = L.sync_plan
        sync_host = None
        if sync is not None:
            from forestpy.patches.time_sync import TimeSyncPlan

            sync_host = TimeSyncPlan(**{k: be.to_host(getattr(sync, k)) for k in (
                "coarse", "fine", "coarse_edge", "fine_edge", "ixy", "sign", "width")},
                nx=sync.nx)
        sides = [be.to_host(s) for s in L.owned_sides]
        dst_level = {k: level_dev[getattr(plan, f"{k}_dst")[:, 0]]
                     for k in ("copy", "avg", "interp")}
        for lv in self.levels:
            rows = np.flatnonzero(level[: L.nown] == lv)
            self.rows_host[lv] = rows
            self.rows[lv] = be.to_device(rows.astype(np.int64))
            self.ncells[lv] = int(np.count_nonzero(every == lv)) * geom.mx * geom.my
            keep = {k: xp.flatnonzero(dst_level[k] == lv) for k in dst_level}
            self.ghost[lv] = GhostPlan(**{
                f: getattr(plan, f)[keep[f.split("_")[0]]]
                for f in GhostPlan.__dataclass_fields__})
            self.sides[lv] = [be.to_device(s[level[s] == lv]) for s in sides]
            interp = keep["interp"]
            src = xp.concatenate([
                plan.interp_center[interp, 0].astype(np.int64),
                xp.where(plan.interp_valid[interp], plan.interp_nbr[interp][..., 0],
                         plan.interp_dst[interp][:, None, 0]).ravel().astype(np.int64)])
            src = xp.unique(src)
            src = src[level_dev[src] == lv - 1]
            self.coarse_src[lv] = (be.to_host(src), src)
            if sync_host is not None and len(sync_host):
                fine_level = level[sync_host.fine[:, 0]]
                sub = subset_plan(sync_host, fine_level == lv)
                if len(sub):
                    self.sync[lv] = sub.to(be)
        return self


class Subcycler:
    """The subcycled coarse step of a :class:`~forestpy.simulation.Simulation` (see the
    module docstring); ``sim.step(dt)`` calls :meth:`coarse_step` when subcycling."""

    def __init__(self, sim):
        self.sim = sim
        self.plans = None
        self.q_old = None  # each patch's state at the start of its level's current step
        self.scratch = None  # the step kernel's output
        self.edge = None
        self.cfl = None
        self.fine_sum = {}  # fine level -> sum over its substeps of dt_f * face terms
        self.coarse_sum = {}  # fine level -> the coarse step's dt * coarse face fluxes
        self.since_regrid = {}  # level -> its steps since the levels >= it were regridded
        self.level_steps = {}  # level -> steps taken (accepted coarse steps)
        self.courant = 0.0
        self.speed = {}  # level -> Courant number per unit time of its last steps
        self.ratio = {}  # level -> its substeps per step of the next coarser level
        # GPU: each level step's Courant number stays on the device, in ``courants``,
        # until the coarse step reads them all at once (``_check_courants``);
        # ``pending`` says which (level, dt) each slot belongs to
        self.defer_courant = sim.backend.is_gpu
        self.courants = None
        self.pending = []
        self.gpu_sync = getattr(sim.solver, "gpu_time_sync", None) if sim.backend.is_gpu \
            else None
        self._buffers = {}  # device scratch of the GPU level steps, by name and level

    # ------------------------------------------------------------------ plans
    def _plans(self) -> LevelPlans:
        sim = self.sim
        if self.plans is None or self.plans.layout is not sim.layout:
            self.plans = LevelPlans.build(sim)
            xp, q = sim.xp, sim.q
            n = q.shape[0]
            if self.scratch is None or self.scratch.shape != q.shape:
                self.scratch = q.copy()  # finite everywhere: rows are copied back whole
            else:
                self.scratch[...] = q
            self.edge = xp.zeros((sim.layout.n_edge_rows, 4, q.shape[1], max(sim.mx, sim.my)))
            self.cfl = xp.zeros(n)
        return self.plans

    @property
    def coarsest(self) -> int:
        return int(self.sim.geom.level.min())

    # ------------------------------------------------------------------ the step
    def coarse_step(self, dt: float) -> tuple[bool, float]:
        """One step ``dt`` of the coarsest level present with every finer level
        subcycled; returns (accepted, largest Courant number of the level steps)."""
        sim = self.sim
        sim._localize()
        sim._root_copy = None
        saved = (sim.forest, sim.q.copy(), sim.regrids, dict(self.since_regrid))
        if set(self.ratio) != set(self._plans().levels[1:]):
            self._plan_ratios()
        self.courant = 0.0
        speed_before, self._speed_now = dict(self.speed), {}
        steps_before = dict(self.level_steps)
        updates = 0
        if sim.vtable.b4step is not None:
            with sim.timers("sources"):
                sim.vtable.b4step(sim, dt)
        def restore():
            """The state, forest and counters of before this coarse step (the level
            steps changed ``sim.q`` in place)."""
            forest, q, regrids, since = saved
            if sim.forest is not forest:
                sim._set_forest(forest)
                self.plans = None
            sim.q = q
            sim.regrids = regrids
            self.since_regrid = since
            self.level_steps = steps_before

        def check(where: str) -> None:
            """Raise the simulation's StateError for a bad state (NaN, negative depth),
            with the state of before this coarse step put back."""
            try:
                sim._validate_owned(sim.q, where)
            except Exception:
                restore()
                raise

        self.pending = []
        try:
            updates = self._advance(self.coarsest, sim.t, dt, 0.0)
            self._check_courants()
        except _Rejected as rejected:
            if not np.isfinite(rejected.courant):
                check(f"step {sim.steps + 1}")
            restore()
            self.speed = {**speed_before, **self._speed_now}  # what the retry must meet
            sim.rejected_steps += 1
            # the retry: new ratios for the speeds now known, a coarse step from them
            return False, max(self._courant_for(dt), rejected.courant * 1e-3)
        with sim.timers("cfl_check"):
            status = sim._global_status(sim.q, sim.xp.zeros(0))
        if sim.check_state and not (
            np.isfinite(status[1]) and all(v >= 0.0 for v in status[2:])
        ):
            check(f"step {sim.steps + 1}")
        sim._spare = sim._spare_of = None
        self.speed.update(self._speed_now)
        sim.t += dt
        sim.steps += 1
        sim.cell_updates += updates
        self._maybe_regrid(self.coarsest)
        return True, self._courant_for(dt)

    def _advance(self, level: int, t: float, dt: float, alpha: float) -> int:
        """Level ``level`` from ``t`` to ``t + dt``, then the finer levels ``r`` times
        each (see the module docstring); returns the cell updates."""
        updates = self._level_step(level, t, dt, alpha)
        if level + 1 in self._plans().levels:
            r = self.ratio.get(level + 1, 2)
            sub = dt / r
            for i in range(r):
                updates += self._advance(level + 1, t + i * sub, sub, i / r)
                if i < r - 1:
                    self._maybe_regrid(level + 1)
            self._sync(level + 1)
        # the split sources after the time sync, as in the global step
        self._sources(level, t, dt)
        return updates

    def _level_step(self, level: int, t: float, dt: float, alpha: float) -> int:
        sim = self.sim
        P = self._plans()
        q, xp, ex, L = sim.q, sim.xp, sim.exchange, sim.layout
        rows = P.rows[level]
        ex.halo(q, L.q_exchange, sim.timers)  # the neighbours' current states
        with sim.timers("ghost_fill"):
            src_host, src = P.coarse_src[level]
            if sim.backend.is_gpu:
                self._fill_gpu(level, q, src_host, src, alpha, t)
            else:
                saved = None
                if len(src_host):  # the coarser level at this level's time
                    saved = q[src]
                    if alpha == 0.0:
                        q[src] = self.q_old[src]
                    else:
                        q[src] = (1.0 - alpha) * self.q_old[src] + alpha * saved
                sim._fill_plan(q, P.ghost[level], P.sides[level], t=t)
                if saved is not None:
                    q[src] = saved
        with sim.timers("step"):
            n = L.nown  # a patch's ghost cells are in its own row: owned rows suffice
            sim.vtable.step(q[:n], sim.aux[:n], L.local_arrays, dt, out=self.scratch[:n],
                            edge_out=self.edge[:n], rows=rows, cfl_out=self.cfl[:n])
        with sim.timers("cfl_check"):
            if self.defer_courant:
                self._keep_courant(level, dt, rows)
            else:
                courant = float(sim.backend.to_host(self.cfl[rows].max())) if len(
                    P.rows_host[level]) else 0.0
                courant = float(ex.allreduce(np.array([courant]), "max")[0])
                self._note_courant(level, dt, courant)
        if level > P.levels[0]:  # the fine edge fluxes of remote patches
            ex.halo(self.edge, L.edge_exchange, sim.timers)
        with sim.timers("time_sync"):
            sync = P.sync.get(level)
            gsync = self.gpu_sync
            if sync is not None and sim.vtable.time_sync is not None:
                if gsync is not None:
                    gsync.add_fine_terms(sync, self.q_old, q, sim.aux, self.edge, dt,
                                         sim.solver.params_on_backend, self.fine_sum[level])
                else:
                    terms = fine_face_terms(sync, self.q_old, q, sim.aux, self.edge,
                                            sim.solver.fluctuations,
                                            sim.solver.params_on_backend
                                            if sim.backend.is_gpu else sim.solver.params, xp)
                    self.fine_sum[level] = self.fine_sum[level] + dt * terms
            finer_level = level + 1 in P.levels  # it reads this level's old state
            fresh = finer_level and (self.q_old is None or self.q_old.shape != q.shape)
            if fresh:
                self.q_old = q.copy()
            if sim.backend.is_gpu:  # nothing reads the level's rows of q any more
                self._commit_gpu(q, rows, len(P.rows_host[level]), finer_level)
            if finer_level:
                if not fresh and not sim.backend.is_gpu:
                    self.q_old[rows] = q[rows]
                ex.halo(self.q_old, L.q_exchange, sim.timers)
                finer = P.sync.get(level + 1)
                if finer is not None and gsync is not None:
                    shape = (len(finer) // 2, q.shape[1])
                    self.coarse_sum[level + 1] = self._buffer("coarse_sum", level + 1, shape)
                    self.fine_sum[level + 1] = self._buffer("fine_sum", level + 1, shape)
                    gsync.start_coarse_sums(finer, self.edge, dt, self.coarse_sum[level + 1],
                                            self.fine_sum[level + 1])
                elif finer is not None:
                    self.coarse_sum[level + 1] = dt * coarse_face_fluxes(finer, self.edge)
                    self.fine_sum[level + 1] = xp.zeros_like(self.coarse_sum[level + 1])
        if not sim.backend.is_gpu:
            q[rows] = self.scratch[rows]
        self.level_steps[level] = self.level_steps.get(level, 0) + 1
        self.since_regrid[level] = self.since_regrid.get(level, 0) + 1
        return P.ncells[level]

    def _sources(self, level: int, t: float, dt: float) -> None:
        """``src2`` on the patches of ``level`` (gathered; ``sim.hook_rows`` names them)."""
        sim = self.sim
        if sim.vtable.src2 is None:
            return
        P = self._plans()
        rows = P.rows[level]
        with sim.timers("sources"):
            src2 = sim.vtable.src2
            if takes_context(src2):  # in place on the level's rows: no gather, no scatter
                own = sim._owned  # the rows index the owned patches, first in the arrays
                src2.apply(own(sim.q), own(sim.aux),
                           sim.hook_context(t, dt, rows, P.rows_host[level]))
                return
            x, y = sim.centers
            sim.hook_rows = P.rows_host[level]
            try:
                q_l = sim.q[rows]
                src2(q_l, sim.aux[rows], x[rows], y[rows], t, dt)
                sim.q[rows] = q_l
            finally:
                sim.hook_rows = None

    def _sync(self, fine_level: int) -> None:
        """The coarse cells beside ``fine_level`` take the fine fluxes of its two
        substeps."""
        sim = self.sim
        sync = self._plans().sync.get(fine_level)
        if sync is None or sim.vtable.time_sync is None:
            return
        with sim.timers("time_sync"):
            fine, coarse = self.fine_sum.pop(fine_level), self.coarse_sum.pop(fine_level)
            if self.gpu_sync is not None:
                self.gpu_sync.correct(sync, sim.q, sim.aux, fine, coarse, sim.capacity_index)
            else:
                correct_coarse(sync, sim.q, sim.aux, fine, coarse, sim.capacity_index)

    # ------------------------------------------------------------------ GPU pieces
    def _buffer(self, name: str, level: int, shape, dtype=np.float64):
        """A device scratch array ``shape`` kept between coarse steps (made again when
        the shape changes: a regrid)."""
        key = (name, level)
        buf = self._buffers.get(key)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = self._buffers[key] = self.sim.xp.empty(shape, dtype=dtype)
        return buf

    def _fill_gpu(self, level: int, q, src_host, src, alpha: float, t: float) -> None:
        """The level's ghost fill with the coarser level at this level's time: the
        coarse source patches' interiors (all the plan reads of them) set to the time
        interpolation and put back after the fill, one launch each way."""
        from forestpy.patches.launch import launch_cells

        sim, P = self.sim, self._plans()
        n = len(src_host)
        if n:
            saved = self._buffer("saved", level, (n, q.shape[1], sim.my, sim.mx), q.dtype)
            launch_cells(_to_time_cell, n, sim.my, sim.mx, sim.mbc, q, self.q_old, saved, src,
                         float(alpha), backend=sim.backend)
        sim._fill_plan(q, P.ghost[level], P.sides[level], t=t)
        if n:
            launch_cells(_restore_cell, n, sim.my, sim.mx, sim.mbc, q, saved, src,
                         backend=sim.backend)

    def _commit_gpu(self, q, rows, n: int, keep_old: bool) -> None:
        """Whole patches ``rows`` (``n`` of them): ``q_old = q`` (when ``keep_old``),
        then ``q = scratch`` (the step's output), in one launch."""
        from forestpy.patches.launch import launch

        ny, nx = q.shape[2], q.shape[3]
        # without keep_old the scratch stands in for q_old, unused (not q itself: the
        # CUDA simulator copies each argument back after the kernel)
        launch(_commit_entry, n * ny * nx, q, self.q_old if keep_old else self.scratch,
               self.scratch, rows, keep_old, backend=self.sim.backend)

    def _keep_courant(self, level: int, dt: float, rows) -> None:
        """The level step's Courant number into the next slot of the device record."""
        from forestpy.patches.status import courant_of_rows

        slot = len(self.pending)
        if self.courants is None or slot >= self.courants.shape[0]:
            grown = self.sim.xp.zeros(max(16, 2 * slot))
            if slot:
                grown[:slot] = self.courants[:slot]
            self.courants = grown
        courant_of_rows(self.cfl, rows, self.courants, slot)
        self.pending.append((level, dt))

    def _check_courants(self) -> None:
        """The level steps' Courant numbers kept on the device, read in one transfer and
        taken in order as the CPU takes each at once (speeds, then a rejection at the
        first above ``cfl_max``).  Called before anything that would act on a state a
        rejected level step made (a regrid) and at the end of the coarse step; the level
        steps after a rejected one only made work that the retake discards."""
        if not self.pending:
            return
        sim = self.sim
        pending, self.pending = self.pending, []
        with sim.timers("cfl_check"):
            values = sim.backend.to_host(self.courants[: len(pending)])
            values = sim.exchange.allreduce(np.asarray(values, dtype=np.float64), "max")
        for (level, dt), courant in zip(pending, values):
            self._note_courant(level, dt, float(courant))

    def _note_courant(self, level: int, dt: float, courant: float) -> None:
        """A level step's Courant number: its level's speed, then a rejection of the
        coarse step above ``cfl_max`` (or NaN)."""
        if dt > 0.0:
            self._speed_now[level] = max(self._speed_now.get(level, 0.0), courant / dt)
        if not courant <= self.sim.cfl_max:  # NaN too
            raise _Rejected(courant)
        self.courant = max(self.courant, courant)

    def _plan_ratios(self) -> float:
        """Each level's substeps per step of the next coarser level, 1 or 2 (GeoClaw's
        variable time refinement ratios), into ``self.ratio``; returns the largest coarse
        step the plan allows.  From each level's speed (Courant number per unit time of
        its last steps; a level not yet measured is taken twice as fast as the next
        coarser one, i.e. the same wave speed) and its cells, the plan with the fewest
        cell updates per unit time: a finer level in slower water than its coarser
        neighbour steps with it, and one in faster water does not force every coarser
        level down to its step."""
        sim = self.sim
        P = self._plans()
        levels = P.levels
        speed, known, known_level = {}, None, 0
        for lv in levels:
            v = self.speed.get(lv)
            if v is None and known is not None:
                v = known * 2.0 ** (lv - known_level)
            if v is not None:
                known, known_level = v, lv
            speed[lv] = v
        first = next((lv for lv in levels if speed[lv] is not None), None)
        if first is None:  # nothing measured yet: ratio 2, the step as estimated
            self.ratio = {lv: 2 for lv in levels[1:]}
            return math.inf
        for lv in levels:  # levels coarser than the first measured: same wave speed
            if speed[lv] is None:
                speed[lv] = speed[first] * 2.0 ** (lv - first)
        best = None
        # every combination up to 10 levels (512); beyond, ratio 2 everywhere
        combos = (itertools.product((1, 2), repeat=len(levels) - 1) if len(levels) <= 10
                  else [(2,) * (len(levels) - 1)])
        for combo in combos:
            total, dt_max, cost = 1, math.inf, 0.0
            for i, lv in enumerate(levels):
                if i:
                    total *= combo[i - 1]
                if speed[lv] > 0.0:
                    dt_max = min(dt_max, sim.cfl_desired / speed[lv] * total)
                cost += P.ncells[lv] * total
            rate = cost / dt_max if math.isfinite(dt_max) else cost
            if best is None or rate < best[0] * (1.0 - 1e-12):
                best = (rate, dt_max, combo)
        self.ratio = dict(zip(levels[1:], best[2]))
        return best[1]

    def _courant_for(self, dt: float) -> float:
        """The Courant number that makes the driver's next coarse step the one the
        ratio plan allows (``dt cfl_desired / courant``)."""
        dt_max = self._plan_ratios()
        if not math.isfinite(dt_max):  # nothing measured: the level steps' largest
            return self.courant
        return dt * self.sim.cfl_desired / dt_max

    # ------------------------------------------------------------------ regrids
    def _maybe_regrid(self, synced: int) -> None:
        """Regrid the levels ``>= m`` for the coarsest ``m >= synced`` that has taken
        ``regrid_interval`` steps since they were last regridded (levels ``>= synced``
        are at one time)."""
        sim = self.sim
        every = sim.regrid_interval
        if not every:
            return
        due = [lv for lv in self._plans().levels
               if lv >= synced and self.since_regrid.get(lv, 0) >= every]
        if not due:
            return
        m = min(due)
        for lv in list(self.since_regrid):
            if lv >= m:
                self.since_regrid[lv] = 0
        frozen = None if m <= self.coarsest else m
        if frozen is not None and m >= sim.max_level:  # nothing to refine or coarsen
            return
        # the frozen leaves, in the middle of their step, keep their old state: it moves
        # with the state (a copy for a leaf that stays, on whichever rank gets it)
        carry = self.q_old if frozen is not None and self.q_old is not None else None
        self._check_courants()  # no regrid of a state a rejected level step made
        changed = sim.regrid(frozen_below=frozen, carry=carry)
        if not changed:
            return
        self.q_old = sim.carried
        sim.carried = None
        self.plans = None
        if self.q_old is not None:
            sim.exchange.halo(self.q_old, sim.layout.q_exchange, sim.timers)
