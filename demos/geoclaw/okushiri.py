r"""Monai valley wave tank: the Okushiri 1993 tsunami at 1:400, against the measured gauges.

Benchmark #2 of the Third International Workshop on Long-Wave Runup Models (Catalina
Island, 2004; data by CRIEPI, vendored in ``demos/geoclaw/data/okushiri``).  A tank of
5.488 m x 3.402 m: an offshore depth of 13.5 cm at the wavemaker side ``x = 0``, an
island and the narrow Monai valley near ``(5.16, 1.88)``, where the 1993 tsunami ran up
31.7 m (about 7.9 cm at 1:400).  The measured incident wave (a 3 mm trough, then a
16 mm crest) enters at ``x = 0``; the other sides are walls; Manning ``n = 0.01``;
22.5 s.  Gauges ch5, ch7 and ch9 sit in front of the valley.

The bathymetry file is an ESRI ASCII grid of 393 x 244 values at 0.014 m whose header
says cell-registered with the lower-left corner at (0, 0).  The values are really the
survey *points* of the tank, ``x = 0, 0.014, ..., 5.488`` and ``y = 0, ..., 3.402``
(392 x 243 intervals: exactly the tank's 5.488 m x 3.402 m; the first column holds the
13.5 cm offshore depth of the wavemaker side ``x = 0``), so it is read as
node-registered there.  The finest level has cells of exactly 0.014 m.  A quadtree of
square 0.014 m cells cannot end at ``y = 3.402`` (243 cells = 3^5), so the grid covers
a slightly larger rectangle (trees of ``mx 2^max_level`` cells) and the part beyond
the tank, ``x > 5.488`` (dry beach side) or ``y > 3.402``, is ground ``WALL_TOP`` =
0.3 m high: dry, above any water level of the run, so the tank's north side wall stays
at ``y = 3.402`` (a wet cell beside a dry higher one is a wall for the well-balanced
solver).  The topography is the exact cell average of the bilinear interpolant of the
points at every level (:mod:`forestpy.extensions.geoclaw.topography`).

Adaptivity (default; ``adaptive=false`` gives the uniform finest grid): GeoClaw-style
flags (surface departing from still water by more than ``wave_tolerance``) up to one
level below the finest, and refinement regions that keep the finest level over the
coast with the valley and the gauges, and the island (``REGIONS``).

Coordinates are the tank's, in metres (:data:`CRS`): frames, gauges and fgmax alike.
The report (``forestpy run`` calls :func:`report`) writes ``gauges.csv`` (model and
measured surface elevation at the measured times, every 0.05 s), ``gauges.png``,
``gauges.vtp`` (the gauge points with the last and highest value of each recorded field,
for ParaView), the fgmax files of the valley box (``fgmax.npz``, ``fgmax.vtp``,
``fgmax_<field>.tif/.asc``) and returns,
per gauge, the RMS difference over 10-22.5 s and the errors in peak height and peak
time (peak over 10-22.5 s), with the measured series as is and with its datum offset
(the mean over 0-5 s, before any wave arrives) removed, and the maximum runup (the
highest bed elevation wetted, and where).

    forestpy run demos/geoclaw/okushiri.py --out out/okushiri
    forestpy run demos/geoclaw/okushiri.py --set adaptive=false --out out/okushiri_uniform

References: M. Matsuyama and H. Tanaka, An experimental study of the highest run-up
height in the 1993 Hokkaido Nansei-oki earthquake tsunami, ITS Proceedings (2001)
879-889; The Third International Workshop on Long-Wave Runup Models, Benchmark 2
(http://www.cee.cornell.edu/longwave); M. J. Berger, D. L. George, R. J. LeVeque and
K. T. Mandli, The GeoClaw software for depth-averaged flows with adaptive refinement,
*Adv. Water Resour.* 34 (2011) 1195-1206.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from forestpy.extensions.geoclaw import datasets
from forestpy.extensions.geoclaw.fgmax import FGMax
from forestpy.extensions.geoclaw.forcing import IncidentWave, side_conditions
from forestpy.extensions.geoclaw.model import geoclaw_simulation, riemann_solver_option
from forestpy.extensions.geoclaw.rasters import Raster
from forestpy.extensions.geoclaw.refinement import Region
from forestpy.extensions.geoclaw.topography import Topography, TopographyStack, make_setaux

from forestpy import Domain, Simulation
from forestpy.callbacks import SHALLOW_WATER_SI, Gauges
from forestpy.options import Option, merge_options, simulation_options, standard_options

GRAV = 9.81
TANK = (5.488, 3.402)  # the surveyed tank (m)
SURVEY_DX = 0.014  # spacing of the survey points (m)
WALL_TOP = 0.3  # bed elevation beyond the tank (m): dry ground, higher than any water
GAUGES = datasets.OKUSHIRI_GAUGES
CRS = "wave tank metres: x from the wavemaker (x = 0) towards the coast, y across the tank"
RUNUP_BOX = (4.9, 5.45, 1.4, 2.4)  # the Monai valley and its mouth: fgmax for the runup
WINDOW = (10.0, 22.5)  # the comparison window (s)
DATUM_WINDOW = (0.0, 5.0)  # before any wave reaches the gauges (s)

_standard = standard_options(mx=16, min_level=0, max_level=2, regrid_interval=4,
                             t_final=22.5, cfl=0.9)
_standard.pop("refine_threshold")  # the GeoClaw flags below replace it
OPTIONS = dict(
    **_standard,
    dx_finest=Option(SURVEY_DX, "cell size of the finest level (m); the survey: 0.014",
                     min=0.0, min_inclusive=False),
    adaptive=Option(True, "adaptive grid (false: the uniform finest grid, min_level = "
                    "max_level)", type=bool),
    manning=Option(0.01, "Manning coefficient (s m^-1/3)", min=0.0),
    wave_tolerance=Option(0.002, "refine where |eta| exceeds this (m), up to one level "
                          "below the finest outside the regions", min=0.0,
                          min_inclusive=False),
    dry_tolerance=Option(1e-4, "depth (m) below which a cell is dry", min=0.0,
                         min_inclusive=False),
    speed_limit=Option(2.0, "largest speed (m/s) of thin layers (GeoClaw's speed limit)",
                       min=0.0, min_inclusive=False),
    gauges=Option(True, "record gauges ch5, ch7, ch9 and the runup maxima", type=bool),
    incident=Option(True, "the measured incident wave at x = 0 (false: a wall there, the "
                    "tank stays at rest: a well-balance check)", type=bool),
    riemann_solver=riemann_solver_option(),
)

#: refinement regions (x1, x2, y1, y2): finest level from the start
REGIONS = {
    "coast and valley": (4.0, TANK[0], 0.6, TANK[1]),
    "island": (3.2, 3.7, 1.4, 2.1),
}


# --------------------------------------------------------------------------- data
def bathymetry(data_dir=None) -> Topography:
    """The tank's survey points as a node-registered topography (see the docstring)."""
    r = datasets.okushiri_bathymetry(data_dir)
    ny, nx = r.z.shape
    if not (math.isclose((nx - 1) * r.dx, TANK[0]) and math.isclose((ny - 1) * r.dy, TANK[1])):
        raise ValueError(f"Okushiri bathymetry: {nx} x {ny} points at {r.dx} m do not span "
                         f"the tank {TANK}")
    return Topography(Raster(r.z, 0.0, 0.0, r.dx, r.dy, "node"), name="okushiri bathymetry")


def layout(dx_finest: float, mx: int, max_level: int):
    """``(Domain, (nx, ny) cells of the finest level)``: square trees of ``mx 2^max_level``
    finest cells, as few as cover the tank."""
    side = dx_finest * mx * 2**max_level
    ntrees = tuple(max(1, math.ceil(L / side - 1e-9)) for L in TANK)
    domain = Domain(lower=(0.0, 0.0), upper=(ntrees[0] * side, ntrees[1] * side),
                    ntrees=ntrees)
    return domain, (ntrees[0] * mx * 2**max_level, ntrees[1] * mx * 2**max_level)


def topography(domain: Domain, data_dir=None) -> TopographyStack:
    """The tank, and ``WALL_TOP`` beyond it (a coarser file: the tank takes precedence)."""
    (x0, y0), (x1, y1) = domain.lower, domain.upper
    wall = Raster(np.full((2, 2), WALL_TOP), x0, y0, x1 - x0, y1 - y0, "node")
    return TopographyStack([Topography(wall, "beyond the tank"), bathymetry(data_dir)])


# --------------------------------------------------------------------------- setup
def _options(overrides):
    o = merge_options(OPTIONS, overrides, "okushiri")
    if o["mx"] % 4:
        raise ValueError(f"mx={o['mx']} must be a multiple of 4")
    if not o["adaptive"]:
        o["min_level"] = o["max_level"]
    if o["max_level"] < o["min_level"]:
        raise ValueError(f"max_level ({o['max_level']}) < min_level ({o['min_level']})")
    return o


def setup(**overrides) -> Simulation:
    o = _options(overrides)
    domain, _ = layout(o["dx_finest"], o["mx"], o["max_level"])
    (x0, y0), (x1, y1) = domain.lower, domain.upper
    stack = topography(domain)
    setaux = make_setaux(stack, domain=(x0, x1, y0, y1))
    t_in, eta_in = datasets.okushiri_input_wave()
    wave = IncidentWave(t_in, eta_in, grav=GRAV, sea_level=0.0)
    top = o["max_level"]
    regions = [Region(x0, x1, y0, y1, 0, max(top - 1, o["min_level"]))]
    regions += [Region(*box, min_level=top, max_level=top) for box in REGIONS.values()]
    callbacks = []
    if o["gauges"]:
        callbacks.append(Gauges(GAUGES, fields=["surface", "depth"], units=SHALLOW_WATER_SI,
                                crs=CRS))
        n = max(2, round((RUNUP_BOX[1] - RUNUP_BOX[0]) / o["dx_finest"]) + 1)
        m = max(2, round((RUNUP_BOX[3] - RUNUP_BOX[2]) / o["dx_finest"]) + 1)
        callbacks.append(FGMax.grid(*RUNUP_BOX, n, m, dry_tolerance=o["dry_tolerance"],
                                    arrival_tol=1e-3))
    sim = geoclaw_simulation(
        setaux,
        domain=domain,
        sea_level=0.0,
        grav=GRAV,
        dry_tolerance=o["dry_tolerance"],
        manning=o["manning"],
        speed_limit=o["speed_limit"],
        wave_tolerance=o["wave_tolerance"],
        regions=regions,
        bc=side_conditions(x_lower=wave if o["incident"] else "wall"),
        **simulation_options(o),
        limiter="mc",
        transverse_waves=2,
        callbacks=callbacks,
        name="okushiri",
        riemann_solver=o["riemann_solver"],
    )
    sim.okushiri_options = o
    return sim


# --------------------------------------------------------------------------- validation
def gauge_series(sim) -> tuple[np.ndarray, dict]:
    """``(t, {gauge: surface elevation})`` recorded by the run's :class:`Gauges`."""
    g = next((cb for cb in sim.callbacks if isinstance(cb, Gauges)), None)
    if g is None:
        raise ValueError("the run recorded no gauges (option gauges=false)")
    data = g.data()
    t = np.asarray(g.times, dtype=np.float64)
    return t, {gid: data[gid]["surface"] for gid in g.ids}


def compare(t_model, eta_model, t_meas, eta_meas, window=WINDOW) -> dict:
    """RMS difference over ``window`` (the model interpolated to the measured times),
    and the errors of the peak (the largest value in the window) in height and time."""
    m = (t_meas >= window[0]) & (t_meas <= window[1])
    tm, em = t_meas[m], eta_meas[m]
    model = np.interp(tm, t_model, eta_model)
    w = (t_model >= window[0]) & (t_model <= window[1])
    if not (w.any() and m.any()):
        raise ValueError(f"no model or measured samples in the window {window} s "
                         f"(model to t = {t_model[-1]:.4g} s)")
    k_mod, k_meas = np.argmax(eta_model[w]), np.argmax(em)
    return {
        "rms": float(np.sqrt(np.mean((model - em) ** 2))),
        "peak_model": float(eta_model[w][k_mod]),
        "peak_measured": float(em[k_meas]),
        "peak_error": float(eta_model[w][k_mod] - em[k_meas]),
        "peak_time_model": float(t_model[w][k_mod]),
        "peak_time_measured": float(tm[k_meas]),
        "peak_time_error": float(t_model[w][k_mod] - tm[k_meas]),
    }


def best_shift(t_model, eta_model, t_meas, eta_meas, window=WINDOW, shifts=None):
    """The delay ``s`` of the model (``model(t + s)`` compared with ``measured(t)``; the
    sign of ``peak_time_error``: positive when the model is late) that minimises the RMS
    over the window, and that RMS (a diagnostic: is the misfit a delay?)."""
    shifts = np.arange(-1.0, 1.0001, 0.05) if shifts is None else shifts
    m = (t_meas >= window[0]) & (t_meas <= window[1])
    tm, em = t_meas[m], eta_meas[m]
    rms = [np.sqrt(np.mean((np.interp(tm + s, t_model, eta_model) - em) ** 2)) for s in shifts]
    k = int(np.argmin(rms))
    return float(shifts[k]), float(rms[k])


def runup(sim) -> dict | None:
    """Highest bed elevation wetted in the valley box, and where (fgmax grid)."""
    fg = next((cb for cb in sim.callbacks if isinstance(cb, FGMax)), None)
    if fg is None:
        return None
    res = fg.results()
    wet = res["max_depth"] > fg.dry_tolerance
    if not wet.any():
        return None
    bed = np.where(wet, res["bed"], -np.inf)
    k = np.unravel_index(np.argmax(bed), bed.shape)
    return {"runup_m": float(bed[k]), "x": float(res["x"][k]), "y": float(res["y"][k])}


def report(sim, out, plot: bool = True) -> dict:
    """Model vs measured gauges: ``gauges.csv``, ``gauges.png`` (when ``plot`` and
    pyvista is installed) and the error table."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t_mod, model = gauge_series(sim)
    t_meas, meas = datasets.okushiri_gauges()
    before = (t_meas >= DATUM_WINDOW[0]) & (t_meas <= DATUM_WINDOW[1])
    window = (WINDOW[0], min(WINDOW[1], float(t_mod[-1])))
    if window[1] <= window[0]:  # a short test run: compare what there is
        window = (0.0, float(t_mod[-1]))
    result = {"gauges": {}, "window_s": list(window)}
    for gid in GAUGES:
        offset = float(meas[gid][before].mean())
        raw = compare(t_mod, model[gid], t_meas, meas[gid], window)
        fixed = compare(t_mod, model[gid], t_meas, meas[gid] - offset, window)
        shift, rms_shift = best_shift(t_mod, model[gid], t_meas, meas[gid], window)
        result["gauges"][gid] = {
            **raw,
            "datum_offset": offset,
            "rms_datum_corrected": fixed["rms"],
            "peak_error_datum_corrected": fixed["peak_error"],
            "best_time_shift": shift,
            "rms_best_shift": rms_shift,
        }
    result["runup"] = runup(sim)
    # the series side by side at the measured times (0.05 s) up to the end of the run
    keep = t_meas <= t_mod[-1] + 1e-9
    with open(out / "gauges.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t"] + [f"{g}_{k}" for g in GAUGES for k in ("model", "measured")])
        for n in np.flatnonzero(keep):
            row = [f"{t_meas[n]:.3f}"]
            for gid in GAUGES:
                row += [f"{np.interp(t_meas[n], t_mod, model[gid]):.9e}", f"{meas[gid][n]:.6g}"]
            w.writerow(row)
    result["csv"] = str(out / "gauges.csv")
    files = []
    try:  # the gauge points for ParaView, beside the frames (same coordinates)
        g = next(cb for cb in sim.callbacks if isinstance(cb, Gauges))
        files.append(g.write_vtp(out / "gauges.vtp"))
    except ImportError:  # vtk is optional
        pass
    fg = next((cb for cb in sim.callbacks if isinstance(cb, FGMax)), None)
    if fg is not None:
        files += fg.write(out / "fgmax")
    result["files"] = [Path(f).name for f in files]
    result["coordinates"] = CRS
    png = None
    if plot:
        png = plot_gauges(out / "gauges.png", t_mod, model, t_meas[keep],
                          {g: v[keep] for g, v in meas.items()})
    if png is not None:
        result["png"] = str(png)
    return result


def plot_gauges(path, t_mod, model, t_meas, meas):
    """Three panels (one per gauge), model and measured surface elevation (mm) vs time;
    written offscreen with pyvista's 2D charts.  None when pyvista is missing."""
    try:
        import pyvista as pv
    except ImportError:
        return None
    p = pv.Plotter(off_screen=True, window_size=[1000, 1000], shape=(len(model), 1))
    for k, gid in enumerate(model):
        p.subplot(k, 0)
        chart = pv.Chart2D(x_label="t (s)", y_label="surface (mm)")
        chart.title = f"{gid} at {GAUGES[gid]}"
        chart.line(t_meas, 1000 * meas[gid], color="black", width=2, label="measured")
        chart.line(t_mod, 1000 * model[gid], color="tab:blue", width=2, label="forestpy")
        chart.x_range = [0.0, float(max(t_mod[-1], 1e-3))]
        p.add_chart(chart)
    p.screenshot(str(path))
    p.close()
    return Path(path)


if __name__ == "__main__":
    import json

    sim = setup().run()
    print(sim.summary())
    print(json.dumps(report(sim, Path("out/okushiri")), indent=1))
