"""Solver vtables and the Riemann-solver registry.

A *Riemann solver* is a record of pointwise functions plus the metadata that travels
with them (ForestClaw's ``rpn2``/``rpt2`` pair, clawpack/riemann's ``num_eqn`` and
``num_waves``).  The pointwise functions are plain Python written once; the batched
kernels of :mod:`forestpy.solvers.clawpack` compile them with Numba.

Pointwise contract
------------------
``rpn2(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq)``
    Normal Riemann problem at one interface.  ``ixy`` is 1 when the interface normal is
    x and 2 when it is y (Clawpack's convention).  ``ql``/``qr`` (``num_eqn``) are the
    states left/below and right/above, ``auxl``/``auxr`` (``num_aux``) their aux values,
    ``params`` a float64 array in the order of ``param_names``.  Outputs (written in
    place): ``wave[num_eqn, num_waves]`` (f-waves when ``fwave`` is true), speeds
    ``s[num_waves]``, and the fluctuations ``amdq``, ``apdq`` (``num_eqn``).  For a
    conservative solver ``amdq + apdq = f(qr) - f(ql)``.

``rpt2(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq)``
    Transverse split of the fluctuation ``asdq`` produced by the normal solve at the
    same interface: ``imp == 1`` when ``asdq`` is the left-going part (it enters the
    cell of ``ql``), ``imp == 2`` for the right-going part (cell of ``qr``).
    ``aux1``/``aux2``/``aux3`` are the aux values of that cell's transverse neighbours
    at offsets -1, 0, +1.  Outputs ``bmasdq`` and ``bpasdq`` (``num_eqn``): the parts
    moving in the negative and positive transverse direction.

Functions must not use globals other than constants and other ``numba.njit`` functions,
must not allocate, and must treat ``params`` as read-only.

Work-sharing contract (optional)
--------------------------------
A solver may also give its normal and transverse solves as pieces that share work, so
that a kernel computes what depends on one cell once per cell and sweep, and what
depends on one interface once for the normal solve and both transverse splittings
(``rpn2`` would otherwise recompute the cell quantities at every face, and ``rpt2``
the interface's averages twice more):

``cell_state(q, aux, params) -> tuple``
    ``num_cell_state`` floats derived from one cell (for shallow water ``sqrt(h)``,
    ``1/sqrt(h)``, the momenta over ``sqrt(h)``, ...).  It must not fail on any input
    (a negative depth gives NaN entries: the normal solve reports the state).
``edge_state(ixy, ql, qr, csl, csr, auxl, auxr, params) -> tuple``
    ``num_edge_state`` floats of one interface (Roe averages, ``0.5/c``, ...), from the
    two states and their cell states; like ``cell_state`` it never fails.  May be
    ``None`` (``num_edge_state == 0``).
``rpn2e(ixy, ql, qr, csl, csr, auxl, auxr, params, es, wave, s, amdq, apdq)``
    The normal solve of ``rpn2``, given the cell states ``csl``/``csr`` and the
    interface state ``es``.
``rpt2e(ixy, imp, ql, qr, csl, csr, aux1, aux2, aux3, params, es, asdq, bmasdq, bpasdq)``
    The transverse solve of ``rpt2`` at the same interface, with the same cell and
    interface states as the normal solve.

``csl``, ``csr`` and ``es`` are indexable sequences: tuples when called from a composed
``rpn2``/``rpt2``, array rows inside the kernels.  The four functions are the one
source: the solver's ``rpn2``/``rpt2`` are written as compositions of them
(``rpn2 = rpn2e(.., cell_state(ql), cell_state(qr), edge_state(..))``), so the kernels
that call ``rpn2``/``rpt2`` (the GPU kernel, the time sync's fluctuations) and the CPU
step kernel that calls the pieces compute the same thing, bitwise when the composition
keeps the operations of the pieces.  A solver without the pieces (all ``None``) works
as before.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

__all__ = [
    "RiemannSolver",
    "register_riemann",
    "get_riemann",
    "available_riemann",
    "register_method",
    "get_method",
    "register_plugin_module",
    "SolverVtable",
    "step_takes_patch_list",
]


@dataclass(frozen=True)
class RiemannSolver:
    """A pointwise Riemann solver and its metadata (see the module docstring).

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"shallow_roe"``.
    num_eqn, num_waves, num_aux : int
        Sizes of the state, of the wave fan, and of the aux vector per cell.
    rpn2, rpt2 : callable
        Pointwise normal and transverse solvers; ``rpt2`` may be ``None`` (then only
        ``transverse_waves=0`` is possible).
    field_names : tuple of str
        Name of every component of ``q``.
    param_names : tuple of str
        Names of the entries of ``params``; ``default_params`` gives their defaults.
    fwave : bool
        True when ``wave`` holds f-waves (flux-difference splitting).
    conserved : tuple of bool
        Which components are conserved quantities (totals reported and kept).
    wall_reflect : tuple of two tuples of int
        Components negated in the mirror ghost cells of a reflecting wall normal to x
        and normal to y (e.g. ``((1,), (2,))`` for the momenta of shallow water).
    positive : tuple of int
        Components that must stay non-negative (a depth, a density); a state that
        violates this is reported as an error.
    description : str
        One line for listings.
    derived_fields : mapping of str to callable
        Quantities computed from the state for output (ParaView frames):
        ``name -> fn(q, aux, params) -> array``.  ``q`` is a NumPy array of shape
        ``(npatch, num_eqn, ny, nx)``, ``aux`` ``(npatch, num_aux, ny, nx)`` and
        ``params`` the float64 array of :meth:`params_array`; the result has shape
        ``(npatch, ny, nx)``.  Functions are vectorised over all patches (no loop) and
        must not modify their inputs.  Names may not repeat ``field_names``.
    surface_interp : (int, int) or None
        ``(i, j)``: component ``q[i]`` is a depth over the bottom elevation ``aux[j]``.
        Ghost filling and regrid transfer then interpolate and average the surface
        ``q[i] + aux[j]`` instead of the depth (so a lake at rest over a varying bottom
        stays at rest across coarse-fine interfaces and through regrids), the bottom is
        mirrored at walls and extrapolated at the other physical sides.  At shorelines
        the ghost cells that are averages or interpolations use the rest surface
        ``min(b, eta_ref)`` of the dry cells (``eta_ref``: mean surface of the wet cells
        of the stencil; :mod:`forestpy.patches.surface_ghosts`), so a lake at rest
        with dry land stays at rest across coarse-fine interfaces; interior cells are
        never modified by a ghost fill.
    surface_velocity : tuple of int or None
        The components that are momenta of the depth ``q[i]`` of ``surface_interp``:
        at interpolated ghost cells their velocity is kept within the sources' (see
        :mod:`forestpy.patches.surface_ghosts`).  ``None`` (default): every component
        but the depth.  A two-layer solver whose ``surface_interp`` is its lower layer
        names that layer's momenta; its upper layer's depth and momenta are then
        interpolated as they are (at rest: a constant depth, exact).  Only with
        ``surface_interp``.
    surface_dry : str or None
        Name of the parameter (in ``param_names``) holding the depth at or below which
        a cell is dry (e.g. ``"dry_tolerance"``); ``None``: dry means ``h == 0``.
        Only with ``surface_interp``.
    surface_regrid : {"conserve", "rest"}
        How a regrid treats a 2x2 family at a shoreline (some child dry in the
        family's rest state).  A coarse cell at rest holds less water than its partly
        dry children at rest (``sum max(0, eta - b_c) > 4 (eta - mean b_c)``), so no
        transfer can keep both the volume and the rest state there.  ``"conserve"``
        (default): volume and momentum of every family exact; a refined shore family
        gets the rest state of the surface ``eta*`` that holds the parent's volume, a
        coarsened family the average depth (its surface then stands above the lake's
        by the mean height of its dry children above it).  ``"rest"`` (GeoClaw's
        choice): a refined shore family gets ``max(0, eta - b_c)`` with ``eta`` the
        parent's surface (a dry parent: the mean wet surface of its face neighbours),
        a coarsened partly dry family ``min(mean h, max(0, eta_wet - b))``; volume
        changes at shorelines only.  Only with ``surface_interp``.
    num_cell_state, cell_state, num_edge_state, edge_state, rpn2e, rpt2e
        The optional work-sharing pieces of ``rpn2``/``rpt2`` (see the module
        docstring): ``cell_state`` and ``rpn2e`` together (``rpt2e`` too when ``rpt2``
        is given), ``edge_state`` optional; all ``None`` (default): the kernels call
        ``rpn2``/``rpt2``.  ``docs/riemann_solvers.md`` describes the built-in ones.
    """

    name: str
    num_eqn: int
    num_waves: int
    rpn2: Callable
    rpt2: Callable | None = None
    num_aux: int = 0
    field_names: tuple[str, ...] = ()
    param_names: tuple[str, ...] = ()
    default_params: Mapping[str, float] = field(default_factory=dict)
    fwave: bool = False
    conserved: tuple[bool, ...] = ()
    wall_reflect: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    positive: tuple[int, ...] = ()
    description: str = ""
    derived_fields: Mapping[str, Callable] = field(default_factory=dict)
    surface_interp: tuple[int, int] | None = None
    surface_velocity: tuple[int, ...] | None = None
    surface_dry: str | None = None
    surface_regrid: str = "conserve"
    num_cell_state: int = 0
    cell_state: Callable | None = None
    num_edge_state: int = 0
    edge_state: Callable | None = None
    rpn2e: Callable | None = None
    rpt2e: Callable | None = None

    @property
    def shares_work(self) -> bool:
        """Whether the solver gives the work-sharing pieces of ``rpn2``/``rpt2``."""
        return self.rpn2e is not None

    def __post_init__(self):
        self._check_work_sharing()
        if not self.field_names:
            object.__setattr__(self, "field_names", tuple(f"q{m}" for m in range(self.num_eqn)))
        if len(self.field_names) != self.num_eqn:
            raise ValueError(
                f"Riemann solver {self.name!r}: {len(self.field_names)} field names "
                f"for num_eqn={self.num_eqn}"
            )
        if not self.conserved:
            object.__setattr__(self, "conserved", (True,) * self.num_eqn)
        object.__setattr__(self, "derived_fields", dict(self.derived_fields))
        clash = set(self.derived_fields) & set(self.field_names)
        if clash:
            raise ValueError(
                f"Riemann solver {self.name!r}: derived field name(s) {sorted(clash)} "
                "repeat field_names"
            )
        for dname, fn in self.derived_fields.items():
            if not callable(fn):
                raise TypeError(
                    f"Riemann solver {self.name!r}: derived field {dname!r} is not callable"
                )
        if self.surface_interp is not None:
            i, j = self.surface_interp
            if not (0 <= i < self.num_eqn and 0 <= j < self.num_aux):
                raise ValueError(
                    f"Riemann solver {self.name!r}: surface_interp={self.surface_interp} needs "
                    f"0 <= depth index < num_eqn={self.num_eqn} and 0 <= bottom index < "
                    f"num_aux={self.num_aux}"
                )
        if self.surface_velocity is not None:
            bad = [m for m in self.surface_velocity
                   if not 0 <= m < self.num_eqn or self.surface_interp is None
                   or m == self.surface_interp[0]]
            if bad:
                raise ValueError(
                    f"Riemann solver {self.name!r}: surface_velocity={self.surface_velocity} "
                    f"needs surface_interp and components in 0..{self.num_eqn - 1} other "
                    "than the depth")
        if self.surface_regrid not in ("conserve", "rest"):
            raise ValueError(
                f"Riemann solver {self.name!r}: surface_regrid={self.surface_regrid!r}; "
                "use 'conserve' or 'rest'"
            )
        if self.surface_interp is None and (
            self.surface_dry is not None or self.surface_regrid != "conserve"
        ):
            raise ValueError(
                f"Riemann solver {self.name!r}: surface_dry and surface_regrid need "
                "surface_interp"
            )
        if self.surface_dry is not None and self.surface_dry not in self.param_names:
            raise ValueError(
                f"Riemann solver {self.name!r}: surface_dry={self.surface_dry!r} is not one "
                f"of param_names {list(self.param_names)}"
            )
        unknown = set(self.default_params) - set(self.param_names)
        if unknown:
            raise ValueError(
                f"Riemann solver {self.name!r}: default_params has unknown names "
                f"{sorted(unknown)}; param_names are {list(self.param_names)}"
            )

    def _check_work_sharing(self):
        pieces = {"cell_state": self.cell_state, "rpn2e": self.rpn2e}
        if self.rpt2 is not None:
            pieces["rpt2e"] = self.rpt2e
        given = [n for n, f in pieces.items() if f is not None]
        if not given and self.edge_state is None and self.rpt2e is None:
            if self.num_cell_state or self.num_edge_state:
                raise ValueError(
                    f"Riemann solver {self.name!r}: num_cell_state/num_edge_state without "
                    "the work-sharing functions")
            return
        missing = sorted(set(pieces) - set(given))
        if missing:
            raise ValueError(
                f"Riemann solver {self.name!r}: the work-sharing contract needs "
                f"{sorted(pieces)}; missing {missing}")
        if self.rpt2 is None and self.rpt2e is not None:
            raise ValueError(f"Riemann solver {self.name!r}: rpt2e without rpt2")
        for n in ("cell_state", "edge_state", "rpn2e", "rpt2e"):
            f = getattr(self, n)
            if f is not None and not callable(f):
                raise TypeError(f"Riemann solver {self.name!r}: {n} is not callable")
        if int(self.num_cell_state) < 1:
            raise ValueError(
                f"Riemann solver {self.name!r}: num_cell_state must be >= 1 with cell_state")
        if (self.edge_state is None) != (int(self.num_edge_state) == 0) or \
                int(self.num_edge_state) < 0:
            raise ValueError(
                f"Riemann solver {self.name!r}: num_edge_state must be >= 1 with "
                "edge_state and 0 without")

    def params_array(self, overrides: Mapping[str, float] | None = None) -> np.ndarray:
        """Return ``params`` as a float64 array in ``param_names`` order.

        Every name needs a value, from ``overrides`` or ``default_params``; unknown
        names in ``overrides`` raise ``ValueError``.
        """
        overrides = dict(overrides or {})
        unknown = set(overrides) - set(self.param_names)
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {sorted(unknown)} for Riemann solver {self.name!r}; "
                f"valid: {list(self.param_names)}"
            )
        values = []
        for p in self.param_names:
            if p in overrides:
                values.append(float(overrides[p]))
            elif p in self.default_params:
                values.append(float(self.default_params[p]))
            else:
                raise ValueError(f"Riemann solver {self.name!r} needs parameter {p!r}")
        return np.array(values if values else [0.0], dtype=np.float64)


_REGISTRY: dict[str, RiemannSolver] = {}
_ENTRY_POINTS_LOADED = False


def register_riemann(solver: RiemannSolver, *, replace: bool = False) -> RiemannSolver:
    """Add ``solver`` to the registry under ``solver.name`` and return it.

    Registering a different solver under a taken name raises unless ``replace``.
    """
    if not isinstance(solver, RiemannSolver):
        raise TypeError(f"expected a RiemannSolver, got {type(solver).__name__}")
    old = _REGISTRY.get(solver.name)
    if old is not None and old is not solver and not replace:
        raise ValueError(f"a Riemann solver named {solver.name!r} is already registered")
    _REGISTRY[solver.name] = solver
    return solver


# Plugins reach the registries in two ways, neither an import by the framework: modules
# named by the composition root (forestpy/__init__.py: the built-in solvers), imported on
# the first lookup, and the entry points of the groups "forestpy.riemann" and
# "forestpy.methods" (third-party packages).
_PLUGIN_MODULES: list[str] = []
_METHODS: dict[str, Callable | str] = {}


def register_plugin_module(module: str) -> None:
    """Name a module that registers plugins when imported; it is imported on the first
    registry lookup (so that importing the framework imports no plugin)."""
    global _ENTRY_POINTS_LOADED
    if module not in _PLUGIN_MODULES:
        _PLUGIN_MODULES.append(module)
        _ENTRY_POINTS_LOADED = False


def register_method(name: str, factory: Callable | str, *, replace: bool = False) -> None:
    """Register a numerical method (a solver that turns a Riemann solver into batched
    step kernels) under ``name``.  ``factory`` is called as
    ``factory(riemann, backend=..., **method_options)`` and returns an object with
    ``step``, ``set_params`` and ``capacity_index``, and optionally ``time_sync``
    (without it the coarse-fine conservation fix is skipped)
    (see :class:`forestpy.solvers.clawpack.solver.ClawpackSolver`); it may be given
    as ``"module:attribute"``, imported on first use."""
    old = _METHODS.get(name)
    if old is not None and old != factory and not replace:
        raise ValueError(f"a method named {name!r} is already registered")
    _METHODS[name] = factory


_CONFIG_KINDS: dict[str, Callable | str] = {}


def register_config_kind(name: str, loader: Callable | str) -> None:
    """Register what ``forestpy run --config FILE`` does for ``[run] kind = name``:
    ``loader(path)`` reads the file and returns a demo-like object (``OPTIONS``,
    ``setup(**overrides)``, optionally ``report(sim, out)``, ``output`` and ``name``);
    it may be given as ``"module:attribute"``, imported on first use."""
    _CONFIG_KINDS[name] = loader


def get_config_kind(name: str) -> Callable:
    """The loader registered for configuration files of kind ``name``."""
    try:
        loader = _CONFIG_KINDS[name]
    except KeyError:
        raise KeyError(f"no configuration kind {name!r}; known: {sorted(_CONFIG_KINDS)}"
                       ) from None
    if isinstance(loader, str):
        module, _, attr = loader.partition(":")
        loader = _CONFIG_KINDS[name] = getattr(importlib.import_module(module), attr)
    return loader


def _load_builtin_and_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for module in _PLUGIN_MODULES:
        importlib.import_module(module)
    for ep in metadata.entry_points(group="forestpy.riemann"):
        obj = ep.load()
        solver = obj() if callable(obj) and not isinstance(obj, RiemannSolver) else obj
        register_riemann(solver)
    for ep in metadata.entry_points(group="forestpy.methods"):
        _METHODS.setdefault(ep.name, ep.value)


def get_method(name: str) -> Callable:
    """The factory of the method registered as ``name`` (see :func:`register_method`)."""
    _load_builtin_and_entry_points()
    try:
        factory = _METHODS[name]
    except KeyError:
        raise KeyError(f"no method named {name!r}; registered: {sorted(_METHODS)}") from None
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = _METHODS[name] = getattr(importlib.import_module(module), attr)
    return factory


def get_riemann(name: str | RiemannSolver) -> RiemannSolver:
    """Look up a Riemann solver by name (a ``RiemannSolver`` passes through)."""
    if isinstance(name, RiemannSolver):
        return name
    _load_builtin_and_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"no Riemann solver named {name!r}; registered: {sorted(_REGISTRY)}"
        ) from None


def available_riemann() -> list[str]:
    """Names of all registered Riemann solvers (built-in and entry points)."""
    _load_builtin_and_entry_points()
    return sorted(_REGISTRY)


def step_takes_patch_list(step) -> bool:
    """Whether a method's ``step`` takes a patch list (``rows``, writing only those
    patches' entries of ``out``, ``edge_out`` and ``cfl_out``; see
    :class:`SolverVtable`)."""
    import inspect

    try:
        params = inspect.signature(step).parameters
    except (TypeError, ValueError):
        return False
    return "rows" in params and "cfl_out" in params


_REQUIRED_SLOTS = ("qinit", "step", "physical_bc", "tag4refinement")


@dataclass
class SolverVtable:
    """The functions one solver provides to a :class:`~forestpy.simulation.Simulation`.

    Slots, grouped as in ForestClaw's patch vtable.  Required slots raise at setup when
    missing; optional slots (``None``) are skipped.  A table is initialised once by the
    simulation that owns it and is frozen from then on, so two simulations never share
    one.  The simulation fills it in layers: first the method (``step``,
    ``time_sync``), then the framework's default refinement criterion
    (:mod:`forestpy.indicators`), then the application and the user through the
    :class:`~forestpy.simulation.Simulation` options (``setaux``, ``b4step``, ``src2``,
    ``tag``, ``coarsen``, ``physical_bc``), each layer overriding the one before.

    Creating
        ``qinit(x, y) -> q`` (required): initial state at cell centres, shape
        ``(num_eqn,) + x.shape``.  ``setaux(x, y, dx, dy) -> aux`` (optional), shape
        ``(num_aux,) + x.shape``, ghost cells included.
    Single-step update
        ``step(q, aux, geom, dt, out=None, edge_out=None) -> (q_new, cfl, edge_fluxes)``
        (required; ``out``/``edge_out``: arrays to write the new interiors and the edge
        fluxes into, which the distributed step passes; optionally ``rows`` and
        ``cfl_out``, a patch list: :func:`step_takes_patch_list`, which subcycling and
        the overlapped GPU step need);
        ``b4step(sim, dt)`` (optional, before each step);
        ``src2(q, aux, x, y, t, dt)`` (optional split source, updates ``q`` in place).
    Time sync
        ``time_sync(plan, q_old, q_new, aux, edge_fluxes, dt)`` (optional; without it
        the coarse-fine conservation fix is skipped): corrects ``q_new`` in place at the
        coarse-fine faces of the :class:`~forestpy.patches.time_sync.TimeSyncPlan`.
    Boundaries
        ``physical_bc(q, aux, t, sides)`` (required; the framework fills it from the
        ``bc`` option, :mod:`forestpy.patches.boundary`, unless the application or the
        user passes one): the ghost cells outside the domain of the patches ``sides``
        (four index arrays, one per side), after the ghost plan has filled the rest.
    Regrid (tagging: both slots come from one criterion, :mod:`forestpy.indicators`)
        ``tag4refinement(q, aux, geom, t) -> bool[npatch]`` (required);
        ``tag4coarsening(q, aux, geom, t) -> bool[npatch]`` (optional: never coarsen);
        ``tag4regrid(q, aux, patches, t) -> uint8[npatch]`` (optional): both flags in one
        pass on the backend, a regrid criterion of :mod:`forestpy.patches.tagging`; the
        regrids use it instead of the two slots above.
    Output
        ``derived_fields(q, aux) -> dict[name, array]`` (optional).
    """

    qinit: Callable | None = None
    setaux: Callable | None = None
    step: Callable | None = None
    b4step: Callable | None = None
    src2: Callable | None = None
    time_sync: Callable | None = None
    physical_bc: Callable | None = None
    tag4refinement: Callable | None = None
    tag4coarsening: Callable | None = None
    tag4regrid: Callable | None = None
    derived_fields: Callable | None = None
    _initialized: bool = field(default=False, repr=False)

    def __setattr__(self, name, value):
        if getattr(self, "_initialized", False):
            raise AttributeError(
                f"solver vtable is initialised and frozen; cannot set slot {name!r}"
            )
        object.__setattr__(self, name, value)

    def initialize(self) -> SolverVtable:
        """Check the required slots and freeze the table (only once)."""
        if self._initialized:
            raise RuntimeError("this solver vtable is already initialised (one per simulation)")
        missing = [s for s in _REQUIRED_SLOTS if getattr(self, s) is None]
        if missing:
            raise ValueError(f"solver vtable is missing required slot(s): {missing}")
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name != "_initialized" and value is not None and not callable(value):
                raise TypeError(f"solver vtable slot {name!r} must be callable")
        object.__setattr__(self, "_initialized", True)
        return self
