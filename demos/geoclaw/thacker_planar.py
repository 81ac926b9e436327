r"""Thacker's planar surface sloshing in a paraboloid: the wet/dry solver against an exact solution.

The bowl :math:`b = h_0 (r^2/a^2 - 1)` (``h0`` = 0.1 m deep, radius ``a`` = 1 m) on
:math:`[-2, 2]^2` with walls holds a disc of water whose plane surface tilts and whose
centre circles the axis at the distance ``eta`` (0.5 m: half the radius) with period
:math:`T = 2\pi a / \sqrt{2 g h_0}` (4.49 s); the shoreline sweeps the whole slope
(:mod:`forestpy.extensions.reference.thacker`, SWASHES 4.2.2).  The bottom of every cell
is the paraboloid's exact cell average; the initial depth is the exact surface at the
cell centre minus that bottom (the exact cell average wherever the cell is wet), the
momentum that depth times the exact velocity.

The report gives the relative :math:`L^1` error of the depth against the exact cell
averages, split into the *interior* (cells whose exact depth exceeds ``interior_depth``
times ``h0``) and the *shore band* (the rest), and the volume change.  Uniform grids by
default (``min_level = max_level``); with ``min_level < max_level`` the grid adapts to
the shoreline and to the moving water (``speed_tolerance``).

    forestpy run demos/geoclaw/thacker_planar.py --out out/thacker
    forestpy run demos/geoclaw/thacker_planar.py --set max_level=5 --set min_level=5
    forestpy run demos/geoclaw/thacker_planar.py --set riemann_solver=geoclaw_hr
"""

from __future__ import annotations

import numpy as np
from forestpy.extensions.geoclaw.model import geoclaw_simulation, riemann_solver_option
from forestpy.extensions.reference.thacker import ThackerPlanar

from forestpy import Domain, Simulation
from forestpy.options import Option, merge_options, simulation_options, standard_options

GRAV = 9.81
HALF_WIDTH = 2.0

_standard = standard_options(mx=8, min_level=4, max_level=4, regrid_interval=2, cfl=0.9)
_standard.pop("refine_threshold")
_standard["t_final"] = Option(None, "end time (s); default: half a period (2.24 s)",
                              type=float, min=0.0, none_ok=True)

OPTIONS = dict(
    **_standard,
    a=Option(1.0, "radius of the water disc (m)", min=0.1, max=1.5),
    h0=Option(0.1, "depth of the bowl at its centre (m)", min=0.0, min_inclusive=False),
    eta=Option(0.5, "distance of the disc's centre from the axis (m); < 2 - a", min=0.0),
    dry_tolerance=Option(1e-5, "depth (m) at or below which a cell is dry", min=0.0),
    riemann_solver=riemann_solver_option(),
    interior_depth=Option(0.05, "the interior of the error split: exact depth above this "
                          "fraction of h0", min=0.0, max=1.0),
)


def _options(overrides):
    o = merge_options(OPTIONS, overrides, "thacker_planar")
    if o["max_level"] < o["min_level"]:
        raise ValueError(f"max_level ({o['max_level']}) < min_level ({o['min_level']})")
    if o["eta"] + o["a"] >= HALF_WIDTH:
        raise ValueError(f"eta + a = {o['eta'] + o['a']} m: the water would reach the "
                         f"walls at +-{HALF_WIDTH} m; keep eta + a < {HALF_WIDTH}")
    exact = ThackerPlanar(o["a"], o["h0"], o["eta"], GRAV)
    if o["t_final"] is None:
        o["t_final"] = 0.5 * exact.period
    return o, exact


def setup(**overrides) -> Simulation:
    o, exact = _options(overrides)

    def qinit(x, y, b):
        h = np.maximum(0.0, exact.surface(x, y, 0.0) - b)
        u, v = exact.velocity(0.0)
        return np.stack([h, h * u, h * v])

    sim = geoclaw_simulation(
        exact.cell_average_bottom,
        domain=Domain((-HALF_WIDTH, -HALF_WIDTH), (HALF_WIDTH, HALF_WIDTH)),
        qinit=qinit,
        grav=GRAV,
        dry_tolerance=o["dry_tolerance"],
        wave_tolerance=None,
        speed_tolerance=0.5 * o["eta"] * exact.omega,
        shoreline=True,
        bc="wall",
        riemann_solver=o["riemann_solver"],
        **simulation_options(o),
        name="thacker_planar",
    )
    sim.demo_options = o
    sim.exact = exact
    return sim


def errors(sim, exact: ThackerPlanar, interior_depth: float = 0.05) -> dict:
    """Relative L1 depth errors (normalised by the exact volume): whole domain,
    interior (exact depth above ``interior_depth * h0``) and shore band."""
    b = sim.mbc
    x, y = sim.geom.cell_centers(ghosts=False)
    dx = np.broadcast_to(sim.geom.dx[:, None, None], x.shape)
    dy = np.broadcast_to(sim.geom.dy[:, None, None], x.shape)
    h = sim.backend.to_host(sim.q[:, 0, b:-b, b:-b]).astype(np.float64)
    href = exact.cell_average_depth(x, y, dx, dy, sim.t)
    area = dx * dy
    volume = float(np.sum(href * area))
    err = np.abs(h - href) * area
    interior = href > interior_depth * exact.h0
    return {"t": sim.t, "finest_dx": float(sim.geom.dx.min()),
            "l1_depth_error_relative": float(err.sum()) / volume,
            "l1_interior_relative": float(err[interior].sum()) / volume,
            "l1_shore_band_relative": float(err[~interior].sum()) / volume,
            "max_depth_error_interior": float(np.abs(h - href)[interior].max())}


def report(sim, out) -> dict:
    o = getattr(sim, "demo_options", None) or _options({})[0]
    exact = getattr(sim, "exact", None) or _options({})[1]
    m0, m1 = sim.totals_initial["h"], sim.totals()["h"]
    return {"riemann_solver": o["riemann_solver"], "steps": sim.steps,
            "regrids": sim.regrids, "cell_updates": int(sim.cell_updates),
            "patches_per_level": {str(k): v for k, v in sim.patches_per_level().items()},
            "volume_change_relative": (m1 - m0) / m0,
            **errors(sim, exact, o["interior_depth"])}


if __name__ == "__main__":
    import json
    from pathlib import Path

    sim = setup().run()
    print(json.dumps(report(sim, Path("out/thacker_planar"))))
