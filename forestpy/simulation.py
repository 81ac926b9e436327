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
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from forestpy.backend import get_backend
from forestpy.forest import MAX_LEVEL, Brick, Forest
from forestpy.indicators import indicator_undivided_difference, threshold_tagging
from forestpy.patches import (
    PatchGeometry,
    apply_physical_bc,
    build_ghost_plan,
    build_time_sync_plan,
    fill_ghosts,
    normalize_bc,
    transfer,
)
from forestpy.patches.ghost_plan import copy_ghost_frame
from forestpy.patches.status import patch_status
from forestpy.patches.surface_ghosts import fill_ghosts_surface
from forestpy.patches.surface_regrid import surface_fields, surface_regrid
from forestpy.timers import Timers
from forestpy.vtable import SolverVtable, get_method, get_riemann

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


# Set by forestpy.parallel.distributed_setup: a Simulation (exactly this class) built
# meanwhile does its initial refinement distributed over this communicator's ranks.
BUILD_COMM: ContextVar = ContextVar("forestpy_build_comm", default=None)


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
    coarsen : callable, optional
        ``coarsen(q, aux, geom, t) -> bool[npatch]`` replacing the default coarsening
        flags (see :mod:`forestpy.indicators` for criteria).
    regrid_interval : int
        Steps between regrids (0: never).
    setaux, src2, b4step : callable, optional
        Vtable hooks (see :class:`~forestpy.vtable.SolverVtable`).
    callbacks : sequence
        Objects with optional ``on_start(sim)``, ``on_step(sim)``, ``on_end(sim)``;
        ``next_time(sim)`` (optional) names a time the steps must land on exactly (an
        output time), ``timer_phase`` (optional) the timer their calls are charged to
        (``"output"`` for writers; ``"callbacks"`` by default).
    backend : str or Backend
        ``"cpu"`` or ``"gpu"`` (patch arrays resident on the GPU for the whole run).
    dtype : str
        ``"float64"``, or ``"float32"`` storage of the fields on the GPU.
    t_final : float
        Default end time for :meth:`run`.

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
        regrid_interval=2,
        setaux=None,
        src2=None,
        b4step=None,
        callbacks=(),
        backend="cpu",
        dtype="float64",
        t_final=1.0,
        name="simulation",
        check_state=True,
    )

    def __init__(self, riemann, *, qinit: Callable, domain: Domain | None = None, **options):
        unknown = set(options) - set(self.OPTION_DEFAULTS)
        if unknown:
            raise TypeError(
                f"unknown Simulation option(s) {sorted(unknown)}; valid: "
                f"{sorted(self.OPTION_DEFAULTS)}"
            )
        opts = {**self.OPTION_DEFAULTS, **options}
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
        self.regrid_interval = int(opts["regrid_interval"])
        self.t_final = float(opts["t_final"])
        self.check_state = bool(opts["check_state"])
        self.params = self.riemann.params_array(opts["params"])
        self.bc = normalize_bc(opts["bc"], *self.domain.periodic)

        self.solver = get_method(opts["method"])(
            self.riemann,
            order=opts["order"],
            transverse_waves=opts["transverse_waves"],
            limiter=opts["limiter"],
            capacity_index=opts["capacity_index"],
            backend=self.backend,
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
        tag4refinement, tag4coarsening = threshold_tagging(
            indicator_undivided_difference(field), opts["refine_threshold"], coarsen)
        if opts["tag"] is not None:
            tag4refinement = opts["tag"]
            if options.get("coarsen_threshold") is None:
                tag4coarsening = None  # custom refinement flags: coarsen only when asked
        if opts["coarsen"] is not None:
            tag4coarsening = opts["coarsen"]
        self.vtable = SolverVtable(
            qinit=qinit,
            setaux=opts["setaux"],
            step=self.solver.step,
            time_sync=self.solver.time_sync,
            b4step=opts["b4step"],
            src2=opts["src2"],
            tag4refinement=tag4refinement,
            tag4coarsening=tag4coarsening,
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
        comm = BUILD_COMM.get()
        if comm is not None and type(self) is Simulation:  # forestpy.parallel.distributed_setup
            from forestpy.parallel.distributed import DistributedSimulation

            self.__class__ = DistributedSimulation  # the initial refinement, distributed
            self._pending_comm = comm
        self._initial_refinement()
        self.timers = Timers()  # the phases of the run, not of the initial refinement
        self.totals_initial = self.totals()

    # ------------------------------------------------------------------ setup
    def _set_forest(self, forest: Forest) -> None:
        """New forest: geometry and plans built on the host, uploaded once."""
        be = self.backend
        self.forest = forest
        geom = self.geom = PatchGeometry.from_forest(forest, self.mx, self.my, self.mbc)
        self.ghost_plan = build_ghost_plan(forest, geom).to(be)
        self.sync_plan = build_time_sync_plan(forest, geom).to(be)
        self.centers_host = self.centers = None  # made on first use (see the properties)
        # what the kernels need of the geometry, as backend arrays
        self.patch_arrays = SimpleNamespace(
            mx=geom.mx, my=geom.my, mbc=geom.mbc, npatch=geom.npatch,
            dx=be.to_device(geom.dx), dy=be.to_device(geom.dy),
            sides=[be.to_device(geom.on_side(side)) for side in range(4)],
        )
        self.aux_setaux = be.to_device(self._make_aux(), self.dtype)
        self.aux = self.aux_setaux.copy()

    @property
    def centers_host(self):
        """Cell centres ``(x, y)`` of the patches, ghost cells included, each a host array
        ``(npatch, NY, NX)``; made on first use after a regrid (a run whose hooks never
        ask for them makes none: on the GPU, building them is a large part of a
        regrid)."""
        if self._centers_host is None:
            self._centers_host = self._centers_geometry().cell_centers(ghosts=True)
        return self._centers_host

    @centers_host.setter
    def centers_host(self, value):
        self._centers_host = value

    def _centers_geometry(self):
        """The geometry of the patches of ``q``, whose cell centres ``centers_host``
        holds."""
        return self.geom

    @property
    def centers(self):
        """:attr:`centers_host` as backend arrays (made on first use after a regrid)."""
        if self._centers is None:
            self._centers = tuple(self.backend.to_device(c) for c in self.centers_host)
        return self._centers

    @centers.setter
    def centers(self, value):
        self._centers = value

    def _make_aux(self):
        geom, naux = self.geom, self.riemann.num_aux
        if self.vtable.setaux is None:
            if naux:
                raise ValueError(f"Riemann solver {self.riemann.name!r} needs aux: give setaux")
            return np.zeros((geom.npatch, naux) + geom.shape)
        x, y = self.centers_host
        aux = np.asarray(
            self.vtable.setaux(x, y, geom.dx[:, None, None], geom.dy[:, None, None]),
            dtype=np.float64,
        )
        if aux.shape != (naux,) + x.shape:
            raise ValueError(f"setaux returned shape {aux.shape}, expected {(naux,) + x.shape}")
        return np.ascontiguousarray(np.moveaxis(aux, 0, 1))

    def _qinit(self):
        x, y = self.centers_host
        q = np.asarray(self.vtable.qinit(x, y), dtype=np.float64)
        meqn = self.riemann.num_eqn
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
            flags = self._refine_flags()
            if not flags.any():
                break
            forest = forest.refine(flags).balance()
        self.regrids = 0

    def _initial_state_set(self) -> None:
        """Called by :meth:`_initial_refinement` once ``q`` holds the initial condition
        of a level (a distributed run checks it across ranks)."""
        self._validate(self.q, "the initial condition")

    # ------------------------------------------------------------------ pieces
    def fill_ghosts(self, q=None) -> None:
        """Fill every ghost cell of ``q`` (default the current state) in place."""
        q = self.q if q is None else q
        with self.timers("ghost_fill"):
            surface = self.riemann.surface_interp
            if surface is None:
                fill_ghosts(self.ghost_plan, q, self.riemann.positive, backend=self.backend,
                            timers=self.timers)
            else:
                self._fill_ghosts_surface(q, *surface)
            with self.timers("ghost_fill.physical_bc"):
                apply_physical_bc(
                    q,
                    self.geom,
                    self.bc,
                    self.riemann.wall_reflect,
                    self.t,
                    self.aux,
                    centers=self._centers_of,
                    backend=self.backend,
                    sides=self.patch_arrays.sides,
                )

    def _fill_ghosts_surface(self, q, i: int, j: int) -> None:
        """Ghost fill of a depth ``q[i]`` over the bottom ``aux[j]`` (see
        ``RiemannSolver.surface_interp``): copies exact, averages and interpolations
        through the rest surface of :mod:`forestpy.patches.surface_ghosts`.  Interior
        cells are not touched."""
        aux_bc = tuple("extrap" if callable(k) else k for k in self.bc)
        apply_physical_bc(self.aux, self.geom, aux_bc, ((), ()), self.t,
                          backend=self.backend, sides=self.patch_arrays.sides)
        fill_ghosts_surface(self.ghost_plan, q, self.aux, i, j, self._surface_dry_tolerance(),
                            self.riemann.positive, backend=self.backend, timers=self.timers)

    def _surface_dry_tolerance(self) -> float:
        """The depth at or below which a cell is dry for the surface rules (the solver
        parameter named by ``RiemannSolver.surface_dry``; 0 when it names none)."""
        name = self.riemann.surface_dry
        if name is None:
            return 0.0
        return float(self.params[self.riemann.param_names.index(name)])

    def _centers_of(self, idx):
        x, y = self.centers
        return x[idx], y[idx]

    def _host_flags(self, flags) -> np.ndarray:
        flags = self.backend.to_host(flags).astype(bool)
        if flags.shape != (self.geom.npatch,):
            raise ValueError(f"tagging returned shape {flags.shape}, expected "
                             f"({self.geom.npatch},)")
        return flags

    def _refine_flags(self) -> np.ndarray:
        flags = self._host_flags(self.vtable.tag4refinement(self.q, self.aux, self.geom, self.t))
        return flags & (self.geom.level < self.max_level)

    def totals(self) -> dict:
        """Integral of every conserved field over the domain (capacity-weighted): the
        correctly rounded sum (``math.fsum``) of the per-patch integrals of
        :meth:`_patch_totals`.  It depends on the patch values alone, not on the order
        or the grouping of the patches, so a distributed run's totals (per-patch
        integrals computed by the owners, gathered) are bitwise these."""
        return self._sum_patch_totals(self._patch_totals(slice(None), self.geom))

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

    # ------------------------------------------------------------------ stepping
    def _warm_up(self) -> None:
        """Compile (or load from Numba's disk cache) the ghost-fill and time-sync
        kernels now, so that the phase timers measure only the work (the step kernel
        compiles in the first time-step estimate)."""
        fill_ghosts(self.ghost_plan, self.q.copy(), self.riemann.positive, backend=self.backend)
        if len(self.sync_plan) and self.vtable.time_sync is not None:
            g = self.patch_arrays
            edge = self.xp.zeros((g.npatch, 4, self.riemann.num_eqn, max(g.mx, g.my)))
            # dt = 0: a correction of zero, applied to a scratch copy
            self.vtable.time_sync(self.sync_plan, self.q, self.q.copy(), self.aux, edge, 0.0)

    def _estimate_dt(self) -> float:
        probe = min(self.geom.dx.min(), self.geom.dy.min()) * 1e-3
        self.fill_ghosts()
        _, cfl, _ = self.vtable.step(self.q, self.aux, self.patch_arrays, probe)
        c = float(self.backend.to_host(cfl.max()))
        if c <= 0.0:
            return min(self.dt_max, self.t_final - self.t) or probe
        return probe * self.cfl_desired / c

    def step(self, dt: float) -> tuple[bool, float]:
        """Try one step of size ``dt``; return (accepted, Courant number).

        The time sync and split sources run before the Courant number is known on the
        host, so that one small transfer per step (Courant number and state checks
        together) is all that crosses from the device; a rejected step discards them.
        """
        self.fill_ghosts()
        if self.vtable.b4step is not None:
            with self.timers("sources"):
                self.vtable.b4step(self, dt)
        with self.timers("step"):
            q_new, cfl, edge = self.vtable.step(self.q, self.aux, self.patch_arrays, dt)
        if self.vtable.time_sync is not None:
            with self.timers("time_sync"):
                self.vtable.time_sync(self.sync_plan, self.q, q_new, self.aux, edge, dt)
        if self.vtable.src2 is not None:
            with self.timers("sources"):
                copy_ghost_frame(self.q, q_new, self.mbc)  # the hook sees no unset memory
                x, y = self.centers
                self.vtable.src2(q_new, self.aux, x, y, self.t, dt)
        with self.timers("cfl_check"):
            status = self._step_status(q_new, cfl)
        courant = float(status[0])
        if courant > self.cfl_max or not math.isfinite(courant):
            self.rejected_steps += 1
            if not math.isfinite(courant):
                self._validate(q_new, f"step {self.steps + 1}")
            return False, courant
        if self.check_state and not (
            math.isfinite(status[1]) and all(v >= 0.0 for v in status[2:])
        ):
            self._validate(q_new, f"step {self.steps + 1}")
        self.q = q_new
        self.t += dt
        self.steps += 1
        self.cell_updates += self.geom.npatch * self.mx * self.my
        return True, courant

    def _step_status(self, q_new, cfl) -> np.ndarray:
        """``[largest Courant number, sum of the interior, min of each positive field]``
        reduced on the backend and moved to the host in one transfer."""
        xp = self.xp
        courant = cfl.max() if cfl.shape[0] else xp.zeros((), dtype=np.float64)
        if not self.check_state:
            return self.backend.to_host(courant.reshape(1))
        per_patch = patch_status(q_new, self.mbc, self.riemann.positive, self.backend)
        sums = per_patch[:, :1].sum(axis=0)
        lows = per_patch[:, 1:].min(axis=0) if per_patch.shape[1] > 1 else sums[:0]
        return self.backend.to_host(xp.concatenate([courant.reshape(1), sums, lows]))

    def regrid(self) -> None:
        """Tag, refine/coarsen/balance, transfer data conservatively, rebuild plans."""
        with self.timers("regrid"):
            self.fill_ghosts()
            refine = self._refine_flags()
            coarsen = np.zeros_like(refine)
            if self.vtable.tag4coarsening is not None:
                coarsen = self._host_flags(
                    self.vtable.tag4coarsening(self.q, self.aux, self.geom, self.t)
                )
                coarsen &= (self.geom.level > self.min_level) & ~refine
            if not refine.any() and not coarsen.any():
                return
            old_forest, old_geom = self.forest, self.geom
            forest = old_forest.refine(refine)
            if coarsen.any():
                gx, gy = forest.global_xy()
                src = old_forest.locate_global(gx, gy)
                kept = coarsen[src] & (old_forest.level[src] == forest.level)
                forest = forest.coarsen(kept)
            forest = forest.balance()
            if forest == old_forest:  # coarsening undone by balance: nothing changed
                return
            # with a capacity kappa the conserved density is kappa q: transfer that
            # (the transfer keeps sum(value * area)), then divide by the new kappa
            capa = self.capacity_index
            density = self.q * self.aux[:, capa : capa + 1] if capa >= 0 else self.q
            surface = self.riemann.surface_interp
            meqn = density.shape[1]
            if surface is not None:  # the depth and the surface quantities of the shores
                drytol = self._surface_dry_tolerance()
                density = self.xp.concatenate(
                    [density, surface_fields(density, self.aux, *surface, drytol, self.xp)],
                    axis=1,
                )
            q_new = transfer(
                old_forest,
                old_geom,
                density,
                forest,
                PatchGeometry.from_forest(forest, self.mx, self.my, self.mbc),
                backend=self.backend,
            )
            self._set_forest(forest)
            if surface is not None:
                gx, gy = forest.global_xy()
                dlev = self.geom.level - old_geom.level[old_forest.locate_global(gx, gy)]
                q_new = surface_regrid(
                    q_new, meqn, self.aux, *surface, self.mbc, drytol,
                    self.riemann.surface_regrid, dlev, self.backend,
                )
            if capa >= 0:
                b = self.mbc
                q_new[:, :, b:-b, b:-b] /= self.aux[:, capa : capa + 1, b:-b, b:-b]
            self.q = q_new
            self.regrids += 1

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
        while self.t < t_final - eps and (max_steps is None or taken < max_steps):
            dt = min(self.dt, self.dt_max, t_final - self.t)
            stop = self._next_stop(eps)
            if stop is not None and self.t + dt > stop:
                dt = stop - self.t  # land on the output time, as Clawpack does
            accepted, courant = self.step(dt)
            if courant > 0:
                self.dt = min(self.dt_max, dt * self.cfl_desired / courant)
            if not accepted:
                if self.rejected_steps > 10 * (self.steps + 10):
                    raise StateError("too many rejected steps: the CFL condition cannot be met")
                continue
            taken += 1
            if (
                self.regrid_interval
                and self.steps % self.regrid_interval == 0
                and self.max_level > self.min_level
            ):
                self.regrid()
            for cb in self.callbacks:
                if hasattr(cb, "on_step"):
                    with self.timers(getattr(cb, "timer_phase", "callbacks")):
                        cb.on_step(self)
        for cb in self.callbacks:
            if hasattr(cb, "on_end"):
                with self.timers(getattr(cb, "timer_phase", "callbacks")):
                    cb.on_end(self)
        self.wall_s += time.perf_counter() - start
        return self

    def _next_stop(self, eps: float) -> float | None:
        """The earliest time after ``t`` that a callback asks the steps to land on
        (``cb.next_time(sim)``: output times), or None."""
        stops = [
            cb.next_time(self) for cb in self.callbacks if hasattr(cb, "next_time")
        ]
        stops = [float(t) for t in stops if t is not None and t > self.t + eps]
        return min(stops) if stops else None

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path, meta: dict | None = None):
        """Write the whole state to one ``.npz`` file (atomically); return its path.
        See :mod:`forestpy.io.checkpoint`."""
        from forestpy.io.checkpoint import write_checkpoint

        return write_checkpoint(self, path, meta=meta)

    def load_checkpoint(self, path) -> Simulation:
        """Read a checkpoint and :meth:`restore` it; returns ``self``."""
        from forestpy.io.checkpoint import read_checkpoint

        return self.restore(read_checkpoint(path))

    def restore(self, data: dict) -> Simulation:
        """Replace forest, patch data, clock, counters, timers and callback state by
        those of a checkpoint (from :func:`~forestpy.io.checkpoint.read_checkpoint`).

        ``self`` must come from the same setup (same Riemann solver, patch size and
        domain); the stateful callbacks (those with ``load_state_dict``) must match the
        checkpoint's in number, order and class.  Otherwise
        :class:`~forestpy.io.checkpoint.CheckpointError` is raised and ``self`` is
        left unchanged.  A following :meth:`run` continues bitwise like the run that
        wrote the checkpoint (the checkpoint's next ``dt`` is kept).
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
        naux = self.riemann.num_aux
        if data["aux"].shape[1] != naux or data["aux_setaux"].shape[1] != naux:
            raise CheckpointError(
                f"{where}: aux has {data['aux'].shape[1]} fields, the solver {naux}"
            )
        stateful = [cb for cb in self.callbacks if callable(getattr(cb, "load_state_dict", None))]
        stored = data["callbacks"]
        if [type(cb).__name__ for cb in stateful] != [e["class"] for e in stored]:
            raise CheckpointError(
                f"{where}: stateful callbacks differ: checkpoint "
                f"{[e['class'] for e in stored]}, this simulation "
                f"{[type(cb).__name__ for cb in stateful]}"
            )

        be = self.backend
        self._set_forest(forest)
        self.aux_setaux = be.to_device(np.array(data["aux_setaux"]), self.dtype)
        self.aux = be.to_device(np.array(data["aux"]), self.dtype)
        self.q = be.to_device(np.array(data["q"]), self.dtype)
        self.t = float(data["t"])
        self.steps = int(data["steps"])
        self.rejected_steps = int(data["rejected_steps"])
        self.regrids = int(data["regrids"])
        self.cell_updates = int(data["cell_updates"])
        self.dt = None if data["dt"] is None else float(data["dt"])
        self.wall_s = float(data.get("wall_s", 0.0))
        for phase, seconds in data.get("timers", {}).items():
            self.timers.seconds[phase] = float(seconds)
        self.totals_initial = {k: float(v) for k, v in data["totals_initial"].items()}
        for cb, entry in zip(stateful, stored):
            try:
                cb.load_state_dict(entry["state"])
            except (KeyError, TypeError, ValueError) as e:
                raise CheckpointError(
                    f"{where}: state of callback {entry['class']} does not fit: {e}"
                ) from e
        return self

    # ------------------------------------------------------------------ queries
    def sample(self, x, y, aux: bool = False):
        """State at points ``(x, y)`` from the finest leaf containing each point.

        Returns an array ``(npoints, num_eqn)``, and with ``aux=True`` also the aux
        values ``(npoints, num_aux)`` of the same cells; points outside the domain raise.
        """
        leaf, j, i = self._locate(x, y)
        be = self.backend
        leaf, j, i = be.to_device(leaf), be.to_device(j), be.to_device(i)
        values = be.to_host(self.q[leaf, :, j, i]).astype(np.float64)
        if not aux:
            return values
        return values, be.to_host(self.aux[leaf, :, j, i]).astype(np.float64)

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
        stepping = wall - self.timers.seconds["startup"]
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
            "cell_updates_per_s": self.cell_updates / stepping if stepping > 0 else None,
            "patches_per_level": {str(k): v for k, v in self.patches_per_level().items()},
            "patches": int(self.geom.npatch),
            "totals_initial": self.totals_initial,
            "totals_final": self.totals(),
            "timers": self.timers.as_dict(self.wall_s),
        }
