"""Ship wake: a pressure pulse at constant speed over constant depth (linearised VBM).

The ship moves in +x at ``speed`` U; the transverse wave length is
``lambda0 = 2 pi U^2 / g``, ``k0 = g / U^2``.  The depth is set by ``k0h = g h / U^2``
(default 2, depth Froude number 0.71).  After ``t_final`` the wake half-angle is
measured from the computed field (:func:`wake_angle`, default: the peak of the angular
distribution of ``r zeta^2`` about the ship, :func:`polar_wake_angle`).

The vertical profile decides whether there is a Kelvin cusp at all.  The parabolic
profile's short waves tend to a finite speed ``sqrt(g h / 6)`` (58 % of U here), so its
ray angle grows monotonically to a 35 degree Mach-like limit and the measured angle
grows with resolution (23.6, 26.1, 27.3 degrees at 10, 16, 20 cells a wavelength).
The default is therefore the cosh profile tuned to ``kappa = 1.8 k0`` (exact
dispersion at ``k = kappa``, near the cusp's ``k ~ 1.4 k0``), whose stationary-phase
cusp is 19.21 degrees (:func:`cusp_angle`); the measured angle converges to it with
resolution.  References: Kelvin 19.47 degrees (deep water), 20.67 degrees for this depth
with the exact dispersion.

    python demos/boussinesq/ship_wake.py            # writes out/ship_wake/
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import numpy as np
from forestpy.extensions.boussinesq import VBM, dispersion_omega, solver_options

from forestpy.options import Option, merge_options

OPTIONS = dict(
    speed=Option(5.0, "ship speed U (m/s)", min=0.0, min_inclusive=False),
    k0h=Option(2.0, "depth in units of the transverse wavenumber: k0 h = g h / U^2",
               min=0.0, min_inclusive=False),
    cells_per_wavelength=Option(16, "cells per transverse wavelength 2 pi U^2 / g", min=4),
    length_wavelengths=Option(28.0, "domain length / wavelength", min=4.0),
    width_wavelengths=Option(14.0, "domain width / wavelength", min=2.0),
    t_wavelengths=Option(18.0, "distance sailed / wavelength", min=0.0, min_inclusive=False),
    ship_length=Option(1.0, "pulse length / wavelength (smooth: few too-fast short waves)",
                       min=0.0, min_inclusive=False),
    ship_beam=Option(0.5, "pulse beam / wavelength", min=0.0, min_inclusive=False),
    p0=Option(0.5, "peak pressure / rho (m^2/s^2)", min=0.0),
    sponge_wavelengths=Option(2.5, "sponge width / wavelength", min=0.0),
    kappa_k0=Option(
        1.8,
        "cosh profile tuned to kappa_k0 * k0; None: parabolic profile",
        min=0.0,
        min_inclusive=False,
        none_ok=True,
    ),
    **solver_options("out/ship_wake"),
)
G = 9.81


def setup(**overrides) -> VBM:
    o = merge_options(OPTIONS, overrides, "ship_wake")
    U = o["speed"]
    lam = 2 * math.pi * U * U / G
    dx = lam / o["cells_per_wavelength"]
    nx = int(round(o["length_wavelengths"] * lam / dx))
    ny = int(round(o["width_wavelengths"] * lam / dx))
    h = o["k0h"] * U * U / G
    x_start = (o["sponge_wavelengths"] + 1.0) * lam
    yc = 0.5 * ny * dx

    def path(t):
        return x_start + U * t, yc, 0.0

    sw = o["sponge_wavelengths"] * lam
    model = VBM(
        np.full((ny, nx), h),
        dx,
        path=path,
        ship={
            "length": o["ship_length"] * lam,
            "beam": o["ship_beam"] * lam,
            "p0": o["p0"],
            "ramp": 2 * lam / U,
        },
        sponge={"west": sw, "east": sw, "south": sw, "north": sw},
        cfl=o["cfl"],
        backend=o["backend"],
        rrb_level=o["rrb_level"],
        tol=o["tol"],
        kappa=None if o["kappa_k0"] is None else o["kappa_k0"] * G / (U * U),
    )
    model.options = o
    model.wavelength = lam
    model.t_final = o["t_wavelengths"] * lam / U
    return model


def sliding_max(a, width, axis):
    """Maximum over a centred window of ``width`` cells along ``axis``."""
    out = a.copy()
    r = width // 2
    for s in range(1, r + 1):
        out = np.maximum(out, np.roll(a, s, axis=axis))
        out = np.maximum(out, np.roll(a, -s, axis=axis))
    return out


def polar_wake_angle(zeta, x, y, ship_xy, r_min, r_max, y_max=np.inf, bin_deg=0.5, a_max=45.0):
    """Half-angle (degrees) of a wake as the peak of its angular energy distribution.

    In polar coordinates about the ship ``(r, a)`` (``a`` from the track, both sides
    folded), the mean of ``r zeta^2`` over ``r_min < r < r_max`` (and ``|y - y_ship| <
    y_max``) is binned in ``a`` (``bin_deg`` wide bins up to ``a_max``); the angle is the
    peak, refined by a parabola through the logarithms of the three bins around it.  The
    Kelvin cusps carry the largest amplitude (decaying like ``r^-1/3`` against ``r^-1/2``
    inside the wedge), so the peak is sharp and, averaged over all radii, insensitive to
    the local phase.  The ship moves in ``+x``; returns ``(angle, bins, energy)``.
    """
    xs, ys = ship_xy
    X, Y = np.meshgrid(x, y)
    xi, eta = xs - X, np.abs(Y - ys)
    r = np.hypot(xi, eta)
    sel = (xi > 0) & (r > r_min) & (r < r_max) & (eta < y_max)
    a = np.degrees(np.arctan2(eta[sel], xi[sel]))
    w = r[sel] * zeta[sel] ** 2
    edges = np.arange(0.0, a_max + 0.5 * bin_deg, bin_deg)
    num, _ = np.histogram(a, edges, weights=w)
    cnt, _ = np.histogram(a, edges)
    E = num / np.maximum(cnt, 1)
    centres = 0.5 * (edges[1:] + edges[:-1])
    if not (E > 0).any():
        raise RuntimeError("no wave energy in the measuring annulus")
    i = int(np.argmax(E))
    peak = centres[i]
    if 0 < i < len(E) - 1 and (E[i - 1 : i + 2] > 0).all():
        lm, l0, lp = np.log(E[i - 1 : i + 2])
        den = lm - 2 * l0 + lp
        if den < 0:
            peak += 0.5 * bin_deg * (lm - lp) / den
    return float(peak), centres, E


def wake_angle(model, zeta=None, method="polar", frac=0.5):
    """Half-angle (degrees) of the computed wake, and the fit data.

    ``method="polar"`` (default): :func:`polar_wake_angle` over the annulus
    ``4 lambda0 < r < 0.55 x`` (``x`` the distance sailed outside the sponge).  The
    older line fits: in the ship's frame, the wave envelope (sliding maximum of ``|zeta|`` over one
    wavelength along the track) is taken in every cross-section ``3 lambda0`` to
    ``~0.55 U t`` behind the ship.  On each side, ``method="argmax"`` takes the lateral
    position of the envelope's maximum (the Kelvin cusps carry the largest amplitude);
    ``method="edge"`` the outermost position where it still reaches ``frac`` of the
    section's maximum (envelope also smoothed over 3 cells across).  A straight line
    (free intercept) through these points gives ``tan(angle)``.
    """
    zeta = model.field("zeta") if zeta is None else zeta
    lam, dx = model.wavelength, model.dx
    xs, ys, _ = model.path(model.t)
    sw = model.options["sponge_wavelengths"] * lam
    if method == "polar":
        r_max = 0.55 * (xs - model.x[0] - sw)
        if r_max < 6 * lam:
            raise RuntimeError("wake too short to measure its angle: increase t_wavelengths")
        ang, bins, E = polar_wake_angle(
            zeta, model.x, model.y, (xs, ys), 4 * lam, r_max, 0.5 * model.ny * dx - sw
        )
        return ang, {"bins_deg": bins.tolist(), "energy": E.tolist(), "intercept": 0.0}
    env = sliding_max(np.abs(zeta), max(1, int(round(lam / dx))), axis=1)
    if method == "edge":
        env = sliding_max(env, 3, axis=0)
    elif method != "argmax":
        raise ValueError(f"unknown method {method!r}; valid: polar, argmax, edge")
    xi = xs - model.x  # distance behind the ship
    xi_max = min(0.55 * (xs - model.x[0] - sw), xs - model.x[0] - sw - lam)
    cols = np.nonzero((xi > 3 * lam) & (xi < xi_max))[0]
    eta = model.y - ys
    pts = []
    for side in (1, -1):
        rows = np.nonzero((side * eta > 0.5 * lam) & (np.abs(eta) < 0.5 * model.ny * dx - sw))[0]
        for i in cols:
            e = env[rows, i]
            if method == "argmax":
                j = rows[np.argmax(e)]
            else:
                ok = rows[e >= frac * e.max()]
                j = ok[np.argmax(np.abs(eta[ok]))]
            pts.append((xi[i], abs(eta[j])))
    pts = np.array(pts)
    if len(pts) < 4:
        raise RuntimeError("wake too short to measure its angle: increase t_wavelengths")
    slope, icpt = np.polyfit(pts[:, 0], pts[:, 1], 1)
    return math.degrees(math.atan(slope)), {
        "xi": pts[:, 0].tolist(),
        "eta": pts[:, 1].tolist(),
        "intercept": float(icpt),
    }


def ray_angles(omega, U, theta=None):
    """Ray angle (degrees) of the steady ship-wave pattern against the wave direction
    ``theta`` (radians) for a dispersion ``omega(k)``: waves at angle theta have phase
    speed U cos(theta); NaN where no wave is steady.  Returns ``(theta, beta)``."""
    theta = np.linspace(0.005, 1.45, 580) if theta is None else np.asarray(theta)
    beta = np.full(len(theta), np.nan)
    for n, th in enumerate(theta):
        c = U * math.cos(th)
        lo, hi = 1e-8, 1e4
        if omega(lo) / lo < c:
            continue
        for _ in range(60):  # bisection in log k to ~1e-7 relative
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if omega(mid) / mid > c else (lo, mid)
        k = lo
        dk = 1e-6 * k
        ng = (omega(k + dk) - omega(k - dk)) / (2 * dk) / (omega(k) / k)
        t = math.tan(th)
        beta[n] = math.degrees(math.atan(ng * t / (1 + t * t - ng)))
    return theta, beta


def cusp_angle(omega, U):
    """The cusp of a dispersion relation: the first local maximum of the ray angle
    over the wave direction (NaN if none).  Deep water: 19.47 degrees.  For the
    parabolic VBM at k0 h = 2 the ray angle grows monotonically up to the Mach angle
    ``asin(c_inf / U)`` of its short waves (phase speed -> ``c_inf = sqrt(g h / 6)``):
    no Kelvin cusp, the first maximum is that ~35 degree limit."""
    _, b = ray_angles(omega, U)
    for i in range(1, len(b) - 1):
        if np.isfinite(b[i - 1 : i + 2]).all() and b[i] >= b[i - 1] and b[i] > b[i + 1]:
            return float(b[i])
    return float("nan")


def stationary_phase_angle(omega, U, theta=None):
    """Largest ray angle (degrees) of the steady ship-wave pattern for a dispersion
    ``omega(k)``: waves at angle theta have phase speed U cos(theta)."""
    best = 0.0
    for th in np.linspace(0.02, 1.4, 400) if theta is None else theta:
        c = U * math.cos(th)
        lo, hi = 1e-8, 1e4
        if omega(lo) / lo < c:
            continue
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if omega(mid) / mid > c else (lo, mid)
        k = lo
        dk = 1e-6 * k
        n = (omega(k + dk) - omega(k - dk)) / (2 * dk) / (omega(k) / k)
        t = math.tan(th)
        best = max(best, math.degrees(math.atan(n * t / (1 + t * t - n))))
    return best


def main(out=None, **overrides) -> dict:
    """Run the demo, write ``options_used.json``, ``summary.json`` and ``zeta.npz`` into
    ``out`` (default ``out/ship_wake``) and return the summary."""
    if out is not None:
        overrides["out"] = str(out)
    model = setup(**overrides)
    o = model.options
    out = pathlib.Path(o["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "options_used.json").write_text(json.dumps(o, indent=1))
    t0 = time.perf_counter()
    model.run(model.t_final)
    wall = time.perf_counter() - t0
    zeta = model.field("zeta")
    angle, fit = wake_angle(model, zeta)
    U, h = o["speed"], model.depth.max()
    exact = stationary_phase_angle(lambda k: math.sqrt(G * k * math.tanh(k * h)), U)
    kap = model.kappa
    model_cusp = cusp_angle(lambda k: float(dispersion_omega(k, h, G, kap)), U)
    res = {
        "angle_deg": angle,
        "kelvin_deg": math.degrees(math.asin(1 / 3)),
        "exact_dispersion_angle_deg": exact,
        "model_cusp_deg": model_cusp,
        "profile": "parabolic" if kap is None else f"cosh, kappa = {o['kappa_k0']} k0",
        "depth_froude": U / math.sqrt(G * h),
        "grid": [model.nx, model.ny],
        "steps": model.steps,
        "dt": model.dt,
        "cg_iterations_mean": float(np.mean(model.iterations)),
        "cg_iterations_max": int(np.max(model.iterations)),
        "wall_s": wall,
        "solve_s": model.timers["solve"],
        "explicit_s": model.timers["explicit"],
        "backend": model.backend.name,
        "fit_intercept": fit["intercept"],
    }
    (out / "summary.json").write_text(json.dumps(res, indent=1))
    np.savez_compressed(out / "zeta.npz", zeta=zeta, x=model.x, y=model.y)
    return res


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
