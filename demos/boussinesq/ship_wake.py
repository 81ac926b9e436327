"""Ship wake: a pressure pulse at constant speed over constant depth (linearised VBM).

The ship moves in +x at ``speed`` U; the transverse wave length is
``lambda0 = 2 pi U^2 / g``.  The depth is set by ``k0h = g h / U^2`` (default 2: the
parabolic VBM is 1 % accurate in phase speed up to kh ~ 2; its depth Froude number is
then 0.71).  After ``t_final`` the wake half-angle is measured from the computed field
(:func:`wake_angle`: lateral position of the largest wave envelope in every
cross-section behind the ship, straight-line fit).  Reference: Kelvin's 19.47 degrees (deep
water), and the angle of the stationary-phase wake for this depth (exact dispersion).

    python demos/boussinesq/ship_wake.py            # writes out/ship_wake/
"""

from __future__ import annotations

import json
import math
import pathlib
import time

import numpy as np
from forestpy.extensions.boussinesq import VBM

from forestpy.options import merge_options

OPTIONS = dict(
    speed=5.0,  # m/s
    k0h=2.0,  # g h / U^2
    cells_per_wavelength=16,
    length_wavelengths=28.0,  # domain length / lambda0
    width_wavelengths=14.0,
    t_wavelengths=18.0,  # distance sailed / lambda0
    ship_length=0.5,  # / lambda0
    ship_beam=0.25,  # / lambda0
    p0=0.5,  # peak pressure / rho (m^2/s^2)
    sponge_wavelengths=2.5,
    cfl=0.8,
    tol=1e-6,
    rrb_level=None,
    backend="cpu",
    out="out/ship_wake",
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


def wake_angle(model, zeta=None, method="argmax", frac=0.5):
    """Half-angle (degrees) of the computed wake, and the fit data.

    In the ship's frame, the wave envelope (sliding maximum of ``|zeta|`` over one
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
    env = sliding_max(np.abs(zeta), max(1, int(round(lam / dx))), axis=1)
    if method == "edge":
        env = sliding_max(env, 3, axis=0)
    elif method != "argmax":
        raise ValueError(f"unknown method {method!r}; valid: argmax, edge")
    xi = xs - model.x  # distance behind the ship
    sw = model.options["sponge_wavelengths"] * lam
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


def main(**overrides) -> dict:
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
    res = {
        "angle_deg": angle,
        "kelvin_deg": math.degrees(math.asin(1 / 3)),
        "exact_dispersion_angle_deg": exact,
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
