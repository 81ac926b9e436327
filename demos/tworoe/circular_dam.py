"""The seed's internal circular dam break (de la Asunción et al. 2012, Sections 4 and 7):
two layers on [-5, 5]^2, H = 5, upper layer 4 m deep outside r = 1.5 and 0.5 m inside,
h2 = 5 - h1, r = rho1/rho2 = 0.998, walls, gamma = 0.9, to t = 0.1, on a Triangle mesh of
one of the seed's sizes.

    forestpy run demos/tworoe/circular_dam.py --out out/tworoe_dam
    forestpy run demos/tworoe/circular_dam.py --set cells=1001898 --set backend=gpu

Writes ``frame_NNNN.vtu`` + ``frame.pvd`` (each layer's depth and velocity, the
interface and the free surface), ``interface.png`` and ``report.json``: steps, wall
time, cell updates per second next to the seed's GTX 480 time for that mesh, each
layer's volume change, the radial symmetry of the interface.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from forestpy.solvers.tworoe import SEED_CELLS, TwoLayerSolver, disc_in_square
from forestpy.solvers.tworoe.output import FrameWriter, render_field

from forestpy.options import Option, merge_options

OPTIONS = dict(
    cells=Option(16040, "triangles (the seed's meshes: 4016 ... 3000948; within 0.5 %)",
                 min=64),
    scheme=Option("irroe", "projected flux", choices=("irroe", "ifcp")),
    precision=Option("float64", "arithmetic and storage", choices=("float64", "float32")),
    backend=Option("cpu", "where the steps run", choices=("cpu", "gpu")),
    order=Option("hilbert", "cell order", choices=("hilbert", "rcm", "none")),
    t_final=Option(0.1, "end time [s]", min=0.0),
    frames=Option(4, "frames after the initial one (0: none)", min=0),
    r=Option(0.998, "density ratio rho1/rho2", min=0.0, max=1.0, min_inclusive=False,
             max_inclusive=False),
)
RADIUS, H, H1_OUT, H1_IN = 1.5, 5.0, 4.0, 0.5
#: the seed's Table 2: one GTX 480, FP32, seconds to t = 0.1 (IR-Roe)
SEED_GTX480_S = dict(zip(SEED_CELLS, (0.0068, 0.032, 0.21, 1.49, 11.05, 32.08, 58.53)))


def setup(**overrides) -> TwoLayerSolver:
    o = merge_options(OPTIONS, overrides, "circular_dam")
    mesh = disc_in_square(o["cells"], half=5.0, radius=RADIUS, order=o["order"])
    r = np.hypot(mesh.centroid[:, 0], mesh.centroid[:, 1])
    h1 = np.where(r > RADIUS, H1_OUT, H1_IN)
    return TwoLayerSolver(mesh, h1=h1, h2=H - h1, H=H, r=o["r"], gamma=0.9, bc="wall",
                          scheme=o["scheme"], dtype=np.dtype(o["precision"]),
                          backend=o["backend"])


def radial_spread(mesh, values, rmax: float = 4.5, bins: int = 18, sectors: int = 8
                  ) -> float:
    """Largest spread (max - min) over ``sectors`` equal angular sectors of the
    area-weighted mean of ``values`` in each of ``bins`` annuli out to ``rmax`` (a
    symmetry measure that averages the mesh's cell-scale noise out)."""
    x, y = mesh.centroid[:, 0], mesh.centroid[:, 1]
    rad = np.hypot(x, y)
    b = np.minimum((rad / rmax * bins).astype(np.int64), bins)
    s = np.minimum(((np.arctan2(y, x) + np.pi) / (2 * np.pi) * sectors).astype(np.int64),
                   sectors - 1)
    key = b * sectors + s
    keep = b < bins
    n = bins * sectors
    w = np.bincount(key[keep], weights=mesh.area[keep], minlength=n)
    v = np.bincount(key[keep], weights=(mesh.area * values)[keep], minlength=n)
    mean = (v / np.where(w > 0, w, 1.0)).reshape(bins, sectors)
    full = (w.reshape(bins, sectors) > 0).all(axis=1)  # annuli with cells in every sector
    return float((mean.max(axis=1) - mean.min(axis=1))[full].max())


def main(out=None, **overrides) -> dict:
    """Run; with a folder ``out``, write the frames and return the report."""
    o = merge_options(OPTIONS, overrides, "circular_dam")
    t0 = time.perf_counter()
    sim = setup(**overrides)
    setup_s = time.perf_counter() - t0
    writer = FrameWriter(out) if out and o["frames"] else None
    if writer:
        writer.write(sim)
    times = (np.linspace(0.0, o["t_final"], o["frames"] + 1)[1:] if o["frames"]
             else [o["t_final"]])
    if o["t_final"] > 0:
        # compile and warm up on a copy (kept out of the timing): one short run
        warm = setup(**overrides)
        warm.run(min(1e-4, o["t_final"]))
    sim.prepare()  # GPU: the mesh and state to the device, outside the timing
    wall = 0.0
    for t in times:
        t1 = time.perf_counter()
        sim.run(float(t))
        wall += time.perf_counter() - t1
        if writer:
            writer.write(sim)
    f = sim.fields()
    n = sim.mesh.num_cells
    m = sim.masses()
    seed = SEED_GTX480_S.get(o["cells"])
    report = dict(
        cells=n, scheme=o["scheme"], precision=o["precision"], backend=o["backend"],
        order=o["order"], t=sim.t, steps=sim.steps, wall_s=wall, setup_s=setup_s,
        cell_updates_per_s=n * sim.steps / wall if wall > 0 else None,
        seed_gtx480_s=seed, speedup_vs_seed=(seed / wall if seed and wall > 0 else None),
        mass_rel_change=[abs(m[k] - sim.mass0[k]) / sim.mass0[k] for k in range(2)],
        h1_min=float(f["h1"].min()), h1_max=float(f["h1"].max()),
        interface_radial_spread=radial_spread(sim.mesh, f["interface"]),
        interface_jump=H1_OUT - H1_IN,
    )
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        try:  # the picture needs pyvista and an off-screen OpenGL (Mesa EGL)
            png = render_field(Path(out) / "interface.png", sim.mesh, f["interface"],
                               "interface elevation",
                               title=f"interface elevation at t = {sim.t:g} s "
                                     f"({n} triangles, {o['scheme']})")
            report["picture"] = png.name
        except Exception as e:  # noqa: BLE001 - no renderer: the report says why
            report["picture"] = None
            report["picture_error"] = f"{type(e).__name__}: {e}"
    return report


if __name__ == "__main__":
    print(json.dumps(main(out="out/tworoe_dam"), indent=1))
