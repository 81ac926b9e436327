r"""Dam break through an idealised city (Soares-Frazao & Zech 2008), GeoClaw-like AMR.

The laboratory experiment of S. Soares-Frazao and Y. Zech, "Dam-break flow through an
idealised city", *J. Hydraulic Research* 46(5) (2008) 648-658, in the "aligned" layout,
as restated for HWFV1 in section 3.3 of the GPU-HWFV1 paper (``shared/seeds/000``) and
set up by its authors' scripts (``al0vya/gpu-mwdg2``, ``cases/25-blocks``):

* a smooth horizontal channel 36 m x 3.6 m (Manning ``n = 0.01``), walls on the sides
  and at the upstream end, free outflow (zero-gradient) at the downstream end;
* a wall barrier across the channel, 0.8 m thick (``0 <= x <= 0.8``), made of two
  blocks leaving a 1 m wide gate on the channel axis; the gate is removed at t = 0;
* upstream of the barrier (``x < 0``) water 0.4 m deep, downstream 0.011 m, at rest;
* the city: 5 x 5 square blocks of 0.3 m with 0.1 m streets, aligned with the flow,
  centred on the channel axis, from ``x = 5.0`` to ``6.9`` m and ``|y| <= 0.95`` m;
* barrier and block tops at 2 m (above any water); 10 s.

Coordinates: ``x`` along the channel from the upstream face of the barrier, ``y``
across it from the channel **centreline** (the city's axis).  The measured profiles of
depth and velocity lie along ``y = 0.2 m``: the centre line of the street between the
middle row of blocks (``|y| <= 0.15``) and the next one (``0.25 <= y <= 0.55``).

Grid (the DEM of the seed, 0.02 m, 1800 x 180 cells, built in code): every face of the
barrier, the gate and the blocks lies on a face of the 0.02 m cells.  That needs two
shifts of 1 cm (the experiment is symmetric about ``y = 0``, but a 15-cell block
centred on ``y = 0`` puts its faces half a cell off the faces of a 180-cell channel):
the side walls are at ``y = -1.81`` and ``1.79`` and the gate spans
``-0.51 <= y <= 0.49`` (the city and the measurement line keep their nominal
coordinates), and the upstream wall is at ``x = -6.76`` (a 6.76 m reservoir instead of
6.75 m, +0.15 % of its volume; 6.75 m is not a whole number of 0.02 m cells), so the
channel ends at ``x = 29.24``.  The GPU-HWFV1 authors' DEM script shifts the same
way (its cell values are its nodes' values, 1 cm off the nominal faces).

Bed: the exact cell average of the piecewise-constant elevation (0 in the channel,
2 m on the barrier, the blocks and outside the channel) at every level
(:func:`bed_average`), so a 0.02 m cell is 0 or 2 m exactly.  The quadtree covers more
than the channel (trees of ``mx 2^max_level`` cells of ``dx_finest``): the part
upstream of ``x = -6.76`` and north of ``y = 1.79`` is ground at 2 m, dry, so the
upstream end and the north side act as walls; the domain's south side (``y = -1.81``)
is a wall, its east side (``x = 29.24``) is the outflow.

Adaptivity (default levels 0-3: 0.16, 0.08, 0.04, 0.02 m; ``adaptive=false`` runs the
uniform finest grid): a patch is refined where the speed exceeds ``speed_tolerance``
(GeoClaw's speed flag; the reservoir and the 0.011 m layer start at rest, so the grid
follows the dam-break wave and the rarefaction), and with ``flag_buffer`` the patches
touching a flagged patch are flagged too (GeoClaw's buffer zone around flagged cells,
at patch granularity: the front then always runs into fine patches).  Refinement
regions keep the barrier with the gate and the city at the finest level for the whole
run, and keep the north wall and the upstream wall on levels whose cell faces lie on
them (a coarse cell astride a wall would average channel and wall).

The run records the depth and the speed along ``y = 0.2 m`` at ``profile_time``
(6 s, the time of the published profiles): the steps land on it exactly, and the
state is sampled at the centres of the finest cells (``Simulation.sample``).
``report(sim, out)`` (called by ``forestpy run``) writes ``profiles.npz``,
``profiles.csv`` and ``profiles.png`` and returns the volume balance, the counts at the
profile time and at the end, and the RMS difference to the measured profiles
(``demos/geoclaw/data/urban_dam_break``, see its README).

    forestpy run demos/geoclaw/urban_dam_break.py --out out/urban
    forestpy run demos/geoclaw/urban_dam_break.py --set adaptive=false --out out/urban_uniform
    forestpy run demos/geoclaw/urban_dam_break.py --set t_final=6 --out out/urban_6s

References: S. Soares-Frazao, Y. Zech, Dam-break flow through an idealised city,
*J. Hydraulic Res.* 46 (2008) 648-658; S. Soares-Frazao, Y. Zech, Experimental study of
dam-break flow against an isolated obstacle, *J. Hydraulic Res.* 45 (2007) 27-36 (the
same laboratory; its public set-ups have the gate 6.75 m from the upstream end, 0.8 m
thick, 1 m wide).  Choices and doubts (channel length, side banks, the 1 cm shifts, the
layout) are listed in ``docs/geoclaw_demos.md``.
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import numba
import numpy as np
from forestpy.extensions.geoclaw.model import geoclaw_simulation
from forestpy.extensions.geoclaw.refinement import Region

from forestpy import Domain, Simulation
from forestpy.backend import array_module
from forestpy.options import Option, merge_options, simulation_options, standard_options

# --------------------------------------------------------------------------- geometry
DX = 0.02  #: cell size of the DEM (m)
X_UP, X_OUT = -6.76, 29.24  #: upstream wall and outflow end of the channel (m)
Y_S, Y_N = -1.81, 1.79  #: side walls (m); the channel is 3.6 m wide
BARRIER = (0.0, 0.8)  #: x range of the wall barrier (m)
GATE = (-0.51, 0.49)  #: y range of the gate (m), 1 m wide
BLOCK = 0.3  #: side of a city block (m)
STREET = 0.1  #: width of a street (m)
CITY_X0, CITY_Y0 = 5.0, -0.95  #: lower-left corner of the city (m)
TOP = 2.0  #: elevation of the barrier, the blocks and the ground outside the channel (m)
H_UP, H_DOWN = 0.4, 0.011  #: initial depths upstream (x < 0) and downstream (m)
MANNING = 0.01
GRAV = 9.81
PROFILE_Y = 0.2  #: the measurement line (m from the centreline)
PROFILE_X = (3.0, 9.0)  #: x range of the recorded profiles (m)
PROFILE_T = 6.0  #: time of the measured profiles (s)
DATA = Path(__file__).resolve().parent / "data" / "urban_dam_break"
#: the initial water volume (m^3): reservoir 6.76 x 3.6 x 0.4, downstream 0.011 over the
#: channel (29.24 x 3.6) less the barrier's two blocks (0.8 x 2.6) and 25 blocks of 0.09
VOLUME = (-X_UP * (Y_N - Y_S) * H_UP
          + (X_OUT * (Y_N - Y_S) - (BARRIER[1] - BARRIER[0]) * (Y_N - Y_S - (GATE[1] - GATE[0]))
             - 25 * BLOCK**2) * H_DOWN)


def blocks() -> list[tuple[float, float, float, float]]:
    """The 25 city blocks ``(x0, x1, y0, y1)``, row by row from the south."""
    pitch = BLOCK + STREET
    return [(CITY_X0 + i * pitch, CITY_X0 + i * pitch + BLOCK,
             CITY_Y0 + j * pitch, CITY_Y0 + j * pitch + BLOCK)
            for j in range(5) for i in range(5)]


def obstacles() -> list[tuple[float, float, float, float]]:
    """The rectangles at ``TOP`` inside the channel: the barrier's two blocks (south,
    north) and the 25 city blocks."""
    return [(BARRIER[0], BARRIER[1], Y_S, GATE[0]), (BARRIER[0], BARRIER[1], GATE[1], Y_N),
            *blocks()]


_RECTS = np.array(obstacles())


@numba.njit(inline="always")
def _overlap(lo, hi, a, b):  # pragma: no cover - compiled
    """Length of ``[lo, hi] n [a, b]``, snapped to 0 and to ``hi - lo`` within 1e-9 of
    the cell length: faces that meet up to round-off count as meeting."""
    length = hi - lo
    o = min(hi, b) - max(lo, a)
    tol = 1e-9 * abs(length)
    if o < tol:
        return 0.0
    if length - o < tol:
        return length
    return o


@numba.njit
def _bed_average(xlo, xhi, ylo, yhi, rects, channel, top, out):  # pragma: no cover
    x_up, y_s, y_n = channel
    for k in range(xlo.size):
        lx, ly = xhi[k] - xlo[k], yhi[k] - ylo[k]
        high = lx * ly - (_overlap(xlo[k], xhi[k], x_up, np.inf)
                          * _overlap(ylo[k], yhi[k], y_s, y_n))  # outside the channel
        for r in range(rects.shape[0]):
            if (xhi[k] <= rects[r, 0] or xlo[k] >= rects[r, 1] or yhi[k] <= rects[r, 2]
                    or ylo[k] >= rects[r, 3]):
                continue
            high += (_overlap(xlo[k], xhi[k], rects[r, 0], rects[r, 1])
                     * _overlap(ylo[k], yhi[k], rects[r, 2], rects[r, 3]))
        out[k] = top * (high / (lx * ly))


def bed_average(xlo, xhi, ylo, yhi) -> np.ndarray:
    """Exact average of the bed over the cells ``[xlo, xhi] x [ylo, yhi]`` (arrays,
    broadcast together): 0 in the channel (which continues beyond the outflow end, for
    ghost cells), ``TOP`` on the obstacles and outside the channel.  A Numba loop over
    the cells (it runs over every cell of every patch at each regrid)."""
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64)
                                   for a in (xlo, xhi, ylo, yhi)))
    shape = arrays[0].shape
    xlo, xhi, ylo, yhi = (np.ascontiguousarray(a).ravel() for a in arrays)
    out = np.empty(xlo.size)
    _bed_average(xlo, xhi, ylo, yhi, _RECTS, np.array([X_UP, Y_S, Y_N]), TOP, out)
    return out.reshape(shape)


def dem(dx: float = DX):
    """The channel's DEM: ``(x_centres, y_centres, z[j, i])`` on cells of ``dx`` (the
    seed's 0.02 m: 1800 x 180 cells) with exact cell averages."""
    nx, ny = round((X_OUT - X_UP) / dx), round((Y_N - Y_S) / dx)
    xe, ye = X_UP + dx * np.arange(nx + 1), Y_S + dx * np.arange(ny + 1)
    z = bed_average(xe[None, :-1], xe[None, 1:], ye[:-1, None], ye[1:, None])
    return 0.5 * (xe[1:] + xe[:-1]), 0.5 * (ye[1:] + ye[:-1]), z


def eta_init(x, y):
    """Initial surface: 0.4 m upstream of the barrier's face, 0.011 m downstream."""
    return np.where(np.asarray(x) < BARRIER[0], H_UP, H_DOWN) + 0.0 * np.asarray(y)


def setaux(x, y, dx, dy):
    """Bottom for :func:`geoclaw_simulation`: exact cell averages (ghosts included)."""
    return bed_average(x - 0.5 * dx, x + 0.5 * dx, y - 0.5 * dy, y + 0.5 * dy)


def measured_profiles(data_dir=None) -> dict:
    """The measured profiles along ``y = 0.2 m`` at 6 s (Soares-Frazao & Zech 2008, from
    the GPU-HWFV1 authors' files; see ``data/urban_dam_break/README.md``):
    ``{"depth": (x, h), "velocity": (x, speed)}`` in m and m/s."""
    folder = Path(data_dir) if data_dir is not None else DATA
    out = {}
    for name, file in (("depth", "depth_6s.csv"), ("velocity", "velocity_6s.csv")):
        a = np.loadtxt(folder / file, delimiter=",", comments="#", skiprows=1, ndmin=2)
        out[name] = (a[:, 0].copy(), a[:, 1].copy())
    return out


def profile_x(dx: float = DX) -> np.ndarray:
    """Centres of the ``dx`` cells along the profile (``PROFILE_X``): the cells of every
    grid here are anchored at the outflow end ``X_OUT``."""
    k0 = math.ceil((PROFILE_X[0] - X_OUT) / dx - 0.5 - 1e-9)
    k1 = math.floor((PROFILE_X[1] - X_OUT) / dx - 0.5 + 1e-9)
    return X_OUT + (np.arange(k0, k1 + 1) + 0.5) * dx


def speed_of(h, hu, hv, dry_tolerance: float):
    """Speed ``|q| / h`` where ``h > dry_tolerance``, NaN where dry."""
    h = np.asarray(h, dtype=np.float64)
    wet = h > dry_tolerance
    return np.where(wet, np.hypot(hu, hv) / np.where(wet, h, 1.0), np.nan)


def compare_measured(x, depth, speed, measured=None) -> dict:
    """RMS and largest differences (model minus measured) at the measured points, the
    model profile interpolated linearly in x; points where the model is dry (NaN speed)
    are left out (``points`` counts those compared; None values when there is none)."""
    measured = measured_profiles() if measured is None else measured
    out = {}
    for name, model in (("depth", depth), ("velocity", speed)):
        xm, vm = measured[name]
        d = np.interp(xm, x, model) - vm
        d = d[np.isfinite(d)]
        out[name] = {"points": int(d.size), "measured_points": len(xm),
                     "rms": float(np.sqrt(np.mean(d**2))) if d.size else None,
                     "max_abs": float(np.max(np.abs(d))) if d.size else None,
                     "mean": float(np.mean(d)) if d.size else None,
                     "measured_mean": float(np.mean(vm))}
    return out


# --------------------------------------------------------------------------- options
_standard = standard_options(mx=16, min_level=0, max_level=3, regrid_interval=2,
                             t_final=10.0, cfl=0.9)
_standard.pop("refine_threshold")  # the GeoClaw flags below replace it
OPTIONS = dict(
    **_standard,
    dx_finest=Option(DX, "cell size of the finest level (m); the blocks' faces are cell "
                     "faces for 0.02 (the DEM) and 0.01", min=0.0, min_inclusive=False),
    adaptive=Option(True, "adaptive grid (false: the uniform finest grid)", type=bool),
    manning=Option(MANNING, "Manning coefficient (s m^-1/3)", min=0.0),
    speed_tolerance=Option(0.05, "refine where the speed exceeds this (m/s)", min=0.0,
                           min_inclusive=False),
    flag_buffer=Option(True, "also flag the patches touching a flagged patch", type=bool),
    dry_tolerance=Option(1e-3, "depth (m) below which a cell is dry", min=0.0,
                         min_inclusive=False),
    boundary=Option("outflow", "downstream end: free outflow, or a wall (closed channel, "
                    "for volume checks)", choices=("outflow", "wall")),
    profile_time=Option(PROFILE_T, "time (s) of the recorded profiles (the measured: 6)",
                        min=0.0),
)


def _options(overrides) -> dict:
    o = merge_options(OPTIONS, overrides, "urban_dam_break")
    if o["mx"] % 4:
        raise ValueError(f"mx={o['mx']} must be a multiple of 4")
    if not o["adaptive"]:
        o["min_level"] = o["max_level"]
    if o["max_level"] < o["min_level"]:
        raise ValueError(f"max_level ({o['max_level']}) < min_level ({o['min_level']})")
    return o


def layout(dx_finest: float, mx: int, max_level: int) -> Domain:
    """Square trees of ``mx 2^max_level`` finest cells, as few as cover the channel,
    anchored at the outflow end (east) and the south wall."""
    side = dx_finest * mx * 2**max_level
    nx = max(1, math.ceil((X_OUT - X_UP) / side - 1e-9))
    ny = max(1, math.ceil((Y_N - Y_S) / side - 1e-9))
    return Domain(lower=(X_OUT - nx * side, Y_S), upper=(X_OUT, Y_S + ny * side),
                  ntrees=(nx, ny))


def _aligned_level(distance: float, dx_finest: float, max_level: int) -> int:
    """The coarsest level whose cell faces include a line ``distance`` from the domain's
    edge (a line between finest cells; max_level when it is not even that)."""
    n = round(distance / dx_finest)
    if not math.isclose(n * dx_finest, distance, abs_tol=1e-9):
        return max_level
    k = 0
    while k < max_level and n % 2 ** (k + 1) == 0:
        k += 1
    return max_level - k


def regions(domain: Domain, o: dict) -> list[Region]:
    """Barrier with gate and city at the finest level; the north and upstream walls on
    levels whose faces lie on them (see the module docstring)."""
    top, dx = o["max_level"], o["dx_finest"]
    (x0, y0), (x1, y1) = domain.lower, domain.upper
    out = [Region(BARRIER[0], BARRIER[1], Y_S, Y_N, min_level=top),
           Region(CITY_X0, CITY_X0 + 5 * BLOCK + 4 * STREET,
                  CITY_Y0, CITY_Y0 + 5 * BLOCK + 4 * STREET, min_level=top)]
    north = _aligned_level(Y_N - y0, dx, top)
    if y1 > Y_N + 1e-9 and north > o["min_level"]:
        out.append(Region(x0, x1, Y_N - 0.5 * dx, Y_N + 0.5 * dx, min_level=north))
    up = _aligned_level(X_UP - x0, dx, top)
    if x0 < X_UP - 1e-9 and up > o["min_level"]:
        out.append(Region(X_UP - 0.5 * dx, X_UP + 0.5 * dx, y0, y1, min_level=up))
    return out


def _buffered(flow_flags, backend):
    """``flow_flags(q, aux, geom, t, relax)`` also true on the patches that touch a
    patch where it is true (faces or corners); an array of the backend's module, as
    the wrapped function's."""

    def flags(q, aux, geom, t, relax):
        f = np.asarray(backend.to_host(flow_flags(q, aux, geom, t, relax)), dtype=bool)
        if not f.any() or f.all():
            return array_module(q).asarray(f)
        x0, y0 = np.asarray(geom.xlower), np.asarray(geom.ylower)
        x1, y1 = x0 + geom.mx * np.asarray(geom.dx), y0 + geom.my * np.asarray(geom.dy)
        tol = 1e-9 * float(np.max(x1 - x0))
        k = np.flatnonzero(f)
        touch = ((x0[:, None] <= x1[k][None] + tol) & (x1[:, None] >= x0[k][None] - tol)
                 & (y0[:, None] <= y1[k][None] + tol) & (y1[:, None] >= y0[k][None] - tol))
        return array_module(q).asarray(f | touch.any(axis=1))

    return flags


def setup(**overrides) -> Simulation:
    """The :class:`~forestpy.simulation.Simulation` of the experiment (``OPTIONS``);
    ``sim.urban`` holds the options and the profile recorder."""
    o = _options(overrides)
    domain = layout(o["dx_finest"], o["mx"], o["max_level"])
    profile = ProfileRecorder(o["profile_time"], o["dx_finest"], o["dry_tolerance"])
    bc = {"x_lower": "wall", "y_lower": "wall", "y_upper": "wall",
          "x_upper": "extrap" if o["boundary"] == "outflow" else "wall"}
    sim = geoclaw_simulation(
        setaux,
        domain=domain,
        eta_init=eta_init,
        sea_level=H_DOWN,
        grav=GRAV,
        dry_tolerance=o["dry_tolerance"],
        manning=o["manning"],
        wave_tolerance=None,
        speed_tolerance=o["speed_tolerance"],
        regions=regions(domain, o),
        bc=bc,
        **simulation_options(o),
        callbacks=[profile],
        name="urban_dam_break",
    )
    if o["flag_buffer"] and o["max_level"] > o["min_level"]:
        # the flow criteria of the flags object feed both its refinement and its
        # coarsening flags (the latter with halved tolerances)
        ref = sim.geoclaw_refinement
        ref._flow_flags = _buffered(ref._flow_flags, sim.backend)
    sim.urban = dict(options=o, profile=profile)
    return sim


# --------------------------------------------------------------------------- recording
class ProfileRecorder:
    """Callback: at ``time`` (the steps land on it) sample depth and speed along
    ``y = 0.2 m`` at the centres of the finest cells between ``PROFILE_X``, and note the
    clock, steps, cell updates, patches and volume then.  ``result`` is None until
    then (and stays None when the run ends before)."""

    def __init__(self, time_s: float, dx_finest: float, dry_tolerance: float):
        self.time = float(time_s)
        self.x = profile_x(dx_finest)
        self.dry_tolerance = float(dry_tolerance)
        self.result: dict | None = None
        self._wall0 = None

    def next_time(self, sim):
        return self.time if self.result is None and self.time > sim.t else None

    def on_start(self, sim) -> None:
        self._wall0 = time.perf_counter()
        self._check(sim)

    def on_step(self, sim) -> None:
        self._check(sim)

    def _check(self, sim) -> None:
        if self.result is not None or sim.t < self.time - 1e-12 * max(1.0, self.time):
            return
        q = sim.sample(self.x, np.full_like(self.x, PROFILE_Y))
        self.result = {
            "t": float(sim.t), "x": self.x.copy(), "depth": q[:, 0].copy(),
            "speed": speed_of(q[:, 0], q[:, 1], q[:, 2], self.dry_tolerance),
            "velocity_x": np.where(q[:, 0] > self.dry_tolerance,
                                   q[:, 1] / np.maximum(q[:, 0], 1e-300), np.nan),
            "steps": int(sim.steps), "cell_updates": int(sim.cell_updates),
            "wall_s": time.perf_counter() - self._wall0, "patches": int(sim.geom.npatch),
            "patches_per_level": {str(k): int(v) for k, v in sim.patches_per_level().items()},
            "cells": int(sim.geom.npatch) * sim.mx * sim.my,
            "volume": float(sim.totals()["h"]),
        }


def front_position(sim, y: float = 0.0, rise: float = 0.005) -> float:
    """Largest ``x`` along the line ``y`` (finest cell centres downstream of the
    barrier) where the depth exceeds the initial 0.011 m by ``rise``: the dam-break
    front."""
    dx = sim.urban["options"]["dx_finest"]
    x = np.arange(BARRIER[1] + 0.5 * dx, X_OUT, dx)
    h = sim.sample(x, np.full_like(x, y))[:, 0]
    wet = np.flatnonzero(h > H_DOWN + rise)
    return float(x[wet[-1]]) if len(wet) else float("nan")


# --------------------------------------------------------------------------- report
def report(sim, out, plot: bool = True) -> dict:
    """Profiles at the profile time (``profiles.npz``, ``profiles.csv``,
    ``profiles.png``), the volume balance and the counts."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    o = sim.urban["options"]
    rec = sim.urban["profile"].result
    v0, v1 = sim.totals_initial["h"], sim.totals()["h"]
    result = {
        "t_final": float(sim.t),
        "steps": int(sim.steps),
        "cell_updates": int(sim.cell_updates),
        "wall_s": float(sim.wall_s),
        "regrids": int(sim.regrids),
        "patches_final": int(sim.geom.npatch),
        "patches_per_level_final": {str(k): int(v) for k, v in sim.patches_per_level().items()},
        "volume_exact": VOLUME,
        "volume_initial": v0,
        "volume_final": v1,
        "volume_initial_minus_exact_relative": (v0 - VOLUME) / VOLUME,
        "volume_change_relative": (v1 - v0) / v0,
        "volume_outflow": v0 - v1 if o["boundary"] == "outflow" else 0.0,
        "volume_redistributed": float(sim.geoclaw_sources.volume_redistributed),
        "front_x_centreline": front_position(sim),
        "profile": None,
    }
    if rec is None:
        return result
    prof = {k: v for k, v in rec.items() if not isinstance(v, np.ndarray)}
    prof["volume_change_relative"] = (rec["volume"] - v0) / v0
    measured = measured_profiles()
    prof["vs_measured"] = compare_measured(rec["x"], rec["depth"], rec["speed"], measured)
    result["profile"] = prof
    np.savez(out / "profiles.npz", x=rec["x"], depth=rec["depth"], speed=rec["speed"],
             velocity_x=rec["velocity_x"], t=rec["t"], y=PROFILE_Y)
    with open(out / "profiles.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x_m", "depth_m", "speed_m_s", "velocity_x_m_s"])
        for row in zip(rec["x"], rec["depth"], rec["speed"], rec["velocity_x"]):
            w.writerow([f"{row[0]:.4f}"] + [f"{v:.9e}" for v in row[1:]])
    if plot:
        label = (f"GeoClaw-like, levels {o['min_level']}-{o['max_level']}"
                 if o["max_level"] > o["min_level"] else
                 f"GeoClaw-like, uniform {o['dx_finest']:g} m")
        png = plot_profiles(out / "profiles.png",
                            [dict(label=label, x=rec["x"], depth=rec["depth"],
                                  speed=rec["speed"])],
                            measured, t=rec["t"])
        if png is not None:
            result["png"] = str(png)
    return result


def plot_profiles(path, runs, measured=None, t: float = PROFILE_T, title=None):
    """Two panels (depth, speed along ``y = 0.2 m``), one line per run (dicts with
    ``label``, ``x``, ``depth``, ``speed``), the measurements as markers.  Written with
    matplotlib (Agg); None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.0), layout="constrained")
    styles = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1))]
    for k, run in enumerate(runs):
        for ax, key in zip(axes, ("depth", "speed")):
            ax.plot(run["x"], run[key], linestyle=styles[k % len(styles)], linewidth=1.4,
                    label=run["label"])
    if measured is not None:
        for ax, key in zip(axes, ("depth", "velocity")):
            xm, vm = measured[key]
            ax.plot(xm, vm, "o", color="black", markersize=5,
                    label="measured (Soares-Frazao & Zech 2008)")
    city = (CITY_X0, CITY_X0 + 5 * BLOCK + 4 * STREET)
    for ax, ylabel in zip(axes, ("depth h (m)", "speed |u| (m/s)")):
        ax.axvspan(*city, color="0.9", zorder=0)
        ax.set_xlabel("x (m) from the upstream face of the barrier")
        ax.set_ylabel(ylabel)
        ax.set_xlim(PROFILE_X[0] + 0.5, PROFILE_X[1] - 0.5)
        ax.set_ylim(bottom=0.0)
        ax.grid(True, alpha=0.3)
    axes[0].set_title(f"depth along y = {PROFILE_Y} m at t = {t:g} s (grey: the city)")
    axes[1].set_title(f"speed along y = {PROFILE_Y} m at t = {t:g} s")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)),
               fontsize=8, frameon=False)
    fig.suptitle(title or "Dam break through an idealised city (Soares-Frazao & Zech 2008)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    import json

    sim = setup().run()
    print(sim.summary())
    print(json.dumps(report(sim, Path("out") / "urban_dam_break"), indent=1))
