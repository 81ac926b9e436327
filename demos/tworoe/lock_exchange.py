"""Lock exchange in a channel of triangles: dense water (the lower layer) fills the left
half, light water (the upper layer) the right half, each with a thin film of the other
(``eps`` of the depth, the solver needs both layers everywhere), flat surface, at rest,
walls.  Released at t = 0, the dense water runs right under the light water and the
light water left over it: two internal bores and the exchange flow between them.

    forestpy run demos/tworoe/lock_exchange.py --out out/tworoe_lock
    forestpy run demos/tworoe/lock_exchange.py --set nx=400 --set scheme=ifcp

Validation: the channel's column averages of the interface against a 1D solution with
the same flux on ``reference_cells`` cells (:mod:`forestpy.solvers.tworoe.reference`),
and the bore positions (where the interface crosses mid-depth ... the films) of both.
Writes ``frame_NNNN.vtu`` + ``frame.pvd``, ``interface.png`` (the profile along the
channel, both solutions) and ``report.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from forestpy.solvers.tworoe import TwoLayerSolver, strip
from forestpy.solvers.tworoe.output import FrameWriter
from forestpy.solvers.tworoe.reference import solve_1d

from forestpy.options import Option, merge_options

OPTIONS = dict(
    nx=Option(200, "columns of rectangles along the channel (two triangles each)", min=8),
    ny=Option(4, "rows across the channel", min=1),
    length=Option(10.0, "channel length [m] (depth 1 m)", min=0.0, min_inclusive=False),
    eps=Option(0.05, "film thickness / depth on each side", min=0.0, max=0.5,
               min_inclusive=False, max_inclusive=False),
    r=Option(0.98, "density ratio rho1/rho2", min=0.0, max=1.0, min_inclusive=False,
             max_inclusive=False),
    scheme=Option("irroe", "projected flux", choices=("irroe", "ifcp")),
    t_final=Option(8.0, "end time [s]", min=0.0, min_inclusive=False),
    frames=Option(4, "frames after the initial one (0: none)", min=0),
    reference_cells=Option(2000, "cells of the 1D reference", min=16),
)
G = 9.81


def initial(x, length, eps):
    """Lower-layer depth: ``1 - eps`` left of the lock, ``eps`` right of it."""
    return np.where(x < 0.5 * length, 1.0 - eps, eps)


def setup(**overrides) -> TwoLayerSolver:
    o = merge_options(OPTIONS, overrides, "lock_exchange")
    width = o["length"] / o["nx"] * o["ny"]
    mesh = strip(o["nx"], o["ny"], o["length"], width)
    h2 = initial(mesh.centroid[:, 0], o["length"], o["eps"])
    return TwoLayerSolver(mesh, h1=1.0 - h2, h2=h2, H=1.0, r=o["r"], g=G, bc="wall",
                          scheme=o["scheme"], h_min=1e-4)


def columns(sim, nx, length):
    """Area-weighted column averages of the lower-layer depth (``nx`` columns)."""
    x = sim.mesh.centroid[:, 0]
    col = np.minimum((x / length * nx).astype(np.int64), nx - 1)
    a = sim.mesh.area
    return np.bincount(col, weights=a * sim.W[3], minlength=nx) / np.bincount(
        col, weights=a, minlength=nx)


def bores(x, h2, eps):
    """Positions of the two bores: the outermost points where the lower layer is
    halfway between the film and mid-depth (left: the light water's nose; right: the
    dense water's)."""
    lo = eps + 0.5 * (0.5 - eps)
    hi = 1.0 - lo
    right = x[np.flatnonzero(h2 > lo)[-1]] if (h2 > lo).any() else np.nan
    left = x[np.flatnonzero(h2 < hi)[0]] if (h2 < hi).any() else np.nan
    return float(left), float(right)


def main(out=None, **overrides) -> dict:
    o = merge_options(OPTIONS, overrides, "lock_exchange")
    sim = setup(**overrides)
    writer = FrameWriter(out) if out and o["frames"] else None
    if writer:
        writer.write(sim)
    t0 = time.perf_counter()
    for t in (np.linspace(0.0, o["t_final"], o["frames"] + 1)[1:] if o["frames"]
              else [o["t_final"]]):
        sim.run(float(t))
        if writer:
            writer.write(sim)
    wall = time.perf_counter() - t0
    L, nx, eps = o["length"], o["nx"], o["eps"]
    xc = (np.arange(nx) + 0.5) * L / nx
    h2 = columns(sim, nx, L)
    nf = o["reference_cells"]
    xf = (np.arange(nf) + 0.5) * L / nf
    h2f0 = initial(xf, L, eps)
    t1 = time.perf_counter()
    ref = solve_1d(1.0 - h2f0, h2f0, np.ones(nf), L, o["t_final"], g=G, r=o["r"])
    ref_s = time.perf_counter() - t1
    # the reference averaged over the channel's columns (when nf is a multiple of nx)
    fine = (ref[2].reshape(nx, -1).mean(axis=1) if nf % nx == 0
            else np.interp(xc, xf, ref[2]))
    change = np.abs(fine - initial(xc, L, eps)).mean()
    m = sim.masses()
    gp = (1.0 - o["r"]) * G
    report = dict(
        cells=sim.mesh.num_cells, scheme=o["scheme"], t=sim.t, steps=sim.steps, wall_s=wall,
        reference_cells=nf, reference_s=ref_s,
        interface_l1_error=float(np.abs(h2 - fine).mean()),
        interface_l1_change=float(change),
        bores=bores(xc, h2, eps), bores_reference=bores(xf, ref[2], eps),
        internal_speed=float(np.sqrt(gp * 0.25)),  # sqrt(g' h1 h2 / H) at mid-depth
        mass_rel_change=[abs(m[k] - sim.mass0[k]) / sim.mass0[k] for k in range(2)],
        lower_layer_range=[float(sim.W[3].min()), float(sim.W[3].max())],
    )
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        try:
            report["picture"] = _picture(out / "interface.png", xc, h2, xf, ref[2], sim.t,
                                         o["scheme"]).name
        except Exception as e:  # noqa: BLE001 - no renderer: the report says why
            report["picture"] = None
            report["picture_error"] = f"{type(e).__name__}: {e}"
    return report


def _picture(png, xc, h2, xf, h2f, t, scheme):
    import os

    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")
    import pyvista as pv

    from forestpy.io.plot import add_line, line_chart

    pv.OFF_SCREEN = True
    p = pv.Plotter(off_screen=True, window_size=[1000, 600])
    chart = line_chart(title=f"lock exchange: interface at t = {t:.3g} s ({scheme})",
                       xlabel="x (m)", ylabel="interface height above the bottom (m)")
    add_line(chart, xf, h2f, color="black", label=f"1D reference ({len(xf)} cells)")
    add_line(chart, xc, h2, color="tab:blue", label="triangles, column averages")
    chart.y_range = [0.0, 1.0]
    p.add_chart(chart)
    p.screenshot(str(png))
    p.close()
    return Path(png)


if __name__ == "__main__":
    print(json.dumps(main(out="out/tworoe_lock"), indent=1))
