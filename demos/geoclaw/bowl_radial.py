r"""Radial runup in a parabolic bowl: GeoClaw's classic first example, with an exact check.

The bowl is the paraboloid :math:`b(r) = h_0 (r^2/a^2 - 1)` with :math:`h_0 = 80` m and
:math:`a^2 = 8000` m\ :sup:`2` (that is :math:`b = 0.01 r^2 - 80`, the shore of the
still lake at :math:`r = a \approx 89.4` m), on the square :math:`[-100, 100]^2` m with
walls, :math:`g = 9.81`.  The bottom in every cell is the exact cell average of the
paraboloid, :math:`0.01 (x^2 + y^2 + (\Delta x^2 + \Delta y^2)/12) - 80`, at every level.

Two initial conditions (option ``case``):

``hump`` (default, after GeoClaw's ``bowl-radial``)
    a Gaussian hump of the surface, :math:`\eta_0 = A \exp(-r^2 / (2 \sigma^2))` with
    :math:`A = 40` m, :math:`\sigma = 10` m, at rest.  It spreads as a ring, runs up the
    shore, falls back and refocuses.  AMR follows the wave (surface departing from sea
    level by more than ``wave_tolerance``) and the shoreline (patches with wet and dry
    cells).  The problem is radially symmetric: the report gives the spread of the
    depth over rings of one finest cell width, the largest mirror asymmetry of the
    solution (under :math:`x \to -x`, :math:`y \to -y` and :math:`x \leftrightarrow y`)
    and the relative change of the water volume (walls, no sources: round-off).

``thacker``
    Thacker's (1981) exact periodic solution in the same paraboloid: a curved surface
    that sloshes radially with period :math:`T = 2\pi/\omega`,
    :math:`\omega = \sqrt{8 g h_0}/a` (7.09 s here),

    .. math::

        \eta(r, t) = h_0 \left[\frac{\sqrt{1 - A^2}}{1 - A\cos\omega t} - 1
            - \frac{r^2}{a^2}\left(\frac{1 - A^2}{(1 - A\cos\omega t)^2} - 1\right)\right],
        \qquad u_r = \frac{\omega A \sin\omega t}{2 (1 - A\cos\omega t)}\, r,

    :math:`h = \max(0, \eta - b)`, with the shoreline at
    :math:`r_s(t) = a \sqrt{(1 - A\cos\omega t)/\sqrt{1 - A^2}}` (85.1 m to 94.0 m for
    the default :math:`A = 0.1`).  AMR follows the shoreline.  The report gives the
    :math:`L^1` error of the depth against the exact cell averages, the shoreline
    radius (from the wet area, :math:`\sqrt{A_{wet}/\pi}`) against :math:`r_s(t)`, and
    the volume change.

References: W. C. Thacker, Some exact solutions to the nonlinear shallow-water wave
equations, *J. Fluid Mech.* 107 (1981) 499-508; O. Delestre et al., SWASHES: a
compilation of shallow water analytic solutions, *Int. J. Numer. Meth. Fluids* 72
(2013) 269-300 (section 4.2.2); M. J. Berger, D. L. George, R. J. LeVeque and K. T.
Mandli, The GeoClaw software for depth-averaged flows with adaptive refinement, *Adv.
Water Resour.* 34 (2011) 1195-1206.

    forestpy run demos/geoclaw/bowl_radial.py --out out/bowl
    forestpy run demos/geoclaw/bowl_radial.py --set case=thacker --set max_level=5 --out out/thk
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from forestpy.extensions.geoclaw.model import geoclaw_simulation, riemann_solver_option

from forestpy import Domain, Simulation
from forestpy.options import Option, merge_options, simulation_options, standard_options

GRAV = 9.81
H0 = 80.0  # depth of the bowl at its centre (m)
A2 = 8000.0  # a^2: the still shore radius squared (m^2)
HALF_WIDTH = 100.0  # the domain is [-100, 100]^2 (m)

_standard = standard_options(mx=8, min_level=2, max_level=4, regrid_interval=2, cfl=0.9)
_standard.pop("refine_threshold")  # the GeoClaw flags below replace it
_standard["t_final"] = Option(None, "end time (s); default: 12 s (hump), one period "
                              "T = 7.09 s (thacker)", type=float, min=0.0, none_ok=True)

OPTIONS = dict(
    **_standard,
    case=Option("hump", "initial condition", choices=("hump", "thacker")),
    amplitude=Option(40.0, "hump: height of the Gaussian hump of the surface (m)", min=0.0),
    sigma=Option(10.0, "hump: its width (m)", min=0.0, min_inclusive=False),
    thacker_a=Option(0.1, "thacker: amplitude parameter A (0 < A < 0.12 keeps the shore "
                     "inside the domain)", min=0.0, max=0.12, min_inclusive=False),
    wave_tolerance=Option(1.0, "hump: refine where |eta - sea level| exceeds this (m)",
                          min=0.0, min_inclusive=False),
    dry_tolerance=Option(1e-3, "depth (m) below which a cell is dry", min=0.0),
    riemann_solver=riemann_solver_option(),
)


# --------------------------------------------------------------------------- geometry
def bowl_bottom(x, y, dx, dy):
    """Exact cell averages of the paraboloid ``0.01 (x^2 + y^2) - 80`` over cells
    ``dx x dy`` centred at ``(x, y)``."""
    return H0 / A2 * (x**2 + y**2 + (dx**2 + dy**2) / 12.0) - H0


def hump_surface(amplitude, sigma):
    def eta(x, y):
        return amplitude * np.exp(-(x**2 + y**2) / (2.0 * sigma**2))

    return eta


# --------------------------------------------------------------------------- Thacker
class Thacker:
    """Thacker's periodic radial solution in the paraboloid ``b = h0 (r^2/a^2 - 1)``."""

    def __init__(self, A: float = 0.1, h0: float = H0, a2: float = A2, grav: float = GRAV):
        if not 0.0 < A < 1.0:
            raise ValueError(f"Thacker amplitude A must be in (0, 1), got {A}")
        self.A, self.h0, self.a2, self.grav = float(A), float(h0), float(a2), float(grav)
        self.omega = math.sqrt(8.0 * grav * h0 / a2)
        self.period = 2.0 * math.pi / self.omega

    def _c(self, t):
        return 1.0 - self.A * math.cos(self.omega * t)

    def surface(self, x, y, t):
        c, A = self._c(t), self.A
        r2 = np.asarray(x) ** 2 + np.asarray(y) ** 2
        curvature = (1 - A * A) / c**2 - 1.0
        return self.h0 * (math.sqrt(1 - A * A) / c - 1.0 - r2 / self.a2 * curvature)

    def bottom(self, x, y):
        return self.h0 * ((np.asarray(x) ** 2 + np.asarray(y) ** 2) / self.a2 - 1.0)

    def depth(self, x, y, t):
        return np.maximum(0.0, self.surface(x, y, t) - self.bottom(x, y))

    def velocity(self, x, y, t):
        """``(u, v)``: the radial velocity ``k(t) r`` in Cartesian components (also on
        dry ground, where it means nothing)."""
        k = self.omega * self.A * math.sin(self.omega * t) / (2.0 * self._c(t))
        return k * np.asarray(x), k * np.asarray(y)

    def shoreline(self, t) -> float:
        return math.sqrt(self.a2 * self._c(t) / math.sqrt(1.0 - self.A**2))

    def cell_average_depth(self, x, y, dx, dy, t, n: int = 4):
        """Depth averaged over cells by the n x n midpoint rule (the kink at the
        shoreline makes a higher-order rule pointless)."""
        x, y, dx, dy = np.broadcast_arrays(*(np.asarray(a, float) for a in (x, y, dx, dy)))
        total = np.zeros(x.shape)
        offs = (np.arange(n) + 0.5) / n - 0.5
        for ox in offs:
            for oy in offs:
                total += self.depth(x + ox * dx, y + oy * dy, t)
        return total / (n * n)


# --------------------------------------------------------------------------- setup
def _options(overrides):
    o = merge_options(OPTIONS, overrides, "bowl_radial")
    if o["max_level"] < o["min_level"]:
        raise ValueError(f"max_level ({o['max_level']}) < min_level ({o['min_level']})")
    if o["t_final"] is None:
        o["t_final"] = 12.0 if o["case"] == "hump" else Thacker(o["thacker_a"]).period
    return o


def setup(**overrides) -> Simulation:
    o = _options(overrides)
    if o["case"] == "hump":
        eta_init = hump_surface(o["amplitude"], o["sigma"])
        flags = dict(wave_tolerance=o["wave_tolerance"], shoreline=True)
    else:
        exact = Thacker(o["thacker_a"])
        eta_init = lambda x, y: exact.surface(x, y, 0.0)  # noqa: E731  (at rest at t = 0)
        flags = dict(wave_tolerance=None, shoreline=True)
    sim = geoclaw_simulation(
        bowl_bottom,
        domain=Domain((-HALF_WIDTH, -HALF_WIDTH), (HALF_WIDTH, HALF_WIDTH)),
        eta_init=eta_init,
        grav=GRAV,
        dry_tolerance=o["dry_tolerance"],
        bc="wall",
        **simulation_options(o),
        name="bowl_radial",
        **flags,
        riemann_solver=o["riemann_solver"],
    )
    sim.demo_options = o
    return sim


# --------------------------------------------------------------------------- analysis
def leaves(sim):
    """Host arrays of the leaf cells: ``x, y, dx, dy`` (per cell) and ``h``."""
    b = sim.mbc
    x, y = sim.geom.cell_centers(ghosts=False)
    dx = np.broadcast_to(sim.geom.dx[:, None, None], x.shape)
    dy = np.broadcast_to(sim.geom.dy[:, None, None], x.shape)
    h = sim.backend.to_host(sim.q[:, 0, b:-b, b:-b]).astype(np.float64)
    return x, y, dx, dy, h


def finest_grid(sim):
    """Cell centres of the uniform grid at the finest level, with ``h`` and the bottom
    ``b`` of the finest leaf cell holding each centre (so ``h + b`` is the surface of
    that cell, whatever its level)."""
    n = sim.mx * 2 ** sim.max_level * sim.domain.ntrees[0]
    c = -HALF_WIDTH + (np.arange(n) + 0.5) * (2 * HALF_WIDTH / n)
    X, Y = np.meshgrid(c, c)
    q, aux = sim.sample(X.ravel(), Y.ravel(), aux=True)
    return X, Y, q[:, 0].reshape(X.shape), aux[:, 0].reshape(X.shape)


def symmetry(sim, wet_depth: float = 1e-2) -> dict:
    """Radial symmetry on the finest uniform grid: the largest and mean spread
    (max - min) of the surface ``h + b`` over the rings one finest cell wide whose cells
    are all wet (deeper than ``wet_depth``; the shoreline ring mixes wet and dry, and
    the depth itself varies over a ring with the bottom slope); and the largest
    difference of the depth under the mirror maps x -> -x, y -> -y and x <-> y, which
    the scheme and the grid respect exactly (round-off only)."""
    X, Y, h, b = finest_grid(sim)
    dxf = X[0, 1] - X[0, 0]
    eta = (h + b).ravel()
    wet = (h > wet_depth).ravel()
    ring = np.floor(np.hypot(X, Y) / dxf).astype(np.int64).ravel()
    nr = ring.max() + 1
    hi = np.full(nr, -np.inf)
    lo = np.full(nr, np.inf)
    np.maximum.at(hi, ring, eta)
    np.minimum.at(lo, ring, eta)
    all_wet = np.bincount(ring, wet, nr) == np.bincount(ring, None, nr)
    spread = (hi - lo)[all_wet & (np.bincount(ring, None, nr) > 0)]
    mirror = max(np.abs(h - h[:, ::-1]).max(), np.abs(h - h[::-1, :]).max(),
                 np.abs(h - h.T).max())
    return {"ring_spread_max": float(spread.max()), "ring_spread_mean": float(spread.mean()),
            "wet_rings": int(len(spread)), "mirror_asymmetry": float(mirror),
            "finest_dx": float(dxf)}


def thacker_errors(sim, exact: Thacker, shore_depths=(1e-2, 0.5)) -> dict:
    """L1 depth error against the exact cell averages, and the shoreline radius from the
    wet area (cells deeper than each of ``shore_depths``) against the exact one: the
    error in metres and in finest cells.  Thin films left on the slope by the receding
    water show up as the difference between the two thresholds."""
    x, y, dx, dy, h = leaves(sim)
    href = exact.cell_average_depth(x, y, dx, dy, sim.t)
    area = dx * dy
    l1 = float(np.sum(np.abs(h - href) * area))
    volume = float(np.sum(href * area))
    rs = exact.shoreline(sim.t)
    dxf = float(sim.geom.dx.min())
    rec = {"t": sim.t, "l1_depth_error": l1, "l1_depth_error_relative": l1 / volume,
           "shoreline_radius_exact": rs, "finest_dx": dxf}
    for d in shore_depths:
        r = math.sqrt(float(np.sum(area[h > d])) / math.pi)
        rec[f"shoreline_radius_{d:g}m"] = r
        rec[f"shoreline_error_{d:g}m"] = r - rs
        rec[f"shoreline_error_{d:g}m_cells"] = (r - rs) / dxf
    return rec


def mass(sim) -> dict:
    m0, m1 = sim.totals_initial["h"], sim.totals()["h"]
    return {"volume_initial": m0, "volume_final": m1, "volume_change_relative": (m1 - m0) / m0}


# --------------------------------------------------------------------------- pictures
def picture(sim, out, exact: Thacker | None = None) -> Path:
    """``bowl_radial.png`` (pyvista offscreen).  Left: the surface ``h + b`` on the
    finest grid over its whole range (dry cells left white).  Right: the surface along
    y = 0 (blue: this run, red: exact when given, black: the bottom)."""
    from forestpy.io.plot import (
        _pyvista,
        add_line,
        decorate,
        grid_map,
        line_chart,
        save_side_by_side,
    )

    pv = _pyvista()
    X, Y, h, b = finest_grid(sim)
    wet = h > sim.options["params"]["dry_tolerance"]
    eta2d = np.where(wet, h + b, np.nan)
    p = pv.Plotter(off_screen=True, window_size=[800, 760])
    p.set_background("white")
    grid_map(p, X, Y, eta2d, name="surface h + b", unit="m")
    decorate(p, title=f"surface elevation, t = {sim.t:.4g} s (white: dry)", xlabel="x (m)",
             ylabel="y (m)", bounds=(-HALF_WIDTH, HALF_WIDTH, -HALF_WIDTH, HALF_WIDTH, 0, 0))
    p.view_xy()
    right = pv.Plotter(off_screen=True, window_size=[800, 760])
    chart = line_chart(title=f"along y = 0, t = {sim.t:.4g} s", xlabel="x (m)",
                       ylabel="elevation (m)")
    j = h.shape[0] // 2
    xb = np.linspace(-HALF_WIDTH, HALF_WIDTH, 2001)
    add_line(chart, xb, H0 / A2 * xb**2 - H0, color="black", label="bottom")
    if exact is not None:
        wet_ref = exact.depth(xb, 0 * xb, sim.t) > 0
        add_line(chart, xb, np.where(wet_ref, exact.surface(xb, 0 * xb, sim.t), np.nan),
                 color="red", label="exact (Thacker)")
    eta = np.where(h[j] > 1e-3, h[j] + b[j], np.nan)
    add_line(chart, X[j], eta, color="tab:blue", label="forestpy")
    lo, hi = float(np.nanmin(eta2d)), float(np.nanmax(eta2d))  # the water, not the bowl
    pad = 0.25 * (hi - lo) + 1.0
    chart.x_range = [-HALF_WIDTH, HALF_WIDTH]
    chart.y_range = [lo - pad, hi + pad]
    right.add_chart(chart)
    return save_side_by_side(Path(out) / "bowl_radial.png", [p, right])


# --------------------------------------------------------------------------- report
def report(sim, out) -> dict:
    """Validation numbers of the finished run (and ``bowl_radial.png`` in ``out``)."""
    o = getattr(sim, "demo_options", None) or _options({})
    rec = {"case": o["case"], "t": sim.t, "steps": sim.steps, "regrids": sim.regrids,
           "patches_per_level": {str(k): v for k, v in sim.patches_per_level().items()},
           **mass(sim)}
    exact = None
    if o["case"] == "thacker":
        exact = Thacker(o["thacker_a"])
        rec.update(thacker_errors(sim, exact))
    else:
        rec.update(symmetry(sim))
        rec["max_depth"] = float(leaves(sim)[4].max())
    try:
        rec["png"] = str(picture(sim, out, exact))
    except (ImportError, RuntimeError) as e:  # pyvista is in the plot extra
        rec["png"] = f"not written: {e}"
    return rec


def thacker_convergence(levels=((2, 2), (3, 3), (4, 4), (5, 5), (2, 4), (2, 5)),
                        times=(0.5, 1.0), **overrides) -> list[dict]:
    """Thacker runs for each ``(min_level, max_level)`` and each end time (in periods):
    one record per run (steps, cell updates, the :func:`thacker_errors` numbers, the
    volume change).  ``python demos/geoclaw/bowl_radial.py convergence`` prints them
    as JSON lines (the table of docs/geoclaw_demos.md)."""
    exact = Thacker(overrides.get("thacker_a", OPTIONS["thacker_a"].default))
    out = []
    for frac in times:
        for lo, hi in levels:
            sim = setup(case="thacker", min_level=lo, max_level=hi,
                        t_final=frac * exact.period, **overrides).run()
            out.append({"periods": frac, "levels": [lo, hi], "steps": sim.steps,
                        "cell_updates": int(sim.cell_updates), **thacker_errors(sim, exact),
                        "volume_change_relative": mass(sim)["volume_change_relative"]})
    return out


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:] == ["convergence"]:
        for rec in thacker_convergence():
            print(json.dumps(rec))
    else:
        sim = setup().run()
        print(sim.summary())
        print(report(sim, Path("out/bowl_radial")))  # forestpy run also writes report.json
