r"""Dam break over real terrain: a reservoir released down a valley of the 5 m Eden DEM.

Terrain: the 5 m DEM of the river Eden valley around Carlisle (``demos/geoclaw/data/
eden_dem``, British National Grid EPSG 27700, loader ``datasets.eden_dem``), cropped to
the window

    x in [338516, 341076] m, y in [552937, 556777] m   (2.56 km x 3.84 km,
    DEM columns 700-1211 and rows 360-1127 counted from the south-west corner),

which holds a tributary valley running north (its floor at 19-24 m between sides at
30-57 m, north of the window's south edge; by its position the valley of the river
Caldew south of Carlisle) and, north of y ~ 554200, the flat floodplain at 12-17 m.
The window is covered by survey data everywhere (no NODATA).

Dam and reservoir (hypothetical): a dam across the valley along y = 553940 m between
x = 339330 m and x = 340000 m, where the floor is 19-20 m and the valley sides rise
above 29 m.  The reservoir is the water body at 28 m (about 8-9 m deep at the dam)
connected, below 28 m and south of the dam line, to the point (339600, 553700) in the
valley: a flood fill on the DEM grid, so the ponds of the valley sides stay dry.  At
t = 0 the dam vanishes and the water runs down the valley onto the dry floodplain.

Numerics: the ``geoclaw`` solver (wet/dry, well-balanced), bed = exact cell averages of
the bilinear interpolant of the DEM at every level, Manning n = 0.035 (grass
floodplain), walls on the four sides (the flood has not reached them by the default
end time; the report gives the largest depth on the boundary, and the volume balance is
then exact).  AMR: patches of 16 x 16 cells on 2 x 3 trees of 1280 m; level 1 is 40 m,
level 4 the DEM's 5 m.  Refinement follows the flood front (speed above
``speed_tolerance`` and patches holding wet and dry cells) and forces the finest level
along the dam for the first ``dam_refine_s`` seconds.  An :class:`FGMax` grid (every
``fgmax_dx`` m) records the maximum depth, maximum speed and first arrival time (depth
above ``arrival_depth``); they are written as ``.npz``, GeoTIFF and ESRI ASCII.

``report(sim, out)``: flooded area (maximum depth above ``arrival_depth`` outside the
reservoir), reservoir and final volumes with the relative balance, arrival times along
the valley axis, and ``dam_break_dem.png`` (maps of the maximum depth and of the arrival
time over a hillshade of the bed).

    forestpy run demos/geoclaw/dam_break_dem.py --out out/dam_break
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from forestpy.extensions.geoclaw.datasets import eden_dem
from forestpy.extensions.geoclaw.fgmax import FGMax
from forestpy.extensions.geoclaw.model import geoclaw_simulation, riemann_solver_option
from forestpy.extensions.geoclaw.refinement import Region
from forestpy.extensions.geoclaw.topography import Topography, make_setaux

from forestpy import Domain, Simulation
from forestpy.options import Option, merge_options, simulation_options, standard_options

#: the window of the DEM (m, EPSG 27700): 512 x 768 DEM cells, 2 x 3 trees of 1280 m
WINDOW = (338516.0, 341076.0, 552937.0, 556777.0)
NTREES = (2, 3)
DAM = ((339330.0, 553940.0), (340000.0, 553940.0))  # the dam line (end points)
RESERVOIR_SEED = (339600.0, 553700.0)  # a point in the reservoir
#: points on the channel downstream of the dam, every 150-300 m of northing (the lowest
#: bed within +-120 m of the previous point, found on the DEM once)
AXIS = np.array([[339530.0, 553990.0], [339550.0, 554140.0], [339720.0, 554440.0],
                 [339960.0, 554740.0], [339965.0, 555040.0], [340000.0, 555340.0],
                 [339845.0, 555640.0], [339605.0, 555940.0]])

_standard = standard_options(mx=16, min_level=1, max_level=3, regrid_interval=2,
                             t_final=600.0, cfl=0.8)
_standard.pop("refine_threshold")  # the GeoClaw flags below replace it

OPTIONS = dict(
    **_standard,
    reservoir_level=Option(28.0, "water level behind the dam (m above datum; below 21.5 "
                           "the seed point is dry, above 28.7 the water spills past the "
                           "dam's ends)", min=21.5, max=28.7),
    manning=Option(0.035, "Manning coefficient (s m^-1/3)", min=0.0),
    speed_tolerance=Option(0.5, "refine where the speed exceeds this (m/s)", min=0.0,
                           min_inclusive=False),
    dam_refine_s=Option(60.0, "seconds during which the dam stays at the finest level",
                        min=0.0),
    dry_tolerance=Option(1e-3, "depth (m) below which a cell is dry", min=0.0),
    arrival_depth=Option(0.1, "depth (m) that counts as the flood's arrival", min=0.0,
                         min_inclusive=False),
    fgmax_dx=Option(20.0, "spacing of the fgmax grid (m)", min=1.0),
    riemann_solver=riemann_solver_option(),
)


# --------------------------------------------------------------------------- terrain
def terrain(dem=None) -> Topography:
    """The DEM cropped to the window (one DEM cell beyond it on every side)."""
    dem = eden_dem() if dem is None else dem
    x0, x1, y0, y1 = WINDOW
    return Topography(dem, "eden_dem/DEM.tif").crop(x0 - 10, x1 + 10, y0 - 10, y1 + 10)


def reservoir_mask(topo: Topography, level: float):
    """Boolean grid over the DEM points of ``topo``: the water body below ``level``
    south of the dam line connected to :data:`RESERVOIR_SEED` (4-neighbour flood fill
    by repeated dilation, vectorised)."""
    X, Y = np.meshgrid(topo.x, topo.y)
    (xa, ya), (xb, _) = DAM
    allowed = (topo.z < level) & (Y < ya)
    i = int(np.argmin(np.abs(topo.x - RESERVOIR_SEED[0])))
    j = int(np.argmin(np.abs(topo.y - RESERVOIR_SEED[1])))
    if not allowed[j, i]:
        raise ValueError(f"the reservoir seed {RESERVOIR_SEED} lies above the level {level} m")
    mask = np.zeros_like(allowed)
    mask[j, i] = True
    while True:
        grown = mask.copy()
        grown[1:] |= mask[:-1]
        grown[:-1] |= mask[1:]
        grown[:, 1:] |= mask[:, :-1]
        grown[:, :-1] |= mask[:, 1:]
        grown &= allowed
        if np.array_equal(grown, mask):
            break
        mask = grown
    # the dam closes the valley: no reservoir point may touch the dam line beyond its ends
    touching = mask & (Y > ya - topo.raster.dy * 1.01)
    if touching.any() and (X[touching].min() < xa or X[touching].max() > xb):
        raise ValueError("the reservoir reaches the dam line beyond the dam's ends")
    return mask


def reservoir_surface(topo: Topography, level: float):
    """``eta_init(x, y)``: ``level`` at points whose nearest DEM point is in the
    reservoir, -inf (dry) elsewhere."""
    mask = reservoir_mask(topo, level)
    r = topo.raster

    def eta(x, y):
        i = np.clip(np.rint((x - r.x0) / r.dx).astype(np.int64), 0, mask.shape[1] - 1)
        j = np.clip(np.rint((y - r.y0) / r.dy).astype(np.int64), 0, mask.shape[0] - 1)
        return np.where(mask[j, i], level, -np.inf)

    eta.mask = mask
    return eta


# --------------------------------------------------------------------------- setup
def setup(**overrides) -> Simulation:
    o = merge_options(OPTIONS, overrides, "dam_break_dem")
    if o["max_level"] < o["min_level"]:
        raise ValueError(f"max_level ({o['max_level']}) < min_level ({o['min_level']})")
    topo = terrain()
    x0, x1, y0, y1 = WINDOW
    eta_init = reservoir_surface(topo, o["reservoir_level"])
    (xa, ya), (xb, _) = DAM
    dam_region = Region(xa - 100.0, xb + 100.0, ya - 100.0, ya + 100.0,
                        min_level=o["max_level"], t2=o["dam_refine_s"])
    gx = np.arange(x0 + 0.5 * o["fgmax_dx"], x1, o["fgmax_dx"])
    gy = np.arange(y0 + 0.5 * o["fgmax_dx"], y1, o["fgmax_dx"])
    GX, GY = np.meshgrid(gx, gy)
    fgmax = FGMax(GX, GY, dry_tolerance=o["dry_tolerance"], sea_level=-np.inf,
                  arrival_depth=o["arrival_depth"], epsg=27700)
    sim = geoclaw_simulation(
        make_setaux(topo, domain=WINDOW),
        domain=Domain((x0, y0), (x1, y1), ntrees=NTREES),
        eta_init=eta_init,
        sea_level=0.0,
        dry_tolerance=o["dry_tolerance"],
        manning=o["manning"],
        wave_tolerance=None,
        speed_tolerance=o["speed_tolerance"],
        shoreline=True,
        regions=[dam_region],
        bc="wall",
        **simulation_options(o),
        callbacks=[fgmax],
        name="dam_break_dem",
        riemann_solver=o["riemann_solver"],
    )
    sim.demo_options = o
    sim.fgmax = fgmax
    sim.reservoir = eta_init.mask
    sim.topography = topo
    return sim


# --------------------------------------------------------------------------- analysis
def boundary_depth(sim) -> float:
    """Largest depth in the cells along the west, east and north walls (the south wall
    closes the reservoir, which the window cuts)."""
    b = sim.mbc
    h = sim.backend.to_host(sim.q[:, 0, b:-b, b:-b])
    out = 0.0
    for side, sl in ((0, np.s_[:, :, 0]), (1, np.s_[:, :, -1]), (3, np.s_[:, -1, :])):
        on = sim.geom.on_side(side)
        if len(on):
            out = max(out, float(h[sl][on].max()))
    return out


def flood_results(sim) -> dict:
    """Numbers of the fgmax grid: flooded area outside the reservoir, arrival times at
    the channel points :data:`AXIS` (the earliest of the fgmax points within 30 m; None:
    not reached) with their distance from the dam along the channel, largest depth and
    speed."""
    o = sim.demo_options
    f = sim.fgmax
    res = f.results()
    cell = o["fgmax_dx"] ** 2
    r = sim.topography.raster
    i = np.clip(np.rint((res["x"] - r.x0) / r.dx).astype(np.int64), 0, sim.reservoir.shape[1] - 1)
    j = np.clip(np.rint((res["y"] - r.y0) / r.dy).astype(np.int64), 0, sim.reservoir.shape[0] - 1)
    in_reservoir = sim.reservoir[j, i]
    flooded = (res["max_depth"] > o["arrival_depth"]) & ~in_reservoir
    near = np.hypot(res["x"].ravel()[None] - AXIS[:, :1], res["y"].ravel()[None] - AXIS[:, 1:])
    t_all = np.broadcast_to(res["arrival_time"].ravel(), near.shape)
    t_axis = np.fmin.reduce(np.where(near <= 30.0, t_all, np.inf), axis=1)  # NaN: never
    along = np.concatenate([[AXIS[0, 1] - DAM[0][1]],
                            np.hypot(*np.diff(AXIS, axis=0).T)]).cumsum()
    return {
        "flooded_area_m2": float(flooded.sum() * cell),
        "reservoir_area_m2": float(in_reservoir.sum() * cell),
        "max_depth_outside_reservoir": float(np.where(flooded, res["max_depth"], 0).max()),
        "max_speed": float(np.nanmax(res["max_speed"])),
        "axis_distance_m": [float(d) for d in along],
        "axis_arrival_s": [None if not np.isfinite(t) else float(t) for t in t_axis],
        "flood_front_y_max": float(res["y"][flooded].max()) if flooded.any() else None,
    }


def volume_balance(sim) -> dict:
    v0, v1 = sim.totals_initial["h"], sim.totals()["h"]
    return {"volume_initial_m3": v0, "volume_final_m3": v1,
            "volume_change_relative": (v1 - v0) / v0}


# --------------------------------------------------------------------------- pictures
def hillshade(z, dx, azimuth=315.0, altitude=45.0):
    """Lambertian shading in [0, 1] of a grid ``z[j, i]`` (row 0 south)."""
    gy, gx = np.gradient(z, dx)
    az, alt = math.radians(azimuth), math.radians(altitude)
    slope = np.arctan(np.hypot(gx, gy))
    aspect = np.arctan2(-gx, gy)
    shade = (math.sin(alt) * np.cos(slope)
             + math.cos(alt) * np.sin(slope) * np.cos(az - aspect))
    return np.clip(shade, 0.0, 1.0)


def flood_picture(sim, out) -> Path:
    """``dam_break_dem.png`` (pyvista offscreen): two maps of the fgmax grid, north up,
    in British National Grid metres, over a grey hillshade of the bed, the dam in red.
    Left: the maximum depth (0 to its 99th percentile over the flooded points, which the
    picture says with the true maximum; no colour where it stayed below
    ``arrival_depth``).  Right: the arrival time (0 to the end time)."""
    from forestpy.io.plot import (
        _pyvista,
        clipping_note,
        decorate,
        grid_map,
        save_side_by_side,
    )

    pv = _pyvista()
    o = sim.demo_options
    res = sim.fgmax.results()
    x, y = res["x"], res["y"]
    z = sim.topography(x, y)
    shade = 0.35 + 0.65 * hillshade(z, o["fgmax_dx"])
    depth = res["max_depth"]
    wet = depth > o["arrival_depth"]
    top = float(np.percentile(depth[wet], 99)) if wet.any() else 1.0
    t = res["arrival_time"]
    arrived = np.isfinite(t) & wet
    # axes in metres from a round corner: short tick labels, the origin in the titles
    ex, ny = math.floor(x.min() / 100) * 100, math.floor(y.min() / 100) * 100
    x, y = x - ex, y - ny
    (xa, ya), (xb, yb) = ((a - ex, b - ny) for a, b in DAM)
    plotters = []
    panels = (
        ("maximum depth", "m", np.where(wet, depth, np.nan), [0.0, top],
         clipping_note(depth[wet], [0.0, top], "m")),
        ("arrival time", "s", np.where(arrived, t, np.nan), [0.0, max(sim.t, 1e-9)], None),
    )
    bounds = (x.min(), x.max(), y.min(), y.max(), 0.0, 0.0)
    for name, unit, values, clim, note in panels:
        p = pv.Plotter(off_screen=True, window_size=[760, 1000])
        p.set_background("white")
        grid_map(p, x, y, shade, name="hillshade", unit=None, cmap="gray", clim=[0, 1],
                 z=-1.0, bar=False)
        grid_map(p, x, y, values, name=name, unit=unit, cmap="Blues", clim=clim)
        p.add_mesh(pv.Line((xa, ya, 1.0), (xb, yb, 1.0)), color="red", line_width=4)
        if note:
            note += " (99th percentile of the flooded points)"
        decorate(p, title=f"{name}, t = 0 to {sim.t:g} s",
                 xlabel=f"x (m east of {ex:.0f}, British National Grid EPSG:27700)",
                 ylabel=f"y (m north of {ny:.0f})", note=note, bounds=bounds)
        p.view_xy()
        plotters.append(p)
    return save_side_by_side(Path(out) / "dam_break_dem.png", plotters)


# --------------------------------------------------------------------------- report
def report(sim, out) -> dict:
    """Flooded area, volume balance, arrival times; writes the fgmax rasters
    (``fgmax.npz``, ``fgmax_<field>.tif/.asc``) and ``dam_break_dem.png`` into ``out``."""
    out = Path(out)
    files = sim.fgmax.write(out / "fgmax")
    rec = {"t": sim.t, "steps": sim.steps, "regrids": sim.regrids,
           "patches_per_level": {str(k): v for k, v in sim.patches_per_level().items()},
           "cell_updates": int(sim.cell_updates),
           **volume_balance(sim), **flood_results(sim),
           "boundary_max_depth": boundary_depth(sim),
           "fgmax_files": [str(f) for f in files]}
    try:
        rec["png"] = str(flood_picture(sim, out))
    except (ImportError, RuntimeError) as e:  # imageio is in the plot extra
        rec["png"] = f"not written: {e}"
    return rec


if __name__ == "__main__":
    sim = setup().run()
    print(sim.summary())
    print(report(sim, Path("out/dam_break_dem")))  # forestpy run also writes report.json
