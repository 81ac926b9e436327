"""Simulation: forest + patches + solver + options + clock.

One global time step (DESIGN.md section 6):

1. fill ghosts (execute the plan, then physical boundaries)
2. ``b4step`` hook
3. batched patch kernel -> new q, Courant number per patch, edge fluxes
4. CFL check: above ``cfl_max`` the step is discarded and retaken with a smaller dt
5. time sync (coarse-fine conservation fix)
6. split source terms
7. advance t; callbacks
8. every ``regrid_interval`` steps: tag -> refine/coarsen/balance -> transfer -> new plan

A serial run is a distributed run on one rank: the step, the ghost fill and the regrid
work on the patches of ``self.layout`` (:class:`~forestpy.parallel.layout.Layout`:
serially every patch) and move data through ``self.exchange``
(:class:`~forestpy.parallel.exchange.Exchange`: serially nothing to send).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from forestpy.backend import get_backend
from forestpy.forest import MAX_LEVEL, Brick, Forest
from forestpy.forest.kernels import family_starts
from forestpy.hooks import HookContext, HookGeometry, takes_context
from forestpy.indicators import ThresholdFlags, indicator_undivided_difference
from forestpy.parallel.exchange import BUILD_COMM, Exchange, MPIExchange
from forestpy.parallel.layout import Layout, distinct_ids
from forestpy.patches import (
    PatchGeometry,
    apply_physical_bc,
    fill_ghosts,
    normalize_bc,
    transfer,
)
from forestpy.patches.ghost_plan import copy_ghost_frame
from forestpy.patches.status import launch_step_status, patch_status, step_status
from forestpy.patches.surface_ghosts import fill_ghosts_surface
from forestpy.patches.surface_regrid import ShorelineRegrid, surface_dry_tolerance
from forestpy.patches.tagging import TaggedPatches, regrid_flags
from forestpy.precision import check_precision
from forestpy.timers import Timers, phase
from forestpy.vtable import SolverVtable, get_method, get_riemann, step_takes_patch_list

__all__ = ["Domain", "Simulation", "StateError"]


class StateError(RuntimeError):
    """The solution became invalid (NaN/Inf or a negative depth/density)."""


@dataclass(frozen=True)
class Domain:
    """A rectangle covered by a brick of ``ntrees`` unit trees, optionally periodic."""

    lower: tuple[float, float] = (0.0, 0.0)
    upper: tuple[float, float] = (1.0, 1.0)
    ntrees: tuple[int, int] = (1, 1)
    periodic: tuple[bool, bool] = (False, False)

    def brick(self) -> Brick:
        return Brick(
            nx=self.ntrees[0],
            ny=self.ntrees[1],
            periodic_x=self.periodic[0],
            periodic_y=self.periodic[1],
            lower=tuple(self.lower),
            upper=tuple(self.upper),
        )


class Simulation:
    """An adaptive simulation of one hyperbolic system on a quadtree forest of patches.

    Parameters
    ----------
    riemann : str or RiemannSolver
        Registered name or record of the pointwise Riemann solver.
    qinit : callable
        ``qinit(x, y) -> q`` of shape ``(num_eqn,) + x.shape`` at cell centres.
    domain : Domain
        Rectangle, number of trees and periodicity.
    mx, my, mbc : int
        Cells per patch and ghost layers (``mbc >= 2``).
    min_level, max_level : int
        Coarsest and finest refinement level (uniform grid when equal).
    bc : str, sequence or dict
        Physical boundary conditions, see :mod:`forestpy.patches.boundary`.
    params : dict
        Riemann-solver parameters (e.g. ``{"grav": 1.0}``).
    method : str
        Registered numerical method (:func:`~forestpy.vtable.register_method`) that
        turns the Riemann solver into batched step kernels; ``"clawpack"``: Clawpack's
        wave propagation.
    order, transverse_waves, limiter, capacity_index :
        Options of the method.
    cfl_desired, cfl_max : float
        Target and largest accepted Courant number.
    dt_initial : float or None
        First trial time step; by default estimated from the initial wave speeds.
    refine_threshold, coarsen_threshold, tag_field : float, float, int
        Default tagging: undivided difference of ``q[tag_field]``.
    tag : callable, optional
        ``tag(q, aux, geom, t) -> bool[npatch]`` replacing the default refinement flags
        (then nothing coarsens unless ``coarsen_threshold`` or ``coarsen`` is given).
        With an attribute ``takes_context = True`` it is called with ``ctx=`` a
        :class:`~forestpy.hooks.HookContext` too, on every rank of a distributed run
        (also one owning no patch), so it may reduce over the ranks
        (``ctx.allreduce``), as :func:`~forestpy.indicators.indicator_wavelet` does.
    coarsen : callable, optional
        ``coarsen(q, aux, geom, t) -> bool[npatch]`` replacing the default coarsening
        flags (see :mod:`forestpy.indicators` for criteria).
    regrid_flags : callable, optional
        A regrid criterion giving both flags in one pass on the backend
        (:mod:`forestpy.patches.tagging`), replacing ``tag`` and ``coarsen`` in the
        regrids (they still fill the vtable's slots).  By default the thresholds of the
        undivided difference (:class:`~forestpy.indicators.ThresholdFlags`) unless
        ``tag`` or ``coarsen`` is given.
    regrid_interval : int
        Steps between regrids (0: never); when subcycling, steps of a level between
        regrids of the levels at and above it (AMRClaw's cadence).
    subcycle : bool or None
        Local time stepping: each level takes its own dt, one or two steps per step of
        the next coarser level (:mod:`forestpy.subcycling`).  It applies to adaptive
        serial runs whose method's step takes a patch list (the Clawpack method does);
        otherwise every level takes the finest level's dt.  None (default): on for the
        CPU backend, off for the GPU one (its per-level launches cost more than the
        saved cell updates today: docs/performance.md).
    setaux, src2, b4step : callable, optional
        Vtable hooks (see :class:`~forestpy.vtable.SolverVtable`).
    physical_bc : callable, optional
        ``physical_bc(q, aux, t, sides)`` filling the ghost cells outside the domain of
        the patches ``sides`` (four index arrays, one per side), replacing the
        framework's, which applies ``bc``.
    callbacks : sequence
        Objects with optional ``on_start(sim)``, ``on_step(sim)``, ``on_end(sim)``;
        ``next_time(sim)`` (optional) names a time the steps must land on exactly (an
        output time), ``timer_phase`` (optional) the timer their calls are charged to
        (``"output"`` for writers; ``"callbacks"`` by default).  ``deferrable = True``
        (optional) says that ``on_step`` only reads the interior of ``sim.q`` (and
        ``aux``, ``t``, the forest) through work ordered on the device's stream, as
        :class:`~forestpy.callbacks.Gauges` and GeoClaw's ``FGMax`` do: a serial GPU
        run whose ``on_step`` callbacks all say so runs them while the next step is on
        the device (after its launch, before its status is read), with the same
        results.
    backend : str or Backend
        ``"cpu"`` or ``"gpu"`` (patch arrays resident on the GPU for the whole run).
    dtype : str
        ``"float64"``, or ``"float32"`` storage of the fields on the GPU.
    precision : str
        Arithmetic of the GPU step kernel (:mod:`forestpy.precision`): ``"float64"``
        (default), ``"float32"`` (implies ``dtype="float32"``) or ``"mixed"`` (FP64
        storage, normal solve and update; limiter and transverse terms in FP32).
    t_final : float
        Default end time for :meth:`run`.
    comm : MPI communicator, optional
        Share the patches over its ranks (every rank builds the simulation with the
        same arguments; the initial refinement is distributed too): the simulation's
        layout is then this rank's share and its exchange an
        :class:`~forestpy.parallel.exchange.MPIExchange`.  Default: one rank (inside
        :func:`~forestpy.parallel.build_distributed`, that communicator).
    overlap : bool, optional
        With ``comm``: step the patches that need no remote data while the halo travels
        (default: on the GPU backend only).

    Examples
    --------
    >>> import numpy as np
    >>> from forestpy import Simulation, Domain
    >>> sim = Simulation("advection", qinit=lambda x, y: np.exp(-50 * x**2)[None] + 0 * y,
    ...                  domain=Domain((-1, -1), (1, 1), periodic=(True, True)),
    ...                  bc="periodic", mx=8, min_level=2, max_level=2, t_final=0.1)
    >>> sim.run().steps > 0
    True
    """

    OPTION_DEFAULTS = dict(
        mx=16,
        my=None,
        mbc=2,
        min_level=2,
        max_level=None,
        bc="extrap",
        params=None,
        method="clawpack",
        order=2,
        transverse_waves=2,
        limiter="mc",
        capacity_index=-1,
        cfl_desired=0.9,
        cfl_max=1.0,
        dt_initial=None,
        dt_max=math.inf,
        refine_threshold=0.1,
        coarsen_threshold=None,
        tag_field=0,
        tag=None,
        coarsen=None,
        regrid_flags=None,
        physical_bc=None,
        regrid_interval=2,
        setaux=None,
        src2=None,
        b4step=None,
        callbacks=(),
        backend="cpu",
        dtype="float64",
        precision="float64",
        t_final=1.0,
        name="simulation",
        check_state=True,
        subcycle=None,
        gpu_graph=None,
    )

    def __init__(self, riemann, *, qinit: Callable, domain: Domain | None = None, comm=None,
                 overlap: bool | None = None, **options):
        unknown = set(options) - set(self.OPTION_DEFAULTS)
        if unknown:
            raise TypeError(
                f"unknown Simulation option(s) {sorted(unknown)}; valid: "
                f"{sorted(self.OPTION_DEFAULTS)}"
            )
        opts = {**self.OPTION_DEFAULTS, **options}
        self.precision = check_precision(opts["precision"])
        if self.precision == "float32":
            if "dtype" not in options:
                opts["dtype"] = "float32"
            elif np.dtype(opts["dtype"]) != np.float32:
                raise ValueError(f"precision='float32' computes on float32 fields, not "
                                 f"dtype={opts['dtype']!r} (use precision='mixed' for FP64 "
                                 "storage)")
        self.riemann = get_riemann(riemann)
        self.domain = domain or Domain()
        self.backend = get_backend(opts["backend"], opts["dtype"])
        self.xp = self.backend.xp
        self.dtype = self.backend.dtype
        self.name = opts["name"]
        self.mx = int(opts["mx"])
        self.my = int(opts["my"] or opts["mx"])
        self.mbc = int(opts["mbc"])
        if self.mbc < 2:
            raise ValueError(
                f"mbc={self.mbc}: the second-order wave-propagation kernel needs mbc >= 2"
            )
        self.min_level = int(opts["min_level"])
        self.max_level = int(opts["max_level"] if opts["max_level"] is not None else self.min_level)
        if not 0 <= self.min_level <= self.max_level < MAX_LEVEL - 1:
            raise ValueError(
                f"need 0 <= min_level ({self.min_level}) <= max_level ({self.max_level}) "
                f"< {MAX_LEVEL - 1}"
            )
        self.cfl_desired = float(opts["cfl_desired"])
        self.cfl_max = float(opts["cfl_max"])
        if not 0 < self.cfl_desired <= self.cfl_max:
            raise ValueError(
                f"need 0 < cfl_desired ({self.cfl_desired}) <= cfl_max ({self.cfl_max})"
            )
        self.dt_max = float(opts["dt_max"])
        if not self.dt_max > 0:  # also NaN; infinity: no cap
            raise ValueError(f"need dt_max > 0, got {self.dt_max}")
        if opts["dt_initial"] is not None and not 0 < float(opts["dt_initial"]) < math.inf:
            raise ValueError(f"need a finite dt_initial > 0, got {opts['dt_initial']}")
        self.regrid_interval = int(opts["regrid_interval"])
        self.t_final = float(opts["t_final"])
        if not 0 <= self.t_final < math.inf:  # also NaN
            raise ValueError(f"need a finite t_final >= 0, got {self.t_final}")
        self.check_state = bool(opts["check_state"])
        self.subcycle = (not self.backend.is_gpu if opts["subcycle"] is None
                         else bool(opts["subcycle"]))
        # one-dt GPU steps replayed as CUDA graphs (forestpy.step_graph); on by default,
        # FORESTPY_GPU_GRAPH=0 turns it off for any run that does not set the option
        self.gpu_graph = (os.environ.get("FORESTPY_GPU_GRAPH", "1") != "0"
                          if opts["gpu_graph"] is None else bool(opts["gpu_graph"]))
        # deferrable on_step callbacks run while the next step is on the device: None
        # is on for GPU runs (FORESTPY_DEFER_CALLBACKS=0 turns it off), True or False
        # forces it (on the CPU the step is done by then: nothing is hidden)
        self.defer_callbacks = None
        self.hook_rows = None  # the owned rows a src2 call sees (subcycled level steps)
        self.params = self.riemann.params_array(opts["params"])
        self.bc = normalize_bc(opts["bc"], *self.domain.periodic)

        self.solver = get_method(opts["method"])(
            self.riemann,
            order=opts["order"],
            transverse_waves=opts["transverse_waves"],
            limiter=opts["limiter"],
            capacity_index=opts["capacity_index"],
            backend=self.backend,
            **({} if self.precision == "float64" else {"precision": self.precision}),
        )
        self.solver.set_params(self.params)
        self.capacity_index = self.solver.capacity_index
        coarsen = opts["coarsen_threshold"]
        if coarsen is None:
            coarsen = 0.5 * float(opts["refine_threshold"])
        field = int(opts["tag_field"])
        if not 0 <= field < self.riemann.num_eqn:
            raise ValueError(f"tag_field={field} out of range for {self.riemann.num_eqn} fields")
        # slots filled in layers: the method's, then the framework's default refinement
        # criterion, then what the application or the user passes as options
        default = ThresholdFlags(indicator_undivided_difference(field),
                                 opts["refine_threshold"], coarsen)
        tag4refinement, tag4coarsening = default.tag4refinement, default.tag4coarsening
        tag4regrid = default
        if opts["tag"] is not None:
            tag4refinement = opts["tag"]
            tag4regrid = None
            if options.get("coarsen_threshold") is None:
                tag4coarsening = None  # custom refinement flags: coarsen only when asked
        if opts["coarsen"] is not None:
            tag4coarsening = opts["coarsen"]
            tag4regrid = None
        if opts["regrid_flags"] is not None:
            tag4regrid = opts["regrid_flags"]
        self.vtable = SolverVtable(
            qinit=qinit,
            setaux=opts["setaux"],
            step=self.solver.step,
            time_sync=getattr(self.solver, "time_sync", None),  # optional for a method
            b4step=opts["b4step"],
            src2=opts["src2"],
            physical_bc=opts["physical_bc"] or self._physical_bc,
            tag4refinement=tag4refinement,
            tag4coarsening=tag4coarsening,
            tag4regrid=tag4regrid,
        ).initialize()
        self.options = {k: v for k, v in opts.items()}
        self.options.update(
            mx=self.mx,
            my=self.my,
            max_level=self.max_level,
            coarsen_threshold=coarsen,
            riemann=self.riemann.name,
            params=dict(zip(self.riemann.param_names, self.params.tolist())),
            backend=self.backend.name,
            dtype=self.dtype.name,
            domain=dict(
                lower=list(self.domain.lower),
                upper=list(self.domain.upper),
                ntrees=list(self.domain.ntrees),
                periodic=list(self.domain.periodic),
            ),
        )
        self.callbacks = list(opts["callbacks"])
        self.timers = Timers()
        self.t = 0.0
        self.steps = 0
        self.rejected_steps = 0
        self.regrids = 0
        self.cell_updates = 0
        self.wall_s = 0.0
        self.dt = opts["dt_initial"]
        self._dt_explicit = opts["dt_initial"] is not None
        if comm is None and type(self) is Simulation:  # forestpy.parallel.build_distributed
            comm = BUILD_COMM.get()
        # a serial run is a distributed run on one rank: one Exchange that sends nothing
        self.exchange = Exchange() if comm is None else MPIExchange(comm, self.backend)
        self.built_distributed = comm is not None
        self.overlap = comm is not None and (
            self.backend.is_gpu if overlap is None else bool(overlap))
        self._full = False  # True: q, aux hold every patch although the layout is a share
        self._root_copy = None  # (root, global arrays on root): see root_view
        self._spare = self._spare_of = None  # see _new_state
        self._subcycler = None  # made at the first step when subcycling applies
        self.carried = None  # see regrid(carry=...)
        self._initial_refinement()
        self.timers = Timers()  # the phases of the run, not of the initial refinement
        self.totals_initial = self.totals()

    # ------------------------------------------------------------------ layout
    @property
    def comm(self):
        """The communicator of a distributed run (None: one rank)."""
        return self.exchange.comm

    @property
    def ghost_plan(self):
        """The ghost plan of the owned patches (serial: of every patch)."""
        return self.layout.ghost_plan

    @property
    def sync_plan(self):
        """The time-sync plan of the owned coarse patches (serial: of every patch)."""
        return self.layout.sync_plan

    def partition_weights(self, forest):
        """Per-leaf weights of the partition of ``forest`` over the ranks (None: equal,
        every patch has mx*my cells)."""
        return None

    def use_exchange(self, exchange, overlap: bool | None = None) -> Simulation:
        """Share the patches over the ranks of ``exchange`` (an
        :class:`~forestpy.parallel.exchange.MPIExchange`; every rank calls it with the
        same state): the arrays keep every patch until the next step keeps this rank's
        share (its owned patches and halo).  ``overlap``: step the patches that need no
        remote data while the halo travels (default: on the GPU backend only)."""
        self.exchange = exchange
        self.overlap = exchange.distributed and (
            self.backend.is_gpu if overlap is None else bool(overlap))
        self._full = exchange.distributed
        self._build_layout()
        return self

    def _partition(self) -> None:
        """Repartition the current forest (new weights): gathers a local state first."""
        self.gather_state()
        self._build_layout()

    def _build_layout(self) -> None:
        """This rank's layout of the current forest (serial: every patch); the cell
        centres of the local rows are made again on first use."""
        if self.exchange.distributed:
            self.layout = Layout.partitioned(
                self.forest, self.geom, self.patch_arrays, self.backend, self.exchange,
                self.partition_weights(self.forest), self.riemann.num_eqn,
                self.strip_fraction, self.early_split)
        else:
            self.layout = Layout.whole_forest(self.forest, self.geom, self.patch_arrays,
                                              self.backend)
        self.centers_host = self.centers = None
        self._spare = self._spare_of = None
        self._tag_patches = self._tag_memo = self._tag_fetched = None

    def _owned(self, a):
        """The owned rows of a local array (every row of a serial one)."""
        return a if self.layout.whole else a[: self.layout.nown]

    @property
    def owned(self) -> _OwnedView:
        """The owned patches as a hook sees them (``geom``, ``patch_arrays``,
        ``centers_host``, ``backend``, ``comm``); serial: every patch."""
        return _OwnedView(self)

    def _localize(self) -> None:
        """Arrays holding every patch (a serial build that was distributed, a restored
        checkpoint, a gathered state) -> this rank's local rows (``l2g``)."""
        if not self._full:
            return
        idx = self.layout.l2g_dev
        self.q, self.aux, self.aux_setaux = self.q[idx], self.aux[idx], self.aux_setaux[idx]
        self._full = False
        self._spare = self._spare_of = None

    # ------------------------------------------------------------------ setup
    def _set_forest(self, forest: Forest, geom: PatchGeometry | None = None,
                    kept=None, timed: bool = False) -> None:
        """New forest: geometry (replicated; ``geom`` when the caller made it already)
        and this rank's layout with its plans; ``aux`` of the local patches (``kept``:
        see :meth:`_new_aux`).  ``timed``: charge the layout and the aux to the
        regrid's sub-phases."""
        timers = self.timers if timed else None
        be = self.backend
        self.forest = forest
        if geom is None:
            geom = PatchGeometry.from_forest(forest, self.mx, self.my, self.mbc)
        self.geom = geom
        # what the kernels need of the geometry, as backend arrays
        self.patch_arrays = SimpleNamespace(
            mx=geom.mx, my=geom.my, mbc=geom.mbc, npatch=geom.npatch,
            dx=be.to_device(geom.dx), dy=be.to_device(geom.dy), level=be.to_device(geom.level),
            sides=[be.to_device(geom.on_side(side)) for side in range(4)],
        )
        with phase(timers, "regrid.plans"):
            self._build_layout()
        with phase(timers, "regrid.aux"):
            self.aux_setaux = self._new_aux(kept)
            self.aux = self.aux_setaux.copy()

    def _new_aux(self, kept=None):
        """``setaux`` of the local patches, a backend array.  ``kept``: ``(new ids, old
        ids, old aux_setaux)`` of the leaves a serial regrid left as they were: their
        rows are copied on the backend and ``setaux`` runs on the other patches only
        (``setaux`` is pointwise in ``x, y, dx, dy``, as a distributed build already
        requires, so the rows are those a call on every patch gives)."""
        be = self.backend
        if kept is None or self.vtable.setaux is None or not self.layout.whole:
            return be.to_device(self._make_aux(), self.dtype)
        same, old_ids, old_aux = kept
        geom = self.layout.local_geom
        aux = self.xp.empty((geom.npatch,) + old_aux.shape[1:], dtype=old_aux.dtype)
        aux[be.to_device(same)] = old_aux[be.to_device(old_ids)]
        fresh = np.ones(geom.npatch, dtype=bool)
        fresh[same] = False
        fresh = np.flatnonzero(fresh)
        if len(fresh):
            aux[be.to_device(fresh)] = be.to_device(self._make_aux(geom.subset(fresh)),
                                                    self.dtype)
        return aux

    @property
    def centers_host(self):
        """Cell centres ``(x, y)`` of the local patches (serial: every patch), ghost
        cells included, each a host array ``(npatch, NY, NX)``; made on first use after
        a regrid (a run whose hooks never ask for them makes none: on the GPU, building
        them is a large part of a regrid)."""
        if self._centers_host is None:
            self._centers_host = self.layout.local_geom.cell_centers(ghosts=True)
        return self._centers_host

    @centers_host.setter
    def centers_host(self, value):
        self._centers_host = value

    @property
    def centers(self):
        """:attr:`centers_host` as backend arrays (made on first use after a regrid; on
        the GPU made there, not uploaded)."""
        if self._centers is None:
            be = self.backend
            if be.is_gpu:
                self._centers = self.layout.local_geom.cell_centers(ghosts=True, backend=be)
            else:
                self._centers = tuple(be.to_device(c) for c in self.centers_host)
        return self._centers

    @centers.setter
    def centers(self, value):
        self._centers = value

    def _make_aux(self, geom=None):
        """Host ``setaux`` of the local patches (or of the patches of ``geom``)."""
        naux = self.riemann.num_aux
        whole = geom is None
        if whole:
            geom = self.layout.local_geom
        if self.vtable.setaux is None:
            if naux:
                raise ValueError(f"Riemann solver {self.riemann.name!r} needs aux: give setaux")
            return np.zeros((geom.npatch, naux) + geom.shape)
        if geom.npatch == 0:  # a rank holding no patch: setaux is not called on nothing
            return np.zeros((0, naux) + geom.shape)
        x, y = self.centers_host if whole else geom.cell_centers(ghosts=True)
        aux = np.asarray(
            self.vtable.setaux(x, y, geom.dx[:, None, None], geom.dy[:, None, None]),
            dtype=np.float64,
        )
        if aux.shape != (naux,) + x.shape:
            raise ValueError(f"setaux returned shape {aux.shape}, expected {(naux,) + x.shape}")
        return np.ascontiguousarray(np.moveaxis(aux, 0, 1))

    def _qinit(self):
        """``qinit`` on the cell centres of the local patches (any subset of the
        patches: it must be pointwise, so a distributed build is bitwise the serial
        one)."""
        meqn = self.riemann.num_eqn
        if self.layout.local_geom.npatch == 0:  # a rank holding no patch
            shape = (0, meqn) + self.geom.shape
            return self.backend.to_device(np.zeros(shape), self.dtype)
        x, y = self.centers_host
        q = np.asarray(self.vtable.qinit(x, y), dtype=np.float64)
        if q.shape != (meqn,) + x.shape:
            raise ValueError(f"qinit returned shape {q.shape}, expected {(meqn,) + x.shape}")
        return self.backend.to_device(np.ascontiguousarray(np.moveaxis(q, 0, 1)), self.dtype)

    def _initial_refinement(self) -> None:
        forest = Forest.new(self.domain.brick(), self.min_level)
        while True:
            self._set_forest(forest)
            self.q = self._qinit()
            self._initial_state_set()
            if self.max_level == self.min_level:
                break
            self.fill_ghosts()
            flags = self._regrid_flags()
            if flags is None or not flags[0].any():
                break
            forest = forest.refine(flags[0]).balance()
        self.regrids = 0

    def _initial_state_set(self) -> None:
        """Called by :meth:`_initial_refinement` once ``q`` holds the initial condition
        of a level (checked on every rank)."""
        self._spare = self._spare_of = None
        self._validate_owned(self.q, "the initial condition")

    # ------------------------------------------------------------------ pieces
    def fill_ghosts(self, q=None) -> None:
        """Fill every ghost cell of the owned patches of ``q`` (default the current
        state, its halo received first) in place."""
        if q is None:
            self._localize()
            q = self.q
            self.exchange.halo(q, self.layout.q_exchange, self.timers)
        with self.timers("ghost_fill"):
            self._fill_plan(q, self.layout.ghost_plan, self.layout.owned_sides)

    def _fill_plan(self, q, plan, sides, t: float | None = None) -> None:
        """Ghost fill of the destinations of ``plan``, then the physical boundaries of
        the patches ``sides`` (at time ``t``, default the simulation's)."""
        surface = self.riemann.surface_interp
        if surface is None:
            fill_ghosts(plan, q, self.riemann.positive, backend=self.backend,
                        timers=self.timers)
        else:
            self._fill_ghosts_surface(q, *surface, plan=plan)
        with self.timers("ghost_fill.physical_bc"):
            self.vtable.physical_bc(q, self.aux, self.t if t is None else t, sides)

    def _physical_bc(self, q, aux, t: float, sides) -> None:
        """The framework's ``physical_bc`` slot: the ``bc`` option's kinds (and
        callables) on the patches ``sides``, see :mod:`forestpy.patches.boundary`."""
        apply_physical_bc(q, self.geom, self.bc, self.riemann.wall_reflect, t, aux,
                          centers=self._centers_of, backend=self.backend, sides=sides,
                          context=self.hook_context(t) if self._pointwise_bc else None)

    @property
    def _pointwise_bc(self) -> bool:
        return any(takes_context(kind) for kind in self.bc)

    def hook_context(self, t: float, dt: float = 0.0, rows=None, rows_host=None
                     ) -> HookContext:
        """The :class:`~forestpy.hooks.HookContext` of a hook call on the local patches
        (owned rows first) at time ``t`` with step ``dt``; ``rows``/``rows_host``: the
        rows the call updates (backend and host arrays; None: every owned row).  Its
        geometry is made once per regrid."""
        geom = self.layout.local_geom
        g = self.__dict__.get("_hook_geometry")
        if g is None or g.host is not geom or g.backend is not self.backend:
            arrays = self.layout.local_arrays
            g = self._hook_geometry = HookGeometry(
                geom, self.backend, dx=arrays.dx, dy=arrays.dy,
                centers_host=lambda: self.centers_host, centers=lambda: self.centers)
        return HookContext(g, t, dt, rows=rows, rows_host=rows_host, owned=self.layout.nown,
                           comm=self.comm, step=self.steps, rejected=self.rejected_steps,
                           step_params=self.step_params)

    def _fill_ghosts_surface(self, q, i: int, j: int, plan=None) -> None:
        """Ghost fill of a depth ``q[i]`` over the bottom ``aux[j]`` (see
        ``RiemannSolver.surface_interp``): copies exact, averages and interpolations
        through the rest surface of :mod:`forestpy.patches.surface_ghosts`.  Interior
        cells are not touched.  ``plan``: default the owned patches' ghost plan."""
        aux_bc = tuple("extrap" if callable(k) else k for k in self.bc)
        apply_physical_bc(self.aux, self.geom, aux_bc, ((), ()), self.t,
                          backend=self.backend, sides=self.layout.owned_sides)
        fill_ghosts_surface(self.layout.ghost_plan if plan is None else plan, q, self.aux,
                            i, j, self._surface_dry_tolerance(), self.riemann.positive,
                            backend=self.backend, timers=self.timers,
                            velocity=self.riemann.surface_velocity)

    def _surface_dry_tolerance(self) -> float:
        """The depth at or below which a cell is dry for the surface rules (the solver
        parameter named by ``RiemannSolver.surface_dry``; 0 when it names none)."""
        return surface_dry_tolerance(self.riemann, self.params)

    def _centers_of(self, idx):
        x, y = self.centers
        return x[idx], y[idx]

    def _tagging(self):
        """``(patches, families)`` of the owned patches, made once per layout: what a
        regrid criterion sees of them (:class:`~forestpy.patches.tagging.TaggedPatches`)
        and the first leaf of each family of four leaf siblings (uint8, backend; empty
        on a share of the patches, whose families a rank cannot see whole)."""
        if self._tag_patches is None:
            L, be = self.layout, self.backend
            patches = TaggedPatches(L.owned_geom, self.patch_arrays.level[L.lo : L.hi], be)
            families = np.zeros(0, dtype=np.uint8)
            if L.whole:
                f = self.forest
                families = family_starts(f.tree, f.level, f.x, f.y).astype(np.uint8)
            self._tag_patches = (patches, be.to_device(families))
        return self._tag_patches

    def _tag_bits(self, patches):
        """The regrid criterion's bits of the owned patches (backend uint8: bit 0
        refine, bit 1 coarsen); without a ``tag4regrid`` slot, from the two tagging
        slots."""
        q, aux, t, vt = self._owned(self.q), self._owned(self.aux), self.t, self.vtable
        if vt.tag4regrid is not None:
            bits = vt.tag4regrid(q, aux, patches, t)
        else:
            xp, geom = self.xp, patches.geom
            ctx = {"ctx": self.hook_context(t)} if takes_context(vt.tag4refinement) else {}
            bits = xp.asarray(vt.tag4refinement(q, aux, geom, t, **ctx)).astype(np.uint8)
            if vt.tag4coarsening is not None:
                bits = bits | (xp.asarray(vt.tag4coarsening(q, aux, geom, t))
                               .astype(np.uint8) << 1)
        n = self.layout.nown
        if tuple(bits.shape) != (n,):
            raise ValueError(f"tagging returned shape {tuple(bits.shape)}, expected ({n},)")
        return bits

    def _tag_reads_ghosts(self) -> bool:
        """Whether the regrid criterion reads ghost cells now (default: it does)."""
        reads = getattr(self.vtable.tag4regrid, "reads_ghosts", None)
        return True if reads is None else bool(reads(self.t))

    def _regrid_flags(self, frozen_below: int | None = None):
        """``(refine, coarsen)``: host bool flags of every patch (on every rank), or
        None when they cannot change the forest.  Tagged on the backend; when nothing
        can change, one record crosses to the host (:func:`forestpy.patches.tagging.
        regrid_flags`), otherwise the flags too.

        Flags equal to those of an earlier pass on this layout (same ``frozen_below``)
        that changed nothing (the 2:1 balance undid a coarsening: ``_tag_memo``, kept
        by :meth:`regrid`) change nothing again: the forest operations are a function
        of the forest and the flags, so those flags stay on the device.  Collective."""
        L, be, xp = self.layout, self.backend, self.xp
        low = self.min_level if frozen_below is None else frozen_below
        record, flags = np.zeros(2, dtype=np.int64), None
        memo = self._tag_memo if self._tag_memo and self._tag_memo[0] == frozen_below \
            else None
        if not L.nown and self.vtable.tag4regrid is None and \
                takes_context(self.vtable.tag4refinement):
            # a criterion with a context may reduce over the ranks: every rank calls it
            self.vtable.tag4refinement(self._owned(self.q), self._owned(self.aux),
                                       L.owned_geom, self.t, ctx=self.hook_context(self.t))
        if L.nown:
            patches, families = self._tagging()

            def tag():
                with self.timers("regrid.criterion"):
                    bits = self._tag_bits(patches)
                flags, change = regrid_flags(
                    bits, patches.level, families, self.max_level,
                    0 if frozen_below is None else frozen_below, low, be)
                new = (flags != memo[1]).any() if memo is not None else \
                    xp.ones((), dtype=bool)
                return flags, xp.stack([change, new.astype(np.int64)])

            graph = self._tag_graph()
            if graph is None:
                flags, rec = tag()
            else:  # a replayed pass's flags are the graph's: copied when they are kept
                flags, rec = graph.run(graph.key(patches, frozen_below, memo), tag,
                                       keep=(patches, self.aux, memo))
            record[:] = be.to_host(rec)
        count, differs = (int(v) for v in self.exchange.allreduce(record, "sum"))
        if count == 0 or (memo is not None and differs == 0):
            return None
        if flags is not None and self.__dict__.get("_tag_graph_obj") is not None:
            flags = flags.copy()
        self._tag_fetched = (frozen_below, flags)
        mine = np.zeros(0, dtype=np.uint8) if flags is None else be.to_host(flags)
        every = self.exchange.allgather_rows(mine, L.offsets)
        return (every & 1) != 0, (every & 2) != 0

    def totals(self) -> dict:
        """Integral of every conserved field over the domain (capacity-weighted): the
        correctly rounded sum (``math.fsum``) of the per-patch integrals of
        :meth:`_patch_totals`.  It depends on the patch values alone, not on the order
        or the grouping of the patches, so a distributed run's totals (per-patch
        integrals computed by the owners, gathered: ``npatch x nconserved`` floats, not
        the state) are bitwise these.  Collective."""
        self._localize()
        L = self.layout
        mine = self._patch_totals(slice(None) if L.whole else slice(0, L.nown), L.owned_geom)
        return self._sum_patch_totals(self.exchange.allgather_rows(mine, L.offsets))

    def _patch_totals(self, rows, geom) -> np.ndarray:
        """Host float64 ``(npatch, nconserved)``: per patch ``rows`` of ``q`` (with the
        geometry ``geom`` of those patches), the capacity-weighted integral of every
        conserved field.  Each patch's value depends on that patch alone (a reduction
        over its own cells, then the cell area)."""
        b = self.mbc
        interior = self.q[rows, :, b:-b, b:-b]
        capa = self.capacity_index
        if capa >= 0:
            interior = interior * self.aux[rows, capa : capa + 1, b:-b, b:-b]
        conserved = [m for m in range(self.riemann.num_eqn) if self.riemann.conserved[m]]
        sums = self.backend.to_host(interior.astype(np.float64).sum(axis=(2, 3)))
        w = np.asarray(geom.dx, dtype=np.float64) * np.asarray(geom.dy, dtype=np.float64)
        return np.ascontiguousarray(np.asarray(sums, dtype=np.float64)[:, conserved]
                                    * w[:, None])

    def _sum_patch_totals(self, parts: np.ndarray) -> dict:
        """The totals from the per-patch integrals ``parts`` (all patches)."""
        names = [n for m, n in enumerate(self.riemann.field_names) if self.riemann.conserved[m]]
        return {name: math.fsum(parts[:, k].tolist()) for k, name in enumerate(names)}

    def patches_per_level(self) -> dict:
        lv, counts = np.unique(self.geom.level, return_counts=True)
        return {int(a): int(b) for a, b in zip(lv, counts)}

    def _validate(self, q, where: str) -> None:
        if not self.check_state:
            return
        b = self.mbc
        interior = self.backend.to_host(q[:, :, b:-b, b:-b])
        if not np.isfinite(interior.sum()):
            bad = np.argwhere(~np.isfinite(interior))[0]
            raise StateError(
                f"NaN or Inf in {where} (field {self.riemann.field_names[bad[1]]!r}, patch "
                f"{bad[0]}, t={self.t:.6g}); the last valid state is kept"
            )
        for m in self.riemann.positive:
            low = interior[:, m].min()
            if low < 0.0:
                raise StateError(
                    f"negative {self.riemann.field_names[m]!r} ({low:.3g}) in {where} at "
                    f"t={self.t:.6g}; the last valid state is kept"
                )

    def _validate_owned(self, q, where: str) -> None:
        """:meth:`_validate` of the owned rows of ``q``; the same StateError on every
        rank (the first rank's message that found a problem in its owned patches)."""
        error = None
        try:
            if self.layout.nown:
                self._validate(self._owned(q), where)
        except StateError as err:
            error = err
        self.exchange.raise_first(error, StateError)

    # ------------------------------------------------------------------ stepping
    def _warm_up(self) -> None:
        """Compile (or load from Numba's disk cache) the ghost-fill, time-sync and (GPU)
        status kernels now, so that the phase timers measure only the work (the step kernel
        compiles in the first time-step estimate)."""
        self._localize()
        L = self.layout
        fill_ghosts(L.ghost_plan, self.q.copy(), self.riemann.positive, backend=self.backend)
        if len(L.sync_plan) and self.vtable.time_sync is not None:
            edge = self.xp.zeros((L.n_edge_rows, 4, self.riemann.num_eqn, max(self.mx, self.my)))
            # dt = 0: a correction of zero, applied to a scratch copy
            self.vtable.time_sync(L.sync_plan, self.q, self.q.copy(), self.aux, edge, 0.0)
        if self.backend.is_gpu and L.nown:  # the status kernel (a record of no step)
            self._step_status(self._owned(self.q), self.xp.zeros(0))

    def _estimate_dt(self) -> float:
        """A probe step of the owned patches; the Courant number's maximum over the
        ranks (the serial value exactly)."""
        probe = min(self.geom.dx.min(), self.geom.dy.min()) * 1e-3
        self.fill_ghosts()
        c = 0.0
        if self.layout.nown:
            _, cfl, _ = self.vtable.step(self._owned(self.q), self._owned(self.aux),
                                         self.layout.local_arrays, probe)
            c = float(self.backend.to_host(cfl.max()))
            if self.subcycling:  # the coarsest level's dt: finer levels take halves
                level = self.backend.to_device(
                    self.layout.owned_geom.level.astype(np.float64))
                coarsest = float(self.geom.level.min())
                c = float(self.backend.to_host((cfl * 2.0 ** (coarsest - level)).max()))
        c = float(self.exchange.allreduce(np.array([c]), "max")[0])
        if c <= 0.0:
            return min(self.dt_max, self.t_final - self.t) or probe
        return probe * self.cfl_desired / c

    def step(self, dt: float, between: Callable | None = None) -> tuple[bool, float]:
        """Try one step of size ``dt`` of the owned patches; return (accepted, Courant
        number).  ``between()`` (optional) runs once, after the step's work is launched
        and before its status is read (the host's work for the previous step: see
        :meth:`_defers_callbacks`).

        Halo exchange and ghost fill, step kernel, the edge fluxes of remote fine
        patches, time sync of the owned coarse patches, split sources, then the Courant
        number and the state checks reduced over the ranks.  The time sync and split
        sources run before the Courant number is known on the host, so that one small
        transfer per step (Courant number and state checks together) is all that
        crosses from the device; a rejected step discards them.  With ``overlap`` the
        halo travels while the patches that need no remote data are stepped
        (:meth:`_step_overlapped`).
        """
        if self.subcycling:
            if between is not None:
                between()
            return self._subcycler.coarse_step(dt)
        graph = self._step_graph()
        if graph is not None:
            result = graph.step(dt, between)
            if result is not None:
                return result
        q_new, read_status = self._launch_step(dt)
        if between is not None:
            between()
        with self.timers("cfl_check"):
            status = read_status()
        return self._finish_step(q_new, status, dt)

    def _step_graph(self):
        """The :class:`~forestpy.step_graph.StepGraph` of a GPU run with ``gpu_graph``
        on, None otherwise (or once it has found that the run's steps cannot be
        replayed)."""
        graph = self.__dict__.get("_graph")
        if graph is None and self.gpu_graph and self.backend.is_gpu:
            from forestpy.step_graph import StepGraph

            graph = self._graph = StepGraph(self)
        return graph if graph is not None and graph.usable() else None

    def _tag_graph(self):
        """The :class:`~forestpy.tag_graph.TagGraph` of a GPU run with ``gpu_graph``
        on (``FORESTPY_TAG_GRAPH=0`` turns it off alone), None otherwise."""
        graph = self.__dict__.get("_tag_graph_obj")
        if graph is None:
            if not (self.gpu_graph and self.backend.is_gpu) or getattr(
                    self.backend, "simulator", False) or os.environ.get(
                    "FORESTPY_TAG_GRAPH", "1") == "0":
                return None
            from forestpy.tag_graph import TagGraph

            graph = self._tag_graph_obj = TagGraph(self)
        return graph if graph.reason is None else None

    def graph_summary(self) -> dict:
        """How the GPU steps ran: ``gpu_graph`` (replayed from CUDA graphs), captures,
        replays and, when graphs were off, why (:mod:`forestpy.step_graph`); where
        tagging passes were replayed too, their ``tag_graph_*`` counts
        (:mod:`forestpy.tag_graph`)."""
        graph = self.__dict__.get("_graph")
        if graph is None:
            out = {"gpu_graph": False, "graph_captures": 0, "graph_replays": 0,
                   "graph_off_reason": "off" if not self.gpu_graph else "no GPU step yet"}
        else:
            out = graph.summary()
        tags = self.__dict__.get("_tag_graph_obj")
        if tags is not None:  # the tagging passes' graphs (forestpy.tag_graph)
            out.update(tags.summary())
        return out

    def interior_digest(self) -> list:
        """``[sum, sum of |q|]`` of the owned interiors on the host: two runs that
        should agree bit for bit compare these (one transfer)."""
        b = self.mbc
        q = self._owned(self.q)[:, :, b:-b, b:-b]
        xp = self.xp
        return [float(v) for v in self.backend.to_host(xp.stack([q.sum(), xp.abs(q).sum()]))]

    @property
    def step_params(self):
        """The GPU's block of per-step values (:mod:`forestpy.step_params`), None on the
        CPU."""
        if not self.backend.is_gpu:
            return None
        block = self.__dict__.get("_step_params")
        if block is None:
            from forestpy.step_params import StepParams

            block = self._step_params = StepParams(self.backend)
        return block

    def _device_dt(self, dt):
        """``dt`` for the step kernel and the time sync: a view of the step's parameter
        block where the solver takes one (GPU), else the number."""
        if self.step_params is None or not getattr(self.solver, "device_dt", False):
            return dt
        return self.step_params.values("dt", _dt_only, self.t, dt)

    def _launch_step(self, dt, buffers=None):
        """Everything of a step before its status reaches the host: ``(q_new, read)``
        with ``read()`` the step's status (one transfer on the GPU).  ``buffers``:
        ``(q_new, cfl, edge, rows)`` to step into (a serial GPU step: the arrays a
        captured graph keeps)."""
        self._localize()
        self._root_copy = None  # the state changes
        L = self.layout
        if self.overlap and not L.whole and self.vtable.b4step is None:
            q_new, cfl, edge = self._step_overlapped(dt)
            dtk = dt
        else:
            self.fill_ghosts()
            if self.vtable.b4step is not None:
                with self.timers("sources"):
                    self.vtable.b4step(self, dt)
            dtk = self._device_dt(dt) if L.whole else dt
            with self.timers("step"):
                if buffers is not None:
                    out, cfl_out, edge_out, rows = buffers
                    q_new, cfl, edge = self.vtable.step(
                        self.q, self.aux, L.local_arrays, dtk, out=out, edge_out=edge_out,
                        rows=rows, cfl_out=cfl_out)
                else:
                    q_new, cfl, edge = self._step_all(dtk)
        if self.vtable.time_sync is not None:
            self.exchange.halo(edge, L.edge_exchange, self.timers)
            with self.timers("time_sync"):
                self.vtable.time_sync(L.sync_plan, self.q, q_new, self.aux, edge, dtk)
        if self.vtable.src2 is not None:  # on every rank: a hook may communicate
            with self.timers("sources"):
                own = self._owned
                src2 = self.vtable.src2
                # the hook (and the state it leaves) sees no unset memory
                copy_ghost_frame(own(self.q), own(q_new), self.mbc, self.backend)
                if takes_context(src2):
                    src2.apply(own(q_new), own(self.aux), self.hook_context(self.t, dt))
                else:
                    x, y = self.centers
                    src2(own(q_new), own(self.aux), own(x), own(y), self.t, dt)
        with self.timers("cfl_check"):
            return q_new, self._status_reader(q_new, cfl)

    def _status_reader(self, q_new, cfl):
        """A function returning :meth:`_global_status` of the step: on a GPU the
        status kernel is launched now and its record read by the call."""
        if not (self.backend.is_gpu and self.layout.nown):
            status = self._global_status(q_new, cfl)
            return lambda: status
        out = launch_step_status(self._owned(q_new), self.mbc, self.riemann.positive, cfl,
                                 self.backend, self.check_state)
        backend, exchange, check = self.backend, self.exchange, self.check_state
        return lambda: exchange.reduce_status(backend.to_host(out).copy(), check)

    def _finish_step(self, q_new, status, dt) -> tuple[bool, float]:
        """Accept or reject the step that wrote ``q_new`` from its host ``status``."""
        L = self.layout
        courant = float(status[0])
        if courant > self.cfl_max or not math.isfinite(courant):
            self.rejected_steps += 1
            if not math.isfinite(courant):
                self._validate_owned(q_new, f"step {self.steps + 1}")
            return False, courant
        if self.check_state and not (
            math.isfinite(status[1]) and all(v >= 0.0 for v in status[2:])
        ):
            self._validate_owned(q_new, f"step {self.steps + 1}")
        if not L.whole:  # the step wrote into the spare (_new_state): keep the old one
            self._spare, self._spare_of = self.q, q_new
        self.q = q_new
        self.t += dt
        self.steps += 1
        self.cell_updates += self.geom.npatch * self.mx * self.my
        return True, courant

    @property
    def subcycling(self) -> bool:
        """Whether the steps subcycle the levels (the ``subcycle`` option, where it
        applies: see :func:`forestpy.subcycling.supports_subcycling`)."""
        if self._subcycler is None and self.subcycle:
            from forestpy.subcycling import Subcycler, supports_subcycling

            if not supports_subcycling(self):
                self.subcycle = False
                return False
            self._subcycler = Subcycler(self)
        return self._subcycler is not None

    @property
    def level_steps(self) -> dict:
        """Steps taken by each level (subcycling; without it every level takes each
        step: ``{}``)."""
        return dict(self._subcycler.level_steps) if self._subcycler is not None else {}

    @property
    def fine_steps(self) -> int:
        """Steps of the level that stepped most (``steps`` without subcycling)."""
        return max(self.level_steps.values(), default=self.steps)

    def _step_all(self, dt):
        """The step kernel on every owned patch: (new state, Courant numbers, edge
        fluxes).  Serial: the kernel's own arrays; a share of the patches: the local
        arrays (owned rows written, halo rows refreshed by the next exchange)."""
        L = self.layout
        if L.whole:
            return self.vtable.step(self.q, self.aux, L.local_arrays, dt)
        n = L.nown
        q_new, edge, cfl = self._new_state(), self._new_edge(), self.xp.zeros(0)
        if n:
            cfl = self.vtable.step(self.q[:n], self.aux[:n], L.local_arrays, dt,
                                   out=q_new[:n], edge_out=edge[:n])[1]
        return q_new, cfl, edge

    def _step_status(self, q_new, cfl) -> np.ndarray:
        """``[largest Courant number, sum of the interior, min of each positive field]``
        reduced on the backend and moved to the host in one transfer (on the GPU, one
        launch: :func:`~forestpy.patches.status.step_status`)."""
        if self.backend.is_gpu:
            return step_status(q_new, self.mbc, self.riemann.positive, cfl, self.backend,
                               self.check_state)
        xp = self.xp
        courant = cfl.max() if cfl.shape[0] else xp.zeros((), dtype=np.float64)
        if not self.check_state:
            return self.backend.to_host(courant.reshape(1))
        per_patch = patch_status(q_new, self.mbc, self.riemann.positive, self.backend)
        sums = per_patch[:, :1].sum(axis=0)
        lows = per_patch[:, 1:].min(axis=0) if per_patch.shape[1] > 1 else sums[:0]
        return self.backend.to_host(xp.concatenate([courant.reshape(1), sums, lows]))

    def _global_status(self, q_new, cfl) -> np.ndarray:
        """:meth:`_step_status` of the owned patches, reduced over the ranks."""
        if self.layout.nown:
            local = self._step_status(self._owned(q_new), cfl)
        else:
            npos = len(self.riemann.positive)
            local = np.array([0.0] + ([0.0] + [math.inf] * npos if self.check_state else []))
        return self.exchange.reduce_status(local, self.check_state)

    # ------------------------------------------------------------------ overlap
    whole_range_fraction = 0.25  # see _step_overlapped
    early_split = 0.5  # GPU: share of the early patches in the first launch
    strip_fraction = 0.75  # halo exchange of whole patches above this share of cells

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
        return self.xp.empty((self.layout.n_edge_rows, 4, self.riemann.num_eqn,
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
        (:class:`~forestpy.parallel.exchange.SideStream`), so that they run beside the
        first launch rather than queued after it.

        Otherwise, when the late patches are few (at most ``whole_range_fraction`` of
        the owned ones), the early kernel runs on the whole owned range, a view, and
        the late patches' results of that call (made with ghost cells not yet filled)
        are replaced by those of the late call: a little redundant work instead of
        gathering and scattering every early patch (they are not contiguous)."""
        L, ex = self.layout, self.exchange
        early, late = L.early, L.late
        q, xp = self.q, self.xp
        n = L.nown
        if self._patch_list_step():
            return self._step_two_launches(dt)
        whole = 0 < late.n <= self.whole_range_fraction * n
        with self.timers("exchange"):
            pending = ex.post(q, L.q_exchange, self.timers)
        with self.timers("ghost_fill"):
            self._fill_plan(q, L.early_plan, early.sides)
        with self.timers("step"):
            q_new, edge = self._new_state(), self._new_edge()
            if whole:
                cfl = self.vtable.step(q[:n], self.aux[:n], L.local_arrays, dt,
                                       out=q_new[:n], edge_out=edge[:n])[1]
            else:
                cfl_e = self._step_kernel(early, dt, q_new, edge)
        with self.timers("exchange"):
            ex.complete(q, L.q_exchange, pending, self.timers)
        # the costs the overlap adds (a second fill pass, the late kernel): sub-phases
        with self.timers("ghost_fill"), self.timers("ghost_fill.late"):
            self._fill_plan(q, L.late_plan, late.sides)
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
            got = self._rows_ok = self.backend.is_gpu and step_takes_patch_list(
                self.vtable.step)
        return got

    def _step_two_launches(self, dt):
        """The overlapped step in two patch-list launches (see _step_overlapped)."""
        L, ex = self.layout, self.exchange
        if not L._wave_planned:  # the kernel is compiled after its first launch
            waves = getattr(self.solver, "blocks_per_wave", None)
            L.plan_two_launches(waves(L.local_arrays) if waves else None)
        q, n = self.q, L.nown
        args = (q[:n], self.aux[:n], L.local_arrays, dt)
        with self.timers("exchange"):
            pending = ex.post(q, L.q_exchange, self.timers)
        with self.timers("ghost_fill"):
            self._fill_plan(q, L.early_plan, L.early.sides)
        side = self._side_stream()
        side.follow_default()  # the early ghosts and the previous step are in q
        with self.timers("step"):
            q_new, edge, cfl = self._new_state(), self._new_edge(), self.xp.zeros(n)
            out = dict(out=q_new[:n], edge_out=edge[:n], cfl_out=cfl)
            self.vtable.step(*args, rows=L.first_rows, **out)
        # on the side stream, beside the first launch: the unpack writes only halo rows
        # and the late fill only the late patches' ghost cells, neither read by it
        with side.active():
            with self.timers("exchange"):
                ex.complete(q, L.q_exchange, pending, self.timers)
            with self.timers("ghost_fill"), self.timers("ghost_fill.late"):
                self._fill_plan(q, L.late_plan, L.late.sides)
        side.join_default()
        with self.timers("step"), self.timers("step.second"):
            self.vtable.step(*args, rows=L.second_rows, **out)
        return q_new, cfl, edge

    def _side_stream(self):
        """The stream of the late patches' side of the overlapped GPU step (the halo
        unpack and the late ghost fill): a high-priority stream on a real GPU, so that
        it runs while the first launch occupies the device; the default stream itself
        (no concurrency) in the simulator."""
        side = self.__dict__.get("_side")
        if side is None:
            side = self._side = self.exchange.side_stream(self.backend)
        return side

    # ------------------------------------------------------------------ regrid
    def regrid(self, frozen_below: int | None = None, carry=None) -> bool:
        """Tag, refine/coarsen/balance, transfer data conservatively, rebuild plans;
        returns whether the forest changed.

        The owned patches are tagged and the flags gathered, every rank builds the same
        new forest and partition, each rank receives (point to point) only the old
        patches that the transfer to its new patches reads (their conserved densities,
        and the surface fields of a surface-aware solver, computed by their old
        owners), and transfers them into the arrays of its new layout.

        ``frozen_below`` (a subcycled step between the coarse levels' steps): the
        leaves coarser than this level must stay as they are (their levels are in the
        middle of a step); only leaves of this level or finer are refined, only finer
        ones coarsened, and a new forest that would change a frozen leaf (the 2:1
        balance reaching down) is dropped.

        ``carry`` (an array like ``q``, local rows): transferred with the state, as a
        conserved density, into ``self.carried`` (the subcycled step's state at the
        start of the frozen levels' step; owned rows, halo rows zero)."""
        self._localize()
        be, xp = self.backend, self.xp
        with self.timers("regrid"):
            # a criterion that reads no ghost cells is tagged before the ghost fill,
            # which only a regrid that may change the forest then needs (the transfer)
            ghosts_first = self._tag_reads_ghosts()
            if ghosts_first:
                self.fill_ghosts()
            with self.timers("regrid.tagging"):
                flags = self._regrid_flags(frozen_below)
            if flags is None:
                return False
            refine, coarsen = flags
            if not ghosts_first:
                self.fill_ghosts()
            old_forest, old_geom = self.forest, self.geom
            with self.timers("regrid.forest"):
                # refine, coarsen, balance; old_ids: each new leaf's old leaf
                forest, old_ids = old_forest.adapt(refine, coarsen)
            if forest == old_forest or (frozen_below is not None and not _same_leaves_below(
                    old_forest, forest, frozen_below)):
                # coarsening undone by balance, or a frozen leaf would change: the same
                # flags will change nothing on this layout
                self._tag_memo = self._tag_fetched
                return False
            self._root_copy = None
            # with a capacity kappa the conserved density is kappa q: transfer that
            # (the transfer keeps sum(value * area)), then divide by the new kappa
            q, aux = self._owned(self.q), self._owned(self.aux)
            capa = self.capacity_index
            density = q * aux[:, capa : capa + 1] if capa >= 0 else q
            shoreline = ShorelineRegrid.of(self.riemann, self.params)
            meqn = density.shape[1]
            if shoreline is not None:  # the surface quantities of the shores travel too
                density = shoreline.with_surface(density, aux, xp)
            if carry is not None:  # moves with the state (last components)
                c = self._owned(carry)
                density = xp.concatenate(
                    [density, c * aux[:, capa : capa + 1] if capa >= 0 else c], axis=1)
            del q, aux
            src, rows, span = self._migrate(forest, density)
            del density
            with self.timers("regrid.transfer"):
                new_geom = PatchGeometry.from_forest(forest, self.mx, self.my, self.mbc)
                q_new = transfer(old_forest, old_geom, src, forest, new_geom, backend=be,
                                 new_ids=None if span is None else np.arange(*span),
                                 old_rows=rows, old_ids=old_ids, timers=self.timers)
            del src
            carried = None
            if carry is not None:
                carried, q_new = q_new[:, -meqn:], q_new[:, :-meqn]
            self.q = self.aux = None  # the old local arrays are no longer needed
            dlev = new_geom.level - old_geom.level[old_ids]
            kept = None
            if span is None:  # serial: the unchanged leaves keep their aux
                same = np.flatnonzero(dlev == 0)
                kept = (same, old_ids[same], self.aux_setaux)
            self._set_forest(forest, new_geom, kept, timed=True)
            del kept
            L = self.layout
            if span is not None and (L.lo, L.hi) != span:
                raise RuntimeError("distributed regrid: partition_weights not deterministic")
            aux = self._owned(self.aux)
            if shoreline is not None:
                with self.timers("regrid.shoreline"):
                    q_new = shoreline.rebuild(q_new, meqn, aux, self.mbc, dlev[L.lo : L.hi],
                                              be)
            if capa >= 0:
                b = self.mbc
                q_new[:, :, b:-b, b:-b] /= aux[:, capa : capa + 1, b:-b, b:-b]
                if carried is not None:
                    carried[:, :, b:-b, b:-b] /= aux[:, capa : capa + 1, b:-b, b:-b]
            self.q = self._local_rows(xp.ascontiguousarray(q_new))
            self.carried = None if carried is None else self._local_rows(
                xp.ascontiguousarray(carried))
            self._spare = self._spare_of = None
            self.regrids += 1
            return True

    def _local_rows(self, owned):
        """An array of the owned rows -> the local layout's (halo rows zero: filled by
        the next exchange)."""
        L = self.layout
        if L.whole:
            return owned
        full = self.xp.zeros((L.nlocal,) + owned.shape[1:], dtype=owned.dtype)
        full[: L.nown] = owned
        return full

    def _migrate(self, forest, density):
        """The old patches that the transfer to this rank's patches of ``forest`` (under
        its new partition) reads: (their densities: the owned old patches' ``density``,
        then those received from their current owners, whole, ghosts included; their
        row per old leaf, -1 for the others; this rank's new leaves ``lo, hi``).
        Serial: the old patches as they are, every new leaf: (density, None, None)."""
        if not self.exchange.distributed:
            return density, None, None
        ex, old = self.exchange, self.layout
        offsets = forest.partition(ex.nranks, self.partition_weights(forest))
        lo, hi = int(offsets[ex.rank]), int(offsets[ex.rank + 1])
        with self.timers("regrid.migrate"):
            gx, gy = forest.global_xy()
            gx, gy, lvl = gx[lo:hi], gy[lo:hi], forest.level[lo:hi]
            half = np.left_shift(1, MAX_LEVEL - lvl - 1)
            need = distinct_ids(self.forest.n, *[
                self.forest.locate_global(gx + ox * half, gy + oy * half)
                for ox, oy in ((0, 0), (1, 0), (0, 1), (1, 1))])
            need = need[(need < old.lo) | (need >= old.hi)]
            owner = np.searchsorted(old.offsets, np.arange(self.forest.n), side="right") - 1
            n = old.nown
            rows = np.full(self.forest.n, -1, dtype=np.int64)
            rows[old.lo : old.hi] = np.arange(n)
            rows[need] = n + np.arange(len(need))
            src = self.xp.empty((n + len(need),) + density.shape[1:], dtype=density.dtype)
            src[:n] = density
            # the schedule and the count of migrated patches in one collective
            (plan,), counts = ex.schedules([(need, rows)], owner, old.lo, self.backend,
                                           share=len(need))
            ex.migrated += int(sum(counts))
            ex.halo(src, plan, self.timers, send_arr=density)
        return src, rows, (lo, hi)

    def run(self, t_final: float | None = None, max_steps: int | None = None) -> Simulation:
        """Advance to ``t_final`` (default the option); returns ``self``."""
        t_final = self.t_final if t_final is None else float(t_final)
        self.t_final = t_final
        start = time.perf_counter()
        for cb in self.callbacks:
            if hasattr(cb, "on_start"):
                with self.timers(getattr(cb, "timer_phase", "callbacks")):
                    cb.on_start(self)
        with self.timers("startup"):  # first calls compile the kernels (Numba)
            self._warm_up()
            if self.dt is None:
                self.dt = self._estimate_dt()
        eps = 1e-12 * max(1.0, abs(t_final))
        taken = 0
        if self.subcycling:
            self._coarsest_stepped = int(self.geom.level.min())
        defer = self._defers_callbacks()
        pending = None  # the on_step callbacks of the last accepted step, deferred
        while self.t < t_final - eps and (max_steps is None or taken < max_steps):
            dt = min(self.dt, self.dt_max, t_final - self.t)
            stop = self._next_stop(eps)
            if stop is not None and self.t + dt > stop:
                dt = stop - self.t  # land on the output time, as Clawpack does
            accepted, courant = self.step(dt, pending)
            pending = None
            if courant > 0:
                self.dt = min(self.dt_max, dt * self.cfl_desired / courant)
            if not accepted:
                if self.rejected_steps > 10 * (self.steps + 10):
                    raise StateError("too many rejected steps: the CFL condition cannot be met")
                continue
            taken += 1
            if self.subcycling:  # regrids inside the step; dt is the coarsest level's
                coarsest = int(self.geom.level.min())
                self.dt *= 2.0 ** (self._coarsest_stepped - coarsest)
                self._coarsest_stepped = coarsest
            elif (
                self.regrid_interval
                and self.steps % self.regrid_interval == 0
                and self.max_level > self.min_level
            ):
                self.regrid()
            if defer:
                pending = self._step_callbacks
            else:
                self._step_callbacks()
        if pending is not None:
            pending()
        for cb in self.callbacks:
            if hasattr(cb, "on_end"):
                with self.timers(getattr(cb, "timer_phase", "callbacks")):
                    cb.on_end(self)
        self.wall_s += time.perf_counter() - start
        return self

    def _step_callbacks(self) -> None:
        for cb in self.callbacks:
            if hasattr(cb, "on_step"):
                with self.timers(getattr(cb, "timer_phase", "callbacks")):
                    cb.on_step(self)

    def _defers_callbacks(self) -> bool:
        """Whether :meth:`run` runs the ``on_step`` callbacks of a step while the next
        step is on the device: a serial run with one dt for all levels, no ``b4step``,
        ``defer_callbacks`` on (by default on a GPU), and every ``on_step`` callback
        ``deferrable`` with no ``next_time`` (the next step's output times are asked
        before the callback's ``on_step`` of the step before).  The callbacks then see
        the state, time, step count and forest of their step, as without deferral;
        only the host's time to run them is hidden behind the device's step."""
        defer = self.defer_callbacks
        if defer is None:
            defer = self.backend.is_gpu and os.environ.get("FORESTPY_DEFER_CALLBACKS",
                                                           "1") != "0"
        if not defer or self.subcycling:
            return False
        if self.comm is not None and getattr(self.comm, "size", 1) > 1:
            return False
        if self.vtable.b4step is not None:  # it may change aux (a moving bed) in place
            return False
        stepping = [cb for cb in self.callbacks if hasattr(cb, "on_step")]
        return bool(stepping) and all(
            getattr(cb, "deferrable", False) and not hasattr(cb, "next_time")
            for cb in stepping)

    def _next_stop(self, eps: float) -> float | None:
        """The earliest time after ``t`` that a callback asks the steps to land on
        (``cb.next_time(sim)``: output times), or None."""
        stops = [
            cb.next_time(self) for cb in self.callbacks if hasattr(cb, "next_time")
        ]
        stops = [float(t) for t in stops if t is not None and t > self.t + eps]
        return min(stops) if stops else None

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path, meta: dict | None = None, codec=None):
        """Write the whole state to one ``.npz`` file (atomically); return its path.
        See :mod:`forestpy.io.checkpoint` (``codec``: compress the patch data with a
        codec of :mod:`forestpy.io.codecs`, e.g. ``"lossless"``, ``"dwt53:rtol=1e-6"``).
        Collective: a distributed run writes a per-rank checkpoint instead
        (:func:`~forestpy.io.checkpoint.write_rank_checkpoint`: each rank its own
        patches, rank 0 the index ``path`` last; nothing is gathered), readable on any
        number of ranks; an error on any rank is raised on every rank."""
        from forestpy.io.checkpoint import write_checkpoint, write_rank_checkpoint

        for cb in self.callbacks:
            # samples kept on the device (gauges) reach the host here, on every rank: a
            # distributed flush is collective, and only rank 0 asks for the state
            flush = getattr(cb, "flush", None)
            if callable(flush):
                flush()
        if self.exchange.distributed:
            return write_rank_checkpoint(self, path, meta=meta, codec=codec)
        return write_checkpoint(self, path, meta=meta, codec=codec)

    def load_checkpoint(self, path) -> Simulation:
        """Read a checkpoint and :meth:`restore` it; returns ``self``.  Of a per-rank
        checkpoint each rank reads only the rank files holding its patches."""
        from forestpy.io.checkpoint import read_checkpoint

        return self.restore(read_checkpoint(path, patches=False))

    def restore(self, data: dict) -> Simulation:
        """Replace forest, patch data, clock, counters, timers and callback state by
        those of a checkpoint (from :func:`~forestpy.io.checkpoint.read_checkpoint`).

        ``self`` must come from the same setup (same Riemann solver, patch size and
        domain); the stateful callbacks (those with ``load_state_dict``) must match the
        checkpoint's in number, order and class.  Otherwise
        :class:`~forestpy.io.checkpoint.CheckpointError` is raised and ``self`` is
        left unchanged.  A following :meth:`run` continues bitwise like the run that
        wrote the checkpoint (the checkpoint's next ``dt`` is kept).  A distributed
        run holds every patch until its next step keeps this rank's share.
        """
        from forestpy.io.checkpoint import CheckpointError

        where = f"checkpoint {data.get('path', '?')}"
        mine = {
            "riemann": self.riemann.name,
            "num_eqn": self.riemann.num_eqn,
            "mx": self.mx,
            "my": self.my,
            "mbc": self.mbc,
        }
        bad = [f"{k}={data.get(k)!r} (this simulation: {v!r})" for k, v in mine.items()
               if data.get(k) != v]
        if bad:
            raise CheckpointError(f"{where} does not fit this simulation: {', '.join(bad)}")
        forest = data["forest"]
        if forest.conn != self.domain.brick():
            raise CheckpointError(
                f"{where} does not fit this simulation: its domain {forest.conn} differs "
                f"from {self.domain.brick()}"
            )
        lo, hi = int(forest.level.min()), int(forest.level.max())
        if lo < self.min_level or hi > self.max_level:
            raise CheckpointError(
                f"{where} does not fit this simulation: its leaves have levels {lo} to {hi}, "
                f"this simulation {self.min_level} to {self.max_level}"
            )
        naux = self.riemann.num_aux
        reader = data.get("rank_files") if data.get("q") is None else None
        stored_naux = ((data["num_aux"], data["num_aux"]) if reader is not None
                       else (data["aux"].shape[1], data["aux_setaux"].shape[1]))
        if stored_naux != (naux, naux):
            raise CheckpointError(f"{where}: aux has {stored_naux[0]} fields, the solver {naux}")
        stateful = [cb for cb in self.callbacks if callable(getattr(cb, "load_state_dict", None))]
        stored = data["callbacks"]
        if [type(cb).__name__ for cb in stateful] != [e["class"] for e in stored]:
            raise CheckpointError(
                f"{where}: stateful callbacks differ: checkpoint "
                f"{[e['class'] for e in stored]}, this simulation "
                f"{[type(cb).__name__ for cb in stateful]}"
            )

        be = self.backend
        if reader is not None:  # a per-rank checkpoint: this rank's rows alone
            before = dict(self.__dict__)
            self._set_forest(forest)
            ids = np.arange(forest.n) if self.layout.whole else self.layout.l2g
            rows = error = None
            try:
                rows = reader.rows(ids)
            except CheckpointError as e:
                error = e
            try:
                self.exchange.raise_first(error, CheckpointError)
            except CheckpointError:
                self.__dict__.clear()
                self.__dict__.update(before)
                raise
            self.q, self.aux, self.aux_setaux = (be.to_device(a, self.dtype) for a in rows)
            self._full = False  # the local rows of this layout
        else:
            self._set_forest(forest)
            self.aux_setaux = be.to_device(np.array(data["aux_setaux"]), self.dtype)
            self.aux = be.to_device(np.array(data["aux"]), self.dtype)
            self.q = be.to_device(np.array(data["q"]), self.dtype)
            self._full = not self.layout.whole  # every patch: the next step localises
        self._root_copy = None
        self._spare = self._spare_of = None
        self.t = float(data["t"])
        self.steps = int(data["steps"])
        self.rejected_steps = int(data["rejected_steps"])
        self.regrids = int(data["regrids"])
        self.cell_updates = int(data["cell_updates"])
        self.dt = None if data["dt"] is None else float(data["dt"])
        self.wall_s = float(data.get("wall_s", 0.0))
        counts = data.get("subcycle")
        if counts and self.subcycling:  # the regrid cadence goes on where it was
            for name in ("level_steps", "since_regrid"):
                setattr(self._subcycler, name,
                        {int(k): int(v) for k, v in counts.get(name, {}).items()})
        for name, seconds in data.get("timers", {}).items():
            self.timers.seconds[name] = float(seconds)
        self.totals_initial = {k: float(v) for k, v in data["totals_initial"].items()}
        for cb, entry in zip(stateful, stored):
            try:
                cb.load_state_dict(entry["state"])
            except (KeyError, TypeError, ValueError, AttributeError, IndexError,
                    OverflowError) as e:
                raise CheckpointError(
                    f"{where}: state of callback {entry['class']} does not fit: "
                    f"{type(e).__name__}: {e}"
                ) from e
        return self

    # ------------------------------------------------------------------ gathers
    def gather_state(self) -> None:
        """Make ``q``, ``aux`` and ``aux_setaux`` hold every patch on every rank, in
        global patch order (Allgatherv of the owned rows; the global layout until the
        next step localises again).  Collective; nothing to do on one rank.  Nothing in
        forestpy calls it during a run (totals gather per-patch integrals, checkpoints
        and rank-0 callbacks gather to rank 0 only: :meth:`root_view`); ``_partition``
        does."""
        if self._full or self.layout.whole:
            return
        be, L = self.backend, self.layout
        self.exchange.gathers += 1
        self._root_copy = None
        with self.timers("gather"):
            for name in ("q", "aux", "aux_setaux"):
                mine = be.to_host(getattr(self, name)[: L.nown])
                full = self.exchange.allgather_rows(mine, L.offsets)
                setattr(self, name, be.to_device(full, self.dtype))
        self._full = True
        self._spare = self._spare_of = None

    def _gather_to(self, root: int):
        """(q, aux, aux_setaux) of every patch, in global patch order, on rank ``root``
        (Gatherv of the owned rows); None on the other ranks, which allocate nothing
        of the global size.  Collective."""
        be, L = self.backend, self.layout
        self.exchange.gathers += 1
        out = []
        with self.timers("gather"):
            for name in ("q", "aux", "aux_setaux"):
                mine = be.to_host(getattr(self, name)[: L.nown])
                full = self.exchange.gather_rows(mine, L.offsets, root)
                out.append(None if full is None else be.to_device(full, self.dtype))
        return tuple(out) if self.exchange.rank == root else None

    @contextlib.contextmanager
    def root_view(self, root: int = 0):
        """Collective context: on rank ``root`` it yields a simulation holding every
        patch in global patch order (serial: ``self``; distributed: a view of this one
        on one rank, whose ``q``, ``aux`` and ``aux_setaux`` are gathered there, so that
        ``sample``/``totals`` of it communicate nothing); None on the other ranks,
        which allocate nothing global.  The gathered copy (a Gatherv to ``root``) is
        kept until the state changes (the next step, regrid or restore), so several
        rank-0 callbacks of one step gather once.  Rank-0 callbacks and checkpoints
        use it."""
        ex = self.exchange
        if not ex.distributed:
            yield self
            return
        if self._full:  # every rank holds every patch already
            arrays = (self.q, self.aux, self.aux_setaux)
        else:
            if self._root_copy is None or self._root_copy[0] != root:
                self._root_copy = (root, self._gather_to(root))
            arrays = self._root_copy[1]
        yield self._whole_view(*arrays) if ex.rank == root else None

    def _whole_view(self, q, aux, aux_setaux) -> Simulation:
        """A one-rank view of this simulation holding the global arrays given (its
        clock, counters, timers and callbacks are this one's)."""
        view = copy.copy(self)
        view.q, view.aux, view.aux_setaux = q, aux, aux_setaux
        view.exchange = Exchange()
        view.layout = Layout.whole_forest(self.forest, self.geom, self.patch_arrays,
                                          self.backend, plans=False)
        view.overlap = view._full = False
        view._root_copy = None
        view.centers_host = view.centers = None
        view._tag_patches = view._tag_memo = view._tag_fetched = None
        return view

    # ------------------------------------------------------------------ queries
    def sample(self, x, y, aux: bool = False):
        """State at points ``(x, y)`` from the finest leaf containing each point.

        Returns an array ``(npoints, num_eqn)``, and with ``aux=True`` also the aux
        values ``(npoints, num_aux)`` of the same cells; points outside the domain raise.
        Collective: each rank reads the points in its own patches, and every rank gets
        all of them (an allgather of the sampled values, not of the state).
        """
        self._localize()
        leaf, j, i = self._locate(x, y)
        L, be = self.layout, self.backend
        mine = slice(None) if L.whole else np.flatnonzero((leaf >= L.lo) & (leaf < L.hi))
        idx = tuple(be.to_device(a) for a in (leaf[mine] - L.lo, j[mine], i[mine]))
        part = be.to_host(self.q[idx[0], :, idx[1], idx[2]]).astype(np.float64)
        part_aux = be.to_host(self.aux[idx[0], :, idx[1], idx[2]]).astype(np.float64) \
            if aux else None
        parts = self.exchange.allgather((mine, part, part_aux))
        if len(parts) > 1:
            part = np.empty((len(leaf), self.riemann.num_eqn))
            part_aux = np.empty((len(leaf), self.riemann.num_aux))
            for rows, vals, avals in parts:
                part[rows] = vals
                if aux:
                    part_aux[rows] = avals
        return (part, part_aux) if aux else part

    def _locate(self, x, y):
        """(patch, row, column) of the finest cell containing each point (host arrays)."""
        x = np.atleast_1d(np.asarray(x, dtype=np.float64))
        y = np.atleast_1d(np.asarray(y, dtype=np.float64))
        (x0, y0), (x1, y1) = self.domain.lower, self.domain.upper
        if np.any((x < x0) | (x > x1) | (y < y0) | (y > y1)):
            raise ValueError("sample point(s) outside the domain")
        nx, ny = self.domain.ntrees
        span = 2**MAX_LEVEL
        gX = np.minimum(((x - x0) / (x1 - x0) * nx * span).astype(np.int64), nx * span - 1)
        gY = np.minimum(((y - y0) / (y1 - y0) * ny * span).astype(np.int64), ny * span - 1)
        leaf = self.forest.locate_global(gX, gY)
        g = self.geom
        i = np.clip(((x - g.xlower[leaf]) / g.dx[leaf]).astype(np.int64), 0, g.mx - 1) + g.mbc
        j = np.clip(((y - g.ylower[leaf]) / g.dy[leaf]).astype(np.int64), 0, g.my - 1) + g.mbc
        return leaf, j, i

    def summary(self) -> dict:
        """The run summary written to ``summary.json``."""
        wall = self.wall_s
        # startup (kernel loading) and Numba compilation elsewhere (CompileWatch) left out
        stepping = wall - self.timers.seconds["startup"] - sum(
            v for k, v in self.timers.compiled.items() if k != "startup")
        return {
            "demo": self.name,
            **self.backend.describe(),
            "riemann": self.riemann.name,
            "steps": self.steps,
            "rejected_steps": self.rejected_steps,
            "regrids": self.regrids,
            "t_final": self.t,
            "cell_updates": int(self.cell_updates),
            "wall_s": wall,
            "startup_s": self.timers.seconds["startup"],
            "compile_s": self.timers.compile_s,
            "cell_updates_per_s": self.cell_updates / stepping if stepping > 0 else None,
            "patches_per_level": {str(k): v for k, v in self.patches_per_level().items()},
            "patches": int(self.geom.npatch),
            "totals_initial": self.totals_initial,
            "totals_final": self.totals(),
            "timers": self.timers.as_dict(self.wall_s),
        }


def _same_leaves_below(a: Forest, b: Forest, level: int) -> bool:
    """Whether forests ``a`` and ``b`` have the same leaves coarser than ``level``."""
    sa, sb = a.level < level, b.level < level
    return bool(np.count_nonzero(sa) == np.count_nonzero(sb)
                and np.array_equal(a.keys[sa], b.keys[sb])
                and np.array_equal(a.level[sa], b.level[sb]))


class _OwnedView:
    """The owned patches of a simulation as a hook sees them (see Simulation.owned)."""

    def __init__(self, sim):
        self._sim = sim
        self.geom, self.patch_arrays = sim.layout.owned_geom, sim.layout.owned_arrays
        self.backend, self.comm = sim.backend, sim.comm

    @property
    def centers_host(self):
        return tuple(self._sim._owned(c) for c in self._sim.centers_host)



def _dt_only(t: float, dt: float) -> tuple:
    return (dt,)
