"""One call that wires a GeoClaw-like run: solver, topography, sources, tagging, BCs.

:func:`geoclaw_simulation` returns a ready :class:`~forestpy.simulation.Simulation` of
the ``geoclaw`` Riemann solver (:mod:`.riemann`) with

* ``aux[0]`` the bottom elevation from a topography ``setaux`` (e.g. the cell averages
  of :mod:`.topography`), and ``aux[1]`` the Manning coefficient when it varies in
  space (per-region values or a raster function);
* the initial depth ``h = max(0, eta0 - b)`` computed from the *same* cell-averaged
  bottom the solver uses (so a lake at rest is at rest to round-off), with ``eta0`` the
  sea level or a function ``eta_init(x, y)``;
* the ``src2`` hook :class:`.sources.GeoClawSources` (friction, discharge sources,
  Coriolis, dry cells, speed limit), bound to the simulation;
* the refinement flags of :class:`.refinement.GeoClawRefinement` (``tag`` and the
  coarsening flags);
* the boundary conditions given per side (``"wall"``, ``"extrap"``, or a forcing
  callable such as :class:`.forcing.IncidentWave`).

Examples
--------
>>> import numpy as np
>>> from forestpy import Domain
>>> from forestpy.extensions.geoclaw.model import geoclaw_simulation
>>> def bowl(x, y, dx, dy):                       # cell centre values are fine here
...     return 0.5 * (x**2 + y**2) - 0.3
>>> sim = geoclaw_simulation(bowl, domain=Domain((-1, -1), (1, 1)), mx=8,
...                          min_level=2, t_final=0.05)
>>> sim = sim.run()
>>> float(abs(sim.q[:, 1:]).max())              # at rest, wet and dry
0.0
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from forestpy.callbacks import SHALLOW_WATER_SI
from forestpy.options import Option
from forestpy.simulation import Domain, Simulation

from .hydrostatic import geoclaw_hr
from .refinement import GeoClawRefinement, Region
from .riemann import geoclaw
from .sources import Coriolis, DischargeSource, GeoClawSources

__all__ = [
    "WET_DRY_SOLVERS",
    "geoclaw_simulation",
    "manning_field",
    "points_in_polygon",
    "riemann_solver_option",
]

#: The wet/dry Riemann solvers ``geoclaw_simulation`` can use, by name.
WET_DRY_SOLVERS = {"geoclaw": geoclaw, "geoclaw_hr": geoclaw_hr}


def riemann_solver_option() -> Option:
    """The demos' ``riemann_solver`` option (a name of :data:`WET_DRY_SOLVERS`)."""
    return Option("geoclaw", "wet/dry Riemann solver: geoclaw (George's augmented "
                  "solver) or geoclaw_hr (hydrostatic reconstruction + HLLE, first order "
                  "over sloping bottoms; for comparison)", choices=tuple(WET_DRY_SOLVERS))


def points_in_polygon(x, y, polygon) -> np.ndarray:
    """Boolean mask: which points ``(x, y)`` lie inside ``polygon`` ((k, 2) vertices),
    by the even-odd crossing rule (vectorised over the points, a loop over edges)."""
    poly = np.asarray(polygon, dtype=np.float64)
    if poly.ndim != 2 or poly.shape[1] != 2 or len(poly) < 3:
        raise ValueError(f"a polygon needs (k >= 3, 2) vertices, got shape {poly.shape}")
    inside = np.zeros(np.shape(x), dtype=bool)
    xj, yj = poly[-1]
    for xi, yi in poly:
        crosses = (yi > y) != (yj > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            xc = (xj - xi) * (y - yi) / (yj - yi) + xi
        inside ^= crosses & (x < xc)
        xj, yj = xi, yi
    return inside


def manning_field(manning, x, y) -> np.ndarray:
    """Manning ``n`` at the points ``(x, y)`` from a specification:

    * a number: constant;
    * a callable ``n(x, y)`` (e.g. a raster sampled at the points);
    * ``(default, [(shape, n), ...])``: ``default`` everywhere, then each ``(shape, n)``
      in order overrides where ``shape`` contains the point; a shape is a rectangle
      ``(x1, x2, y1, y2)`` or a polygon given as a (k, 2) array of vertices.
    """
    if callable(manning):
        n = np.asarray(manning(x, y), dtype=np.float64) + 0.0 * x
    elif isinstance(manning, tuple) and len(manning) == 2 and not np.isscalar(manning[1]):
        default, parts = manning
        n = np.full(np.shape(x), float(default))
        for shape, value in parts:
            arr = np.asarray(shape, dtype=np.float64)
            if arr.shape == (4,):
                x1, x2, y1, y2 = arr
                if not (x1 < x2 and y1 < y2):
                    raise ValueError(f"Manning rectangle needs x1 < x2, y1 < y2: {shape}")
                m = (x >= x1) & (x <= x2) & (y >= y1) & (y <= y2)
            else:
                m = points_in_polygon(x, y, arr)
            n[m] = float(value)
    else:
        n = np.full(np.shape(x), float(manning))
    if not np.all(np.isfinite(n)) or np.any(n < 0):
        raise ValueError("Manning coefficients must be finite and >= 0")
    return n


def geoclaw_simulation(
    setaux: Callable,
    *,
    domain: Domain,
    sea_level: float = 0.0,
    eta_init: Callable | None = None,
    qinit: Callable | None = None,
    grav: float = 9.81,
    dry_tolerance: float = 1e-3,
    manning=0.0,
    friction_depth: float = math.inf,
    sources: Sequence[DischargeSource] = (),
    coriolis: Coriolis | None = None,
    speed_limit: float = 50.0,
    wave_tolerance: float | None = 0.1,
    speed_tolerance=None,
    depth_tolerance: float | None = None,
    topo_tolerance: float | None = None,
    shoreline: bool = False,
    regions: Sequence[Region] = (),
    bc="wall",
    shore_regrid: str = "conserve",
    riemann_solver: str = "geoclaw",
    **sim_options,
) -> Simulation:
    """A :class:`~forestpy.simulation.Simulation` of the ``geoclaw`` solver.

    Parameters
    ----------
    setaux : callable
        ``setaux(x, y, dx, dy) -> b``: bottom elevation per cell (shape of ``x``, or
        ``(1,) + x.shape``), ghost cells included; called again after every regrid.
    domain : Domain
    sea_level : float
        Still-water level (initial surface where ``eta_init`` is not given).
    eta_init : callable, optional
        ``eta_init(x, y)``: initial surface elevation; the depth is
        ``max(0, eta - b)``, velocities zero.
    qinit : callable, optional
        ``qinit(x, y, b) -> q`` of shape ``(3,) + x.shape``, replacing the above.
    grav, dry_tolerance : float
        Riemann-solver parameters.
    manning : float, callable or (default, [(shape, n), ...])
        Manning coefficient, see :func:`manning_field`; a non-constant one is stored
        in ``aux[1]``.
    friction_depth, sources, coriolis :
        See :class:`.sources.GeoClawSources`.
    speed_limit : float
        Largest speed kept (m/s), GeoClaw's default 50; ``inf`` disables.  The augmented
        solver gives thin layers that a bore throws onto a steep slope speeds of tens to
        hundreds of m/s (a 40 m hump in the 80 m bowl: 561 steps instead of 317 in
        10 s without the limit); shallow water does not describe them anyway.
    wave_tolerance, speed_tolerance, depth_tolerance, topo_tolerance, shoreline, regions :
        See :class:`.refinement.GeoClawRefinement`.
    bc : str, sequence or dict
        Boundary conditions per side; callables (e.g. :class:`.forcing.IncidentWave`)
        allowed.
    shore_regrid : ``"conserve"`` or ``"rest"``
        What a regrid keeps in families of cells that are partly dry: the volume exactly
        (default) or the rest state, as GeoClaw does (volume then changes at shores);
        see docs/geoclaw_solver.md, "AMR".
    riemann_solver : ``"geoclaw"`` or ``"geoclaw_hr"``
        George's augmented solver (default, GeoClaw's) or the hydrostatic
        reconstruction with HLLE that forestpy used before (first order over sloping
        bottoms; kept for comparison).
    **sim_options :
        Any other :class:`~forestpy.simulation.Simulation` option (``mx``,
        ``min_level``, ``max_level``, ``t_final``, ``b4step``, ``callbacks``,
        ``backend``...).  ``params``, ``setaux``, ``src2``, ``tag`` and ``coarsen`` are set here.

    Returns
    -------
    Simulation
        With attributes ``geoclaw_sources`` and ``geoclaw_refinement`` (the hook
        objects, e.g. for ``geoclaw_sources.volume_added``).
    """
    taken = {"params", "setaux", "src2", "tag", "coarsen"} & set(sim_options)
    if taken:
        raise TypeError(f"geoclaw_simulation sets {sorted(taken)} itself; use its arguments")
    if qinit is not None and eta_init is not None:
        raise TypeError("give qinit or eta_init, not both")
    variable_n = not isinstance(manning, (int, float))
    naux = 2 if variable_n else 1
    if riemann_solver not in WET_DRY_SOLVERS:
        raise ValueError(f"unknown riemann_solver {riemann_solver!r}; use one of "
                         f"{sorted(WET_DRY_SOLVERS)}")
    riemann = WET_DRY_SOLVERS[riemann_solver]
    if naux != 1:
        riemann = dataclasses.replace(riemann, num_aux=naux)
    if shore_regrid != riemann.surface_regrid:  # validated by the record
        riemann = dataclasses.replace(riemann, surface_regrid=shore_regrid)
    last = {}

    def full_setaux(x, y, dx, dy):
        b = np.asarray(setaux(x, y, dx, dy), dtype=np.float64)
        if b.shape == (1,) + np.shape(x):
            b = b[0]
        if b.shape != np.shape(x):
            raise ValueError(f"topography setaux returned shape {b.shape}, expected "
                             f"{np.shape(x)} or {(1,) + np.shape(x)}")
        if not np.all(np.isfinite(b)):
            raise ValueError("topography setaux returned NaN or Inf bottom elevations")
        last["x"], last["b"] = x, b
        if naux == 1:
            return b[None]
        return np.stack([b, manning_field(manning, x, y)])

    def bottom_at(x, y):
        if last.get("x") is x:  # the Simulation calls setaux, then qinit, on one grid
            return last["b"]
        dx = np.broadcast_to(np.diff(x, axis=-1)[..., :1], np.shape(x))
        dy = np.broadcast_to(np.diff(y, axis=-2)[..., :1, :], np.shape(y))
        return full_setaux(x, y, dx, dy)[0]

    def full_qinit(x, y):
        b = bottom_at(x, y)
        if qinit is not None:
            return qinit(x, y, b)
        eta = sea_level + 0.0 * x if eta_init is None else np.asarray(eta_init(x, y)) + 0.0 * x
        h = np.maximum(0.0, eta - b)
        return np.stack([h, np.zeros_like(h), np.zeros_like(h)])

    hook = GeoClawSources(
        grav=grav,
        dry_tolerance=dry_tolerance,
        manning=None if variable_n else float(manning),
        manning_aux=1 if variable_n else None,
        friction_depth=friction_depth,
        sources=sources,
        coriolis=coriolis,
        speed_limit=speed_limit,
    )
    flags = GeoClawRefinement(
        sea_level=sea_level,
        dry_tolerance=dry_tolerance,
        wave_tolerance=wave_tolerance,
        speed_tolerance=speed_tolerance,
        depth_tolerance=depth_tolerance,
        topo_tolerance=topo_tolerance,
        shoreline=shoreline,
        regions=regions,
    )
    sim = Simulation(
        riemann,
        qinit=full_qinit,
        domain=domain,
        setaux=full_setaux,
        src2=hook,
        tag=flags.tag,
        coarsen=flags.coarsen,
        regrid_flags=flags,
        bc=bc,
        params={"grav": grav, "dry_tolerance": dry_tolerance, "sea_level": sea_level},
        **sim_options,
    )
    hook.bind(sim)
    sim.geoclaw_sources = hook
    sim.geoclaw_refinement = flags
    sim.units = dict(SHALLOW_WATER_SI)  # metres, seconds: frames and plots say so
    return sim
