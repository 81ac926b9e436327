"""A ship entering a harbour over variable depth (linearised VBM, RRB-PCG per frame).

Geometry (metres, x east, y north; domain 1200 x 800):

* **sea bed**: depth ``14 - 6 x/800`` (14 m offshore to 8 m at the coast line
  ``x = 800``) minus a Gaussian shoal of 5 m height, radius 80 m, at (400, 180);
* **land** (reflecting walls, ``depth <= 0``): everything at ``x >= 800`` except the
  inner basin ``800 <= x <= 1100``, ``250 <= y <= 550`` (8 m deep);
* **breakwaters** (land, ``breakwater`` m thick): along ``y = 250`` and ``y = 550`` from
  ``x = 650`` to the coast, with heads at ``x = 650`` closing the outer harbour except
  for an entrance ``360 < y < 440``;
* **sponge** (absorbing) on the open west, south and north sides;
* **ship** (cos² pressure pulse ``ship_length x ship_beam``, peak ``p0`` / rho): from
  (150, 150) on a quadratic Bezier curve through the control point (350, 400) to
  (600, 400), then straight east through the entrance into the basin, at ``speed``
  until ``stop_distance`` before (950, 400), then decelerating uniformly to rest there.
  Its heading is the path's tangent.

Checkable output (``summary.json``, also returned by :func:`main`): the volume ledger
``sum(zeta) dx dy + (volume taken by the sponge)``, which the fluxes keep at zero to
round-off; the largest ``|zeta|`` on land (zero: walls); the wave height (max - min)
and the largest ``|zeta|`` at five gauges; CG iterations per frame.  Time series go to
``gauges.npz``, the final field to ``zeta.npz``.

    python demos/boussinesq/harbour.py            # writes out/harbour/
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import numpy as np
from forestpy.extensions.boussinesq import VBM, solver_options

from forestpy.options import Option, merge_options

OPTIONS = dict(
    dx=Option(5.0, "cell size (m)", min=0.5, max=50.0),
    speed=Option(4.0, "cruise speed of the ship (m/s)", min=0.0, min_inclusive=False),
    stop_distance=Option(150.0, "deceleration distance (m) before the berth", min=0.0),
    ship_length=Option(30.0, "length of the pressure pulse (m)", min=0.0, min_inclusive=False),
    ship_beam=Option(8.0, "beam of the pressure pulse (m)", min=0.0, min_inclusive=False),
    p0=Option(2.0, "peak pressure / rho (m^2/s^2; 2.0: 0.2 m of water head)", min=0.0),
    ramp=Option(15.0, "time (s) over which the pressure is switched on linearly", min=0.0),
    breakwater=Option(10.0, "breakwater thickness (m)", min=0.0),
    sponge=Option(100.0, "sponge width (m) on the west, south and north sides", min=0.0),
    t_final=Option(None, "end time (s); default: arrival at the berth + 40 s", type=float,
                   min=0.0, none_ok=True),
    **solver_options("out/harbour"),
)
LX, LY = 1200.0, 800.0
GAUGES = {
    "sea": (400.0, 650.0),
    "outer_south": (725.0, 300.0),
    "entrance": (700.0, 400.0),
    "basin_south": (1050.0, 300.0),
    "basin_north": (1050.0, 500.0),
}
BERTH = (950.0, 400.0)


def bathymetry(dx: float, breakwater: float = 10.0):
    """Depth on the ``dx`` grid (cell centres), land <= 0, and the centre coordinates."""
    nx, ny = int(round(LX / dx)), int(round(LY / dx))
    x = (np.arange(nx) + 0.5) * dx
    y = (np.arange(ny) + 0.5) * dx
    X, Y = np.meshgrid(x, y)
    h = 14.0 - 6.0 * np.clip(X / 800.0, 0.0, 1.0)
    h -= 5.0 * np.exp(-((X - 400.0) ** 2 + (Y - 180.0) ** 2) / 80.0**2)
    basin = (X >= 800.0) & (X <= 1100.0) & (Y >= 250.0) & (Y <= 550.0)
    land = (X >= 800.0) & ~basin
    h = np.where(basin, 8.0, h)
    half = max(0.5 * breakwater, 0.5 * dx)  # at least one cell thick
    along = (X >= 650.0 - half) & (X < 800.0)
    land |= along & ((np.abs(Y - 250.0) <= half) | (np.abs(Y - 550.0) <= half))
    head = np.abs(X - 650.0) <= half
    land |= head & (((Y >= 250.0) & (Y <= 360.0)) | ((Y >= 440.0) & (Y <= 550.0)))
    return np.where(land, 0.0, h), x, y


class ShipPath:
    """Arc-length parametrised path ``t -> (x, y, heading)`` (see the module text)."""

    def __init__(self, speed, stop_distance, n=4001):
        s = np.linspace(0.0, 1.0, n)[:, None]
        p0, p1, p2 = (np.array(p) for p in ((150.0, 150.0), (350.0, 400.0), (600.0, 400.0)))
        bez = (1 - s) ** 2 * p0 + 2 * s * (1 - s) * p1 + s * s * p2
        line = np.stack([np.linspace(600.0, BERTH[0], n), np.full(n, BERTH[1])], axis=1)
        pts = np.vstack([bez, line[1:]])
        seg = np.hypot(*np.diff(pts, axis=0).T)
        self.pts = pts
        self.s = np.concatenate([[0.0], np.cumsum(seg)])
        self.length = float(self.s[-1])
        if not 0.0 <= stop_distance <= self.length:
            raise ValueError(f"stop_distance must be in [0, {self.length:.0f}] m")
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed!r}")
        self.U = float(speed)
        self.s1 = self.length - stop_distance
        self.t1 = self.s1 / self.U
        self.t_decel = 2.0 * stop_distance / self.U
        self.t_arrival = self.t1 + self.t_decel

    def arc(self, t):
        """Distance sailed at time ``t``."""
        if t <= self.t1:
            return self.U * max(t, 0.0)
        tau = min(t - self.t1, self.t_decel)
        return self.s1 + self.U * tau - 0.5 * self.U * tau * tau / self.t_decel

    def __call__(self, t):
        sa = self.arc(t)
        k = int(np.clip(np.searchsorted(self.s, sa) - 1, 0, len(self.s) - 2))
        w = (sa - self.s[k]) / (self.s[k + 1] - self.s[k])
        x, y = (1 - w) * self.pts[k] + w * self.pts[k + 1]
        dxy = self.pts[k + 1] - self.pts[k]
        return float(x), float(y), math.atan2(dxy[1], dxy[0])


def setup(**overrides) -> VBM:
    o = merge_options(OPTIONS, overrides, "harbour")
    dx = float(o["dx"])
    if not 0 < dx <= 20.0:
        raise ValueError(f"dx must be in (0, 20] m (the harbour entrance is 80 m), got {dx}")
    depth, _, _ = bathymetry(dx, o["breakwater"])
    path = ShipPath(o["speed"], o["stop_distance"])
    sw = o["sponge"]
    model = VBM(
        depth,
        dx,
        path=path,
        ship={"length": o["ship_length"], "beam": o["ship_beam"], "p0": o["p0"], "ramp": o["ramp"]},
        sponge={"west": sw, "south": sw, "north": sw},
        cfl=o["cfl"],
        backend=o["backend"],
        rrb_level=o["rrb_level"],
        tol=o["tol"],
    )
    model.options = o
    model.t_final = path.t_arrival + 40.0 if o["t_final"] is None else float(o["t_final"])
    return model


def main(out=None, **overrides) -> dict:
    """Run the demo, write ``options_used.json``, ``summary.json``, ``gauges.npz``,
    ``zeta.npz`` into ``out`` and return the summary."""
    if out is not None:
        overrides["out"] = str(out)
    model = setup(**overrides)
    o = model.options
    outdir = pathlib.Path(o["out"])
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "options_used.json").write_text(json.dumps(o, indent=1))
    xp = model.xp
    gi = {k: (int(y // model.dy), int(x // model.dx)) for k, (x, y) in GAUGES.items()}
    for k, (j, i) in gi.items():
        if model.depth[j, i] <= 0:
            raise RuntimeError(f"gauge {k} is on land at dx={model.dx}")
    jj = xp.asarray([j for j, _ in gi.values()])
    ii = xp.asarray([i for _, i in gi.values()])
    series, times, ledger = [], [], []
    t0 = time.perf_counter()
    while model.t < model.t_final - 1e-9:
        model.step()
        series.append(model.zeta[jj, ii])
        ledger.append(model.zeta.sum() + model._removed)
        times.append(model.t)
    wall = time.perf_counter() - t0
    to_host = model.backend.to_host
    ser = to_host(xp.stack(series)) if series else np.zeros((0, len(gi)))
    led = to_host(xp.stack(ledger)) * model.dx * model.dy if ledger else np.zeros(0)
    zeta = model.field("zeta")
    volume, removed = model.mass()
    scale = float(np.abs(zeta).sum()) * model.dx * model.dy + abs(removed)
    land = model.depth <= 0
    xs, ys, hd = model.path(model.t)
    res = {
        "grid": [model.nx, model.ny],
        "dx": model.dx,
        "steps": model.steps,
        "dt": model.dt,
        "t_final": model.t,
        "ship_final": [xs, ys, math.degrees(hd)],
        "path_length_m": model.path.length,
        "arrival_s": model.path.t_arrival,
        "volume_m3": volume,
        "sponge_removed_m3": removed,
        "volume_ledger_max_abs_m3": float(np.abs(led).max()) if len(led) else 0.0,
        "volume_ledger_rel": float(np.abs(led).max() / scale) if len(led) and scale else 0.0,
        "land_max_abs_zeta": float(np.abs(zeta[land]).max()) if land.any() else 0.0,
        "gauge_wave_height_m": {k: float(np.ptp(ser[:, n])) for n, k in enumerate(gi)},
        "gauge_max_abs_m": {k: float(np.abs(ser[:, n]).max()) for n, k in enumerate(gi)},
        "cg_iterations_mean": float(np.mean(model.iterations)),
        "cg_iterations_max": int(np.max(model.iterations)),
        "wall_s": wall,
        "solve_s": model.timers["solve"],
        "explicit_s": model.timers["explicit"],
        "backend": model.backend.name,
    }
    (outdir / "summary.json").write_text(json.dumps(res, indent=1))
    np.savez_compressed(
        outdir / "gauges.npz",
        t=np.array(times),
        zeta=ser,
        names=np.array(list(gi)),
        xy=np.array(list(GAUGES.values())),
        iterations=np.array(model.iterations),
        volume_ledger=led,
    )
    np.savez_compressed(outdir / "zeta.npz", zeta=zeta, depth=model.depth, x=model.x, y=model.y)
    return res


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
