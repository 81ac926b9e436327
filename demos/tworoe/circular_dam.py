"""The seed's internal circular dam break (de la Asunción et al. 2012, Sections 4 and 7):
two layers on [-5, 5]^2, H = 5, upper layer 4 m deep outside r = 1.5 and 0.5 m inside,
h2 = 5 - h1, r = rho1/rho2 = 0.998, walls, gamma = 0.9, to t = 0.1, on a Triangle mesh of
one of the seed's sizes.

    forestpy run demos/tworoe/circular_dam.py --out out/tworoe_dam
    forestpy run demos/tworoe/circular_dam.py --set cells=1001898 --set backend=gpu
    mpirun -n 4 forestpy run demos/tworoe/circular_dam.py --set cells=3000948 \
        --set backend=gpu                     # one GPU per rank

Writes ``frame_NNNN.vtu`` + ``frame.pvd`` (each layer's depth and velocity, the
interface and the free surface), ``gauges.csv`` (on the x axis at r = 0, 1, 2, 3.5),
``interface.png`` and ``report.json``: steps, wall time, cell updates per second next
to the seed's GTX 480 time for that mesh, each layer's volume change, the radial
symmetry of the interface.

On more than one MPI rank (``mpirun -n N forestpy run ...``) the run is a
:class:`~forestpy.solvers.tworoe.distributed.DistributedSolver` over ``COMM_WORLD``:
the frames are ``frame_NNNN.pvtu`` and one ``.vtu`` piece per rank, the report's
totals and symmetry are reductions over the ranks (only the picture gathers the
interface elevation to rank 0), and the state is bitwise the serial run's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from forestpy.solvers.tworoe import SEED_CELLS, TwoLayerSolver, disc_in_square
from forestpy.solvers.tworoe.distributed import DistributedSolver
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
    gauges=Option(True, "gauges on the x axis at r = 0, 1, 2, 3.5 (gauges.csv)"),
    partition=Option("auto", "on several MPI ranks: METIS ('auto' when pymetis is "
                     "installed) or pieces of the Hilbert order", choices=("auto", "sfc")),
)
#: the gauges of the demo
GAUGES = {"r0": (0.0, 0.0), "r1": (1.0, 0.0), "r2": (2.0, 0.0), "r3.5": (3.5, 0.0)}
RADIUS, H, H1_OUT, H1_IN = 1.5, 5.0, 4.0, 0.5
#: the seed's Table 2: one GTX 480, FP32, seconds to t = 0.1 (IR-Roe)
SEED_GTX480_S = dict(zip(SEED_CELLS, (0.0068, 0.032, 0.21, 1.49, 11.05, 32.08, 58.53)))


def world():
    """``MPI.COMM_WORLD`` when launched on more than one rank, else ``None`` (a serial
    run never imports mpi4py)."""
    from forestpy.cli import mpi_world_size

    if mpi_world_size() > 1:
        from mpi4py import MPI

        return MPI.COMM_WORLD
    return None


def setup(comm=None, **overrides):
    """The solver: a :class:`TwoLayerSolver`, or on a communicator of more than one
    rank a :class:`DistributedSolver` (every rank builds the same mesh)."""
    o = merge_options(OPTIONS, overrides, "circular_dam")
    mesh = disc_in_square(o["cells"], half=5.0, radius=RADIUS, order=o["order"])
    r = np.hypot(mesh.centroid[:, 0], mesh.centroid[:, 1])
    h1 = np.where(r > RADIUS, H1_OUT, H1_IN)
    kw = dict(h1=h1, h2=H - h1, H=H, r=o["r"], gamma=0.9, bc="wall", scheme=o["scheme"],
              dtype=np.dtype(o["precision"]), backend=o["backend"])
    if comm is not None and comm.Get_size() > 1:
        return DistributedSolver(mesh, comm=comm, method=o["partition"], **kw)
    return TwoLayerSolver(mesh, **kw)


def radial_spread(mesh, values, rmax: float = 4.5, bins: int = 18, sectors: int = 8,
                  cells=None, comm=None) -> float:
    """Largest spread (max - min) over ``sectors`` equal angular sectors of the
    area-weighted mean of ``values`` in each of ``bins`` annuli out to ``rmax`` (a
    symmetry measure that averages the mesh's cell-scale noise out).  ``values`` are
    those of ``cells`` (default: all); with ``comm`` the sums are reduced over its
    ranks (each passing its own cells)."""
    cells = np.arange(mesh.num_cells) if cells is None else np.asarray(cells)
    x, y = mesh.centroid[cells, 0], mesh.centroid[cells, 1]
    area = mesh.area[cells]
    rad = np.hypot(x, y)
    b = np.minimum((rad / rmax * bins).astype(np.int64), bins)
    s = np.minimum(((np.arctan2(y, x) + np.pi) / (2 * np.pi) * sectors).astype(np.int64),
                   sectors - 1)
    key = b * sectors + s
    keep = b < bins
    n = bins * sectors
    w = np.bincount(key[keep], weights=area[keep], minlength=n)
    v = np.bincount(key[keep], weights=(area * values)[keep], minlength=n)
    if comm is not None:
        from mpi4py import MPI

        w, v = comm.allreduce(w, op=MPI.SUM), comm.allreduce(v, op=MPI.SUM)
    mean = (v / np.where(w > 0, w, 1.0)).reshape(bins, sectors)
    full = (w.reshape(bins, sectors) > 0).all(axis=1)  # annuli with cells in every sector
    return float((mean.max(axis=1) - mean.min(axis=1))[full].max())


def main(out=None, **overrides) -> dict:
    """Run; with a folder ``out``, write the frames, the gauges and the picture and
    return the report (on every rank; rank 0 writes the files that are not pieces)."""
    o = merge_options(OPTIONS, overrides, "circular_dam")
    comm = world()
    rank = 0 if comm is None else comm.Get_rank()
    t0 = time.perf_counter()
    sim = setup(comm, **overrides)
    setup_s = time.perf_counter() - t0
    writer = FrameWriter(out) if out and o["frames"] else None
    gauges = sim.add_gauges(GAUGES) if out and o["gauges"] else None
    if writer:
        writer.write(sim)
    times = (np.linspace(0.0, o["t_final"], o["frames"] + 1)[1:] if o["frames"]
             else [o["t_final"]])
    if o["t_final"] > 0:
        # compile and warm up on a copy (kept out of the timing): one short run
        warm = setup(comm, **overrides)
        warm.run(min(1e-4, o["t_final"]))
    sim.prepare()  # GPU: the mesh and state to the device, outside the timing
    wall = 0.0
    for t in times:
        t1 = time.perf_counter()
        sim.run(float(t))
        wall += time.perf_counter() - t1
        if writer:
            writer.write(sim)
    if gauges is not None:
        gauges.write(Path(out) / "gauges.csv")
    f = sim.fields()  # this rank's cells
    n = sim.mesh.num_cells
    m = sim.masses()
    h1 = (float(f["h1"].min()), float(f["h1"].max()))
    if comm is not None:
        from mpi4py import MPI

        wall = comm.allreduce(wall, op=MPI.MAX)
        h1 = (comm.allreduce(h1[0], op=MPI.MIN), comm.allreduce(h1[1], op=MPI.MAX))
    cells = getattr(sim, "owned_cells", None)
    seed = SEED_GTX480_S.get(o["cells"])
    report = dict(
        cells=n, scheme=o["scheme"], precision=o["precision"], backend=o["backend"],
        order=o["order"], ranks=1 if comm is None else comm.Get_size(), t=sim.t,
        steps=sim.steps, wall_s=wall, setup_s=setup_s,
        cell_updates_per_s=n * sim.steps / wall if wall > 0 else None,
        seed_gtx480_s=seed, speedup_vs_seed=(seed / wall if seed and wall > 0 else None),
        mass_rel_change=[abs(m[k] - sim.mass0[k]) / sim.mass0[k] for k in range(2)],
        h1_min=h1[0], h1_max=h1[1],
        interface_radial_spread=radial_spread(sim.mesh, f["interface"], cells=cells,
                                              comm=comm),
        interface_jump=H1_OUT - H1_IN,
    )
    if cells is not None:
        report["exchange_wait_s"] = sim.exchange_seconds
    if out:
        interface = f["interface"]
        if cells is not None:  # the picture is global: the interface to rank 0
            parts = comm.gather((cells, interface), root=0)
            if rank == 0:
                interface = np.empty(n)
                for ids, v in parts:
                    interface[ids] = v
        if rank == 0:
            report.update(picture(out, sim, interface, o["scheme"]))
    return report


def picture(out, sim, interface, scheme) -> dict:
    """``interface.png`` (needs pyvista and an off-screen OpenGL, Mesa EGL); the
    report's entries."""
    Path(out).mkdir(parents=True, exist_ok=True)
    try:
        png = render_field(Path(out) / "interface.png", sim.mesh, interface,
                           "interface elevation",
                           title=f"interface elevation at t = {sim.t:g} s "
                                 f"({sim.mesh.num_cells} triangles, {scheme})")
        return {"picture": png.name}
    except Exception as e:  # noqa: BLE001 - no renderer: the report says why
        return {"picture": None, "picture_error": f"{type(e).__name__}: {e}"}


if __name__ == "__main__":
    print(json.dumps(main(out="out/tworoe_dam"), indent=1))
