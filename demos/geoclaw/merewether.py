"""Merewether urban flash flood (Newcastle, NSW, 8 June 2007), validated on peak stages.

The Water Research Laboratory (UNSW) benchmark of Australian Rainfall and Runoff
Project 15, set up as ANUGA's validation suite runs it:

* the 1 m DEM ``topography1.asc`` (MGA zone 56) with its 60 building footprints raised
  by ``house_height`` = 3 m (ANUGA's value).  The modelled peak depths stay below
  1.1 m, so the buildings act as solid obstacles and any height above ~1.5 m gives
  the same flow;
* Manning ``n`` 0.02 inside the road polygon and 0.04 elsewhere: a raster on the DEM
  cells (a cell takes the value of the DEM cell holding its centre), in ``aux[1]``;
* 19.7 m^3/s injected uniformly over the leaf cells whose centres lie in the disc of
  radius 10 m at (382265.0, 6354280.0) (exactly 19.7 m^3/s whatever the cells), from
  t = 0 to 1000 s, on a dry bed;
* boundaries: the model extent (``extent.csv``) is the DEM rectangle.  The valley falls
  from the south-west (24 m) to the north-east (17 m): as in ANUGA, the south and west
  sides are walls and water leaves through the north and east sides (extrapolation,
  ``boundary="outflow"``); ``boundary="wall"`` closes all four (mass balance checks).

Coordinates are local, ``x - X0, y - Y0`` with ``(X0, Y0)`` the lower-left corner of
the grid (:func:`local_grid`): a coordinate near 6.35e6 m is rounded to ~1e-9 m, a
local one to ~1e-14 m.  The computational rectangle is the DEM without its first
column (38 of its 416 values are NODATA; the 35 others on the border are filled from
neighbours by the loader): 320 x 416 DEM cells of 0.99994 m.  Its sides lie within
0.8 m of ``extent.csv``, so no cell lies outside the model extent and none is masked.
Trees of 32 DEM cells (10 x 13), patches of ``mx = 16`` cells: level 0 is 2 m, level 1
the DEM grid itself (``mx * 2**max_level = 32``), where the exact cell average of the
bilinear topography is the 1-6-1 smoothing of the DEM values.  AMR follows the water:
a patch with a wet cell is refined to ``max_level`` (GeoClaw's surface flag with the
sea level at the datum 0 m AHD, below all land, so every wet cell flags), and the disc
of the inflow stays at the finest level.  ``uniform=True`` runs all at ``max_level``.

``report(sim, out)`` (called by ``forestpy run``) writes ``peak_stages.csv``: the
modelled peak stage at the five observation points beside the observed and the TUFLOW
ones, with differences.  The modelled peak is the maximum of ``h + b`` at the cell of
the point, sampled every step; where that cell never got wet (P2 and P3 lie on ground
higher than the water beside them: P2's DEM is 23.58 m, its observed stage 23.36 m),
the peak of the nearest wet point of the 1 m fgmax map within 3 m, and the distance is
reported.  Also ``max_depth.png``, the fgmax files and the volume balance (injected =
stored + outflow).

Which coordinates where (also in ``report.json``'s ``coordinates``): the frames,
``fgmax.npz``, ``fgmax.vtp`` and ``max_depth.png`` are in the local metres above (they
overlay in ParaView); the fgmax rasters ``fgmax_<field>.tif`` (tagged EPSG:32756) and
``.asc`` and the ``x, y`` of ``peak_stages.csv`` are in MGA / UTM zone 56S metres, as
the DEM (``x_local, y_local`` beside them).

    forestpy run demos/geoclaw/merewether.py --out out/merewether
    forestpy run demos/geoclaw/merewether.py --set uniform=true --out out/merewether_1m
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import numpy as np
from forestpy.extensions.geoclaw import datasets
from forestpy.extensions.geoclaw.fgmax import FGMax
from forestpy.extensions.geoclaw.model import geoclaw_simulation, riemann_solver_option
from forestpy.extensions.geoclaw.rasters import Raster
from forestpy.extensions.geoclaw.refinement import Region
from forestpy.extensions.geoclaw.sources import DischargeSource
from forestpy.extensions.geoclaw.topography import Topography, TopographyStack, make_setaux

from forestpy import Domain
from forestpy.options import Option, merge_options, standard_options

OPTIONS = dict(
    **{k: v for k, v in standard_options(mx=16, min_level=0, max_level=1, regrid_interval=4,
                                         t_final=1000.0, cfl=0.9).items()
       if k != "refine_threshold"},
    uniform=Option(False, "uniform grid at max_level (no AMR)"),
    house_height=Option(3.0, "height (m) the buildings are raised by", min=0.0),
    manning_road=Option(0.02, "Manning n inside the road polygon", min=0.0),
    manning_other=Option(0.04, "Manning n elsewhere", min=0.0),
    discharge=Option(19.7, "inflow (m^3/s) spread over the inflow disc", min=0.0),
    boundary=Option("outflow", "outflow: walls S/W, outflow N/E; wall: all walls",
                    choices=("outflow", "wall")),
    dry_tolerance=Option(1e-3, "depth (m) below which a cell is dry", min=0.0),
    speed_limit=Option(10.0, "largest speed kept (m/s), against fast thin layers",
                       min=0.0, min_inclusive=False),
    fgmax_spacing=Option(1.0, "spacing (m) of the fgmax grid of the max-depth map",
                         min=0.25),
    fgmax_every=Option(20, "steps between samples of the max-depth map (the observation "
                          "points are sampled every step)", min=1),
    riemann_solver=riemann_solver_option(),
)

GRAV = 9.81
EPSG = 32756  # WGS 84 / UTM zone 56S: the projection named in topography1.prj
TREE_CELLS = 32  # DEM cells per tree side: 10 x 13 trees
NX, NY = 320, 416  # DEM cells of the computational rectangle
NEAR_RADIUS = 3.0  # m: a dry observation point takes the nearest wet peak this close
DT_INITIAL = 0.05  # s; later steps follow the Courant number


@functools.lru_cache(maxsize=4)
def local_crs(origin) -> str:
    """The local coordinate system in words (frames, fgmax.npz/.vtp, the report's
    ``x_local``/``y_local``)."""
    return (f"local metres: x = easting - {origin[0]:.3f}, y = northing - {origin[1]:.3f} "
            f"(MGA / UTM zone 56S, EPSG:{EPSG})")


def local_grid(house_height: float = 3.0):
    """The DEM in local coordinates: ``(topography raster, Manning raster, origin)``.

    The rasters are cell-registered, 320 x 416 cells of the DEM's spacing from (0, 0);
    ``origin`` is ``(X0, Y0)`` in MGA 56 metres."""
    topo = datasets.merewether_topography(house_height)  # NODATA filled, houses raised
    dx, dy = topo.dx, topo.dy
    z = topo.z[:, 1:]  # drop the first column (38 of its 416 values are NODATA)
    if z.shape != (NY, NX):
        raise ValueError(f"Merewether DEM: expected {NY} x {NX + 1} values, got {topo.z.shape}")
    x0, y0 = topo.x0 + 0.5 * dx, topo.y0 - 0.5 * dy  # lower-left corner of column 1
    road = datasets.merewether_manning(*np.meshgrid(topo.x[1:], topo.y), road=1.0, other=0.0)
    bed = Raster(np.ascontiguousarray(z), 0.5 * dx, 0.5 * dy, dx, dy, "cell")
    rough = Raster(road.astype(np.float64), 0.5 * dx, 0.5 * dy, dx, dy, "cell")
    return bed, rough, (x0, y0)


def observations() -> dict:
    """The observation points in local coordinates with their peak stages."""
    obs = datasets.merewether_observations()
    _, _, (x0, y0) = local_grid()
    return {**obs, "x": obs["x"] - x0, "y": obs["y"] - y0}


def manning_raster(rough: Raster, road: float, other: float):
    """``n(x, y)``: the value of the DEM cell containing each point (clipped to the
    grid for ghost cells)."""
    mask = rough.z > 0.5
    ny, nx = mask.shape

    def n(x, y):
        i = np.clip(np.floor(np.asarray(x) / rough.dx).astype(np.int64), 0, nx - 1)
        j = np.clip(np.floor(np.asarray(y) / rough.dy).astype(np.int64), 0, ny - 1)
        return np.where(mask[j, i], road, other)

    return n


class SparseFGMax(FGMax):
    """:class:`FGMax` sampled every ``every`` accepted steps (and at the start and the
    end).  The points are located once per forest and a sample is one pass over the
    133 000 points of the 1 m map (one kernel on the GPU); ``every`` trades the
    map's peak accuracy for that pass (the demo's default keeps its pinned results)."""

    def __init__(self, x, y, every: int = 1, **kw):
        super().__init__(x, y, **kw)
        self.every = int(every)

    def on_step(self, sim):
        if sim.steps % self.every == 0:
            self.update(sim)

    def on_end(self, sim):
        self.update(sim)
        super().on_end(sim)


def setup(**overrides):
    """The :class:`~forestpy.simulation.Simulation` of the flood (options: ``OPTIONS``);
    ``sim.merewether`` holds the fgmax trackers, the origin and the inflow source."""
    o = merge_options(OPTIONS, overrides, "merewether")
    if o["max_level"] < o["min_level"]:
        raise ValueError(f"max_level ({o['max_level']}) < min_level ({o['min_level']})")
    bed, rough, (x0, y0) = local_grid(o["house_height"])
    stack = TopographyStack([Topography(bed, "merewether topography1.asc (local)")])
    dx = bed.dx
    domain = Domain(lower=(0.0, 0.0), upper=(NX * dx, NY * dx),
                    ntrees=(NX // TREE_CELLS, NY // TREE_CELLS))
    setaux = make_setaux(stack, domain=(0.0, NX * dx, 0.0, NY * dx))
    inflow = datasets.MEREWETHER_INFLOW
    cx, cy = inflow["centre"][0] - x0, inflow["centre"][1] - y0
    r = inflow["radius"]
    source = DischargeSource(cx, cy, o["discharge"], radius=r)
    top = o["max_level"]
    lowest = top if o["uniform"] else o["min_level"]
    regions = [] if o["uniform"] else [
        Region(cx - r - 4 * dx, cx + r + 4 * dx, cy - r - 4 * dx, cy + r + 4 * dx,
               min_level=top, max_level=top)]
    bc = "wall" if o["boundary"] == "wall" else \
        {"x_lower": "wall", "x_upper": "extrap", "y_lower": "wall", "y_upper": "extrap"}
    obs = observations()
    peaks = FGMax(obs["x"], obs["y"], dry_tolerance=o["dry_tolerance"])
    h = o["fgmax_spacing"]
    nfx, nfy = max(2, round(NX * dx / h)), max(2, round(NY * dx / h))
    sx, sy = NX * dx / nfx, NY * dx / nfy
    flood = SparseFGMax.grid(0.5 * sx, NX * dx - 0.5 * sx, 0.5 * sy, NY * dx - 0.5 * sy,
                             nfx, nfy, dry_tolerance=o["dry_tolerance"], every=o["fgmax_every"],
                             epsg=EPSG, origin=(x0, y0), crs=local_crs((x0, y0)))
    sim = geoclaw_simulation(
        setaux,
        domain=domain,
        sea_level=0.0,
        grav=GRAV,
        dry_tolerance=o["dry_tolerance"],
        manning=manning_raster(rough, o["manning_road"], o["manning_other"]),
        sources=[source],
        speed_limit=o["speed_limit"],
        wave_tolerance=0.01,  # every wet cell: the sea level 0 m AHD lies below all land
        regions=regions,
        bc=bc,
        mx=o["mx"],
        min_level=lowest,
        max_level=top,
        regrid_interval=o["regrid_interval"],
        cfl_desired=o["cfl"],
        cfl_max=1.0,
        dt_initial=DT_INITIAL,  # the bed is dry at t = 0: no wave speed sets the first step
        t_final=o["t_final"],
        backend=o["backend"],
        dtype=o["dtype"],
        subcycle=o["subcycle"],
        callbacks=[peaks, flood],
        name="merewether",
        riemann_solver=o["riemann_solver"],
    )
    sim.merewether = dict(peaks=peaks, flood=flood, origin=(x0, y0), source=source,
                          options=o)
    return sim


def volume(sim) -> float:
    """Water volume in the domain (m^3)."""
    return sim.totals()["h"]


def peak_at_points(peaks: FGMax, flood: FGMax, x, y, radius: float = NEAR_RADIUS):
    """Modelled peak stage at points: ``(stage, distance)`` arrays.

    The peak surface of the cell containing the point (``peaks``, sampled every step);
    where that cell stayed dry, the peak surface of the nearest wet point of the map
    ``flood`` within ``radius`` (the DEM there is higher than the water: P2's ground is
    23.58 m, its observed stage 23.36 m) and its distance; NaN beyond ``radius``."""
    stage = peaks.results()["max_surface"].ravel().copy()
    dist = np.where(np.isfinite(stage), 0.0, np.nan)
    res = flood.results()
    wet = np.isfinite(res["max_surface"].ravel())
    fx, fy, fs = res["x"].ravel()[wet], res["y"].ravel()[wet], res["max_surface"].ravel()[wet]
    for k in np.flatnonzero(~np.isfinite(stage)):
        if fx.size == 0:
            break
        d = np.hypot(fx - x[k], fy - y[k])
        n = int(np.argmin(d))
        if d[n] <= radius:
            stage[k], dist[k] = fs[n], d[n]
    return stage, dist


def report(sim, out) -> dict:
    """Peak stages beside the observed and TUFLOW ones (``peak_stages.csv``), the map of
    the maximum depth (``max_depth.png``, fgmax rasters) and the volume balance."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    info = sim.merewether
    x0, y0 = info["origin"]
    obs = observations()
    at_point = info["peaks"].results()["max_surface"]
    stage, dist = peak_at_points(info["peaks"], info["flood"], obs["x"], obs["y"])
    rows = []
    for k in range(len(obs["id"])):
        model, seen, tuflow = float(stage[k]), float(obs["stage_observed"][k]), \
            float(obs["stage_tuflow"][k])
        rows.append(dict(
            id=int(obs["id"][k]), x=float(obs["x"][k] + x0), y=float(obs["y"][k] + y0),
            x_local=float(obs["x"][k]), y_local=float(obs["y"][k]),
            modelled=model, observed=seen, tuflow=tuflow,
            modelled_minus_observed=model - seen, modelled_minus_tuflow=model - tuflow,
            tuflow_minus_observed=tuflow - seen,
            modelled_at_point=float(at_point[k]), distance_m=float(dist[k]),
        ))
    with open(out / "peak_stages.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})

    def rms(key):
        d = np.array([r[key] for r in rows])
        d = d[np.isfinite(d)]
        return float(np.sqrt(np.mean(d**2))) if d.size else None

    flood = info["flood"]
    written = flood.write(out / "fgmax")  # rasters in UTM 56, .npz/.vtp local
    png = plot_max_depth(flood.results(), obs, out / "max_depth.png", sim.t, (x0, y0))
    injected = sim.geoclaw_sources.volume_added
    stored = volume(sim)
    return {
        "peak_stages": rows,
        "points_compared": int(np.isfinite(stage).sum()),
        "rms_modelled_minus_observed": rms("modelled_minus_observed"),
        "rms_tuflow_minus_observed": rms("tuflow_minus_observed"),
        "rms_modelled_minus_tuflow": rms("modelled_minus_tuflow"),
        "volume_injected": injected,
        "volume_in_domain": stored,
        "volume_outflow": injected - stored,
        "flooded_area_m2": float(np.sum(flood.results()["max_depth"] > 0.01)
                                 * _cell_area(flood)),
        "max_speed": float(np.max(flood.results()["max_speed"])),
        "files": ["peak_stages.csv", *(p.name for p in written)]
        + ([png.name] if png is not None else []),
        "coordinates": {
            "local": local_crs((x0, y0)),
            "in_local": ["frames (.vtm/.vthb)", "fgmax.npz", "fgmax.vtp", "max_depth.png",
                         "peak_stages.csv x_local, y_local"],
            "in_utm56": ["fgmax_*.tif (EPSG:32756)", "fgmax_*.asc",
                         "peak_stages.csv x, y", "report peak_stages x, y"],
            "origin_utm56": [x0, y0],
            "epsg": EPSG,
        },
    }


def _cell_area(flood) -> float:
    x, y = flood.results()["x"], flood.results()["y"]
    return float((x[0, 1] - x[0, 0]) * (y[1, 0] - y[0, 0]))


def plot_max_depth(res: dict, obs: dict, png: Path, t_final: float = 1000.0,
                   origin=(0.0, 0.0)):
    """PNG of the maximum depth over the bed (pyvista offscreen), in local metres with
    the origin in the axis titles; None when pyvista is missing.  The colour range ends
    at the 99th percentile of the flooded cells (the few deepest cells, in the inflow
    pit, would wash out the streets), and the picture says so with the true maximum."""
    try:
        from forestpy.io.plot import (
            _pyvista,
            clipping_note,
            decorate,
            grid_map,
        )

        pv = _pyvista()
    except (ImportError, RuntimeError):
        return None
    x, y, d = res["x"], res["y"], res["max_depth"]
    flooded = np.where(d > 0.01, d, np.nan)
    top = float(np.nanpercentile(flooded, 99)) if np.isfinite(flooded).any() else 1.0
    clim = [0.0, max(1e-3, top)]
    p = pv.Plotter(off_screen=True, window_size=[900, 1000])
    p.set_background("white")
    grid_map(p, x, y, res["bed"], name="bed", unit="m AHD", cmap="gray", z=-1.0, bar=False)
    grid_map(p, x, y, flooded, name="max depth", unit="m", clim=clim)
    pts = np.column_stack([obs["x"], obs["y"], np.ones(len(obs["x"]))])
    p.add_point_labels(pts, [f"P{i}" for i in obs["id"]], point_color="red", point_size=10,
                       text_color="black", font_size=14, always_visible=True)
    note = clipping_note(flooded, clim, "m")
    if note:
        note += " (99th percentile of the flooded cells)"
    decorate(p, title=f"Merewether 2007: maximum depth, t = 0 to {t_final:g} s (bed in grey)",
             xlabel=f"x (m east of {origin[0]:.1f}, UTM 56S)",
             ylabel=f"y (m north of {origin[1]:.1f})", note=note,
             bounds=(x.min(), x.max(), y.min(), y.max(), 0.0, 0.0))
    p.view_xy()
    png.parent.mkdir(parents=True, exist_ok=True)
    p.screenshot(str(png))
    p.close()
    return png

if __name__ == "__main__":
    sim = setup().run()
    print(sim.summary())
    print(report(sim, Path("out") / "merewether"))
