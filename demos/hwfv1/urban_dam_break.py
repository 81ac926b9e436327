"""Dam break through an idealised city (Soares-Frazao & Zech 2008) with HWFV1 (L = 11).

Section 3.3 of the GPU-HWFV1 paper: the 36 m x 3.6 m channel with the barrier, its 1 m
gate and the 5 x 5 blocks of the "aligned" city, 0.4 m of water upstream of the barrier
and 0.011 m downstream, Manning 0.01, 10 s; depth and velocity along ``y = 0.2 m`` at
6 s against the measurements.  The geometry, the DEM (0.02 m, 1800 x 180 cells, exact
cell averages), the initial state and the measured profiles come from the GeoClaw-like
demo ``demos/geoclaw/urban_dam_break.py`` (see its docstring for the sources and the
two 1 cm shifts that put every face on a 0.02 m cell face), so both solvers run the
same case.

Grid: HWFV1 needs 2^L x 2^L cells.  The cells keep the DEM's 0.02 m at L = 11: a
40.96 m square whose south-east part is the channel (``-6.76 <= x <= 29.24``,
``-1.81 <= y <= 1.79``; the square spans ``-11.72 <= x <= 29.24``,
``-1.81 <= y <= 39.15``).  The rest is ground at 2 m (the height of the barrier and
the blocks), dry, so the channel's upstream end and north side act as walls, as in the
HWFV1 Okushiri demo; it is flat and dry, its details vanish and it costs a few coarse
leaves (the uniform FV1 run updates all 4^L cells, padding included).  The square's
south side is the channel's south wall (``wall``), its east side the outflow
(``open``: zero gradient; ``boundary=wall`` closes it).  Coarser L keep the square
(cells of 40.96 / 2^L m) with the exact cell averages of the bed; the initial depth is
the rest state ``max(0, eta0 - z)`` of each cell (exact at L = 11, where z is 0 or 2).

``main`` runs to ``profile_time`` (6 s; the last step lands on it), records the
profiles of the finest row through ``y = 0.2`` (depth and speed at the cell centres
between x = 3 and 9 m), runs on to ``t_final`` and returns steps, cell updates (leaf
updates for HWFV1), leaves at the profile time, wall times, the volume balance and the
RMS difference to the measured profiles.  ``eps=None`` runs the uniform FV1 baseline at
the finest level on the 2^L square (dry padding included: 4^L cells per step);
``eps=None, uniform_grid=channel`` runs the same uniform scheme on the channel's cells
alone (the DEM grid, 1800 x 180 at L = 11: what LISFLOOD-FP's GPU-FV1, the paper's
baseline, updates).  ``backend=gpu`` runs :class:`~solvers.hwfv1.gpu.HWFV1GPU` (Numba
CUDA; the CUDA simulator when ``NUMBA_ENABLE_CUDASIM=1``).

    forestpy run demos/hwfv1/urban_dam_break.py --out out/hwfv1_urban
    forestpy run demos/hwfv1/urban_dam_break.py --set eps=None --out out/hwfv1_urban_fv1
    forestpy run demos/hwfv1/urban_dam_break.py --set eps=None --set uniform_grid=channel \
        --out out/hwfv1_urban_fv1_channel
    forestpy run demos/hwfv1/urban_dam_break.py --set backend=gpu --out out/hwfv1_urban_gpu
"""

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
from forestpy.solvers.hwfv1.fv1 import TOL_DRY
from forestpy.solvers.hwfv1.solver import BCS, HWFV1, HWFV1Tree

from forestpy.options import Option, merge_options


def _geometry():
    """The GeoClaw-like demo as a module (it holds the geometry and the data loader)."""
    name = "_urban_dam_break_geometry"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "geoclaw" / "urban_dam_break.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


geo = _geometry()

OPTIONS = dict(
    L=Option(11, "finest level: 2^L x 2^L cells over 40.96 m (L = 11: the DEM's 0.02 m)",
             min=5, max=11),
    eps=Option(1e-3, "wavelet threshold (None: uniform FV1 at the finest level)", type=float,
               min=0.0, none_ok=True),
    t_final=Option(10.0, "end time [s]", min=0.0),
    profile_time=Option(geo.PROFILE_T, "time [s] of the recorded profiles (measured: 6)",
                        min=0.0),
    n_manning=Option(geo.MANNING, "Manning coefficient", min=0.0),
    boundary=Option("outflow", "downstream end: free outflow, or a wall (closed channel)",
                    choices=("outflow", "wall")),
    backend=Option("cpu", "cpu (Numba) or gpu (Numba CUDA)", choices=("cpu", "gpu")),
    uniform_grid=Option("square", "eps=None only: the uniform FV1 on the padded 2^L square "
                        "(square) or on the channel's cells alone (channel: the DEM grid, "
                        "1800 x 180 at L = 11, as LISFLOOD-FP's GPU-FV1 runs it; L >= 9)",
                        choices=("square", "channel")),
)
LFINE = 11  # the level whose cells are the DEM's 0.02 m
SIDE = 2**LFINE * geo.DX  # 40.96 m
EXTENT = (geo.X_OUT - SIDE, geo.X_OUT, geo.Y_S, geo.Y_S + SIDE)
X0, X1 = geo.X_UP, geo.X_OUT  # the channel's ends


def fields(L: int):
    """``(h, qx, qy, z)`` on the 2^L x 2^L grid of the 40.96 m square: exact cell
    averages of the bed, the rest state of the initial surface, no velocity."""
    n = 2**L
    e = np.linspace(0.0, SIDE, n + 1)
    xe, ye = EXTENT[0] + e, EXTENT[2] + e
    z = geo.bed_average(xe[None, :-1], xe[None, 1:], ye[:-1, None], ye[1:, None])
    xc = 0.5 * (xe[1:] + xe[:-1])
    h = np.maximum(0.0, geo.eta_init(xc[None, :], 0.0 * ye[:-1, None]) - z)
    zero = np.zeros_like(h)
    return h, zero, zero.copy(), z


def channel_fields(L: int):
    """``(h, qx, qy, z, extent)`` on the channel's cells alone (the cells of the 2^L
    square that lie in the channel: 1800 x 180 at L = 11)."""
    dx = SIDE / 2**L
    nx, ny = (X1 - X0) / dx, (geo.Y_N - geo.Y_S) / dx
    if abs(nx - round(nx)) > 1e-6 or abs(ny - round(ny)) > 1e-6:
        raise ValueError(f"L={L}: cells of {dx:g} m do not tile the 36 m x 3.6 m channel "
                         f"(uniform_grid=channel needs L >= 9)")
    nx, ny = round(nx), round(ny)
    xe, ye = X0 + dx * np.arange(nx + 1), geo.Y_S + dx * np.arange(ny + 1)
    z = geo.bed_average(xe[None, :-1], xe[None, 1:], ye[:-1, None], ye[1:, None])
    xc = 0.5 * (xe[1:] + xe[:-1])
    h = np.maximum(0.0, geo.eta_init(xc[None, :], 0.0 * ye[:-1, None]) - z)
    zero = np.zeros_like(h)
    return h, zero, zero.copy(), z, (X0, X1, geo.Y_S, geo.Y_N)



class ChannelFV1(HWFV1):
    """The uniform FV1 scheme of :class:`HWFV1` (``eps=None``: the same Numba kernels,
    ``dt_uniform`` and ``step_uniform``, which take any grid shape) on a rectangular
    ``ny x nx`` grid instead of a 2^L square.  ``L`` only sizes the GPU launch grids
    (the smallest with 4^L >= nx ny cells) in :class:`ChannelFV1GPU`."""

    def __init__(self, h, qx, qy, z, extent, eps=None, bc="wall", n_manning=0.0,
                 g=9.80665, cfl=0.5, inflow=None):
        if eps is not None or inflow is not None:
            raise ValueError("ChannelFV1 is the uniform scheme: eps=None, no inflow")
        q = np.stack([np.asarray(a, dtype=np.float64) for a in (h, qx, qy, z)])
        if q.ndim != 3 or np.any(q[0] < 0) or not np.all(np.isfinite(q)):
            raise ValueError("h, qx, qy, z must be finite (ny, nx) arrays, h >= 0")
        bcs = (bc,) * 4 if isinstance(bc, str) else tuple(bc)
        if len(bcs) != 4 or any(b not in ("wall", "open") for b in bcs):
            raise ValueError(f"bc must be 'wall'/'open' or a 4-tuple of them, got {bc!r}")
        ny, nx = q.shape[1:]
        self.L = max(1, int(np.ceil(np.log(nx * ny) / np.log(4.0) - 1e-12)))
        self.walls = np.array([b == "wall" for b in bcs])
        self.bc = np.array([BCS[b] for b in bcs], dtype=np.int64)
        self.inflow = None
        self.extent = extent
        x0, x1, y0, y1 = extent
        self.dx, self.dy = (x1 - x0) / nx, (y1 - y0) / ny
        self.eps, self.g, self.cfl, self.n_manning = None, float(g), float(cfl), float(n_manning)
        self.t, self.steps = 0.0, 0
        self.time_mra = self.time_fv = 0.0
        self.leaf_history = []
        self.q = np.ascontiguousarray(q[:3])
        self.z = np.ascontiguousarray(q[3])
        self._qn = np.empty_like(self.q)

    def cell_centres(self):
        x0, _, y0, _ = self.extent
        ny, nx = self.z.shape
        return (x0 + (np.arange(nx) + 0.5) * self.dx, y0 + (np.arange(ny) + 0.5) * self.dy)


def setup(**overrides):
    """The solver object: :class:`HWFV1Tree` on the CPU, ``HWFV1GPU`` on the GPU (the
    2^L square); with ``eps=None, uniform_grid=channel`` :class:`ChannelFV1` (CPU) or
    ``ChannelFV1GPU`` (GPU)."""
    o = merge_options(OPTIONS, overrides, "urban_dam_break")
    bc = ("wall", "open" if o["boundary"] == "outflow" else "wall", "wall", "wall")
    kw = dict(eps=o["eps"], bc=bc, n_manning=o["n_manning"], g=geo.GRAV)
    if o["eps"] is None and o["uniform_grid"] == "channel":
        h, qx, qy, z, extent = channel_fields(o["L"])
        if o["backend"] == "gpu":
            return _channel_gpu_class()(h, qx, qy, z, extent, **kw)
        return ChannelFV1(h, qx, qy, z, extent, **kw)
    h, qx, qy, z = fields(o["L"])
    if o["backend"] == "gpu":
        from forestpy.solvers.hwfv1.gpu import HWFV1GPU

        return HWFV1GPU(h, qx, qy, z, EXTENT, **kw)
    return HWFV1Tree(h, qx, qy, z, EXTENT, **kw)


def _channel_gpu_class():
    """``ChannelFV1GPU``: ``HWFV1GPU``'s uniform path (kernels, CUDA graphs, device
    clock) on the channel's grid.  Its ``__init__`` calls ``super().__init__``, which
    the method order sends to :class:`ChannelFV1`; the uniform kernels take the grid's
    shape from the arrays and return for threads beyond it."""
    from forestpy.solvers.hwfv1.gpu import HWFV1GPU

    class ChannelFV1GPU(HWFV1GPU, ChannelFV1):
        pass

    return ChannelFV1GPU


def row_of(sim, y: float) -> int:
    """Row of the cells holding ``y``."""
    nrows = round((sim.extent[3] - sim.extent[2]) / sim.dy)
    return int(np.clip(np.floor((y - sim.extent[2]) / sim.dy), 0, nrows - 1))


def profile(sim, state=None) -> dict:
    """Depth and speed along the row through ``y = 0.2 m`` at the cell centres with
    ``x`` in ``PROFILE_X``."""
    h, qx, qy, _ = sim.state() if state is None else state
    x, _ = sim.cell_centres()
    keep = (x >= geo.PROFILE_X[0]) & (x <= geo.PROFILE_X[1])
    j = row_of(sim, geo.PROFILE_Y)
    hh, uu, vv = h[j, keep], qx[j, keep], qy[j, keep]
    return {"x": x[keep].copy(), "depth": hh.copy(), "speed": geo.speed_of(hh, uu, vv, TOL_DRY),
            "velocity_x": np.where(hh > TOL_DRY, uu / np.maximum(hh, 1e-300), np.nan)}


def front_position(sim, h, y: float = 0.0, rise: float = 0.005) -> float:
    """Largest cell centre ``x`` downstream of the barrier on the row through ``y``
    where the depth exceeds 0.011 m by ``rise`` (the dam-break front)."""
    x, _ = sim.cell_centres()
    row = h[row_of(sim, y)]
    wet = np.flatnonzero((x > geo.BARRIER[1]) & (row > geo.H_DOWN + rise))
    return float(x[wet[-1]]) if len(wet) else float("nan")


def leaf_updates(sim) -> int:
    """Cells updated so far: the leaves of every step (adaptive) or every cell of the
    grid per step (uniform)."""
    if sim.eps is None:
        return int(sim.steps) * int(sim.z.size)
    return int(sum(n for _, n in sim.leaf_history))


def simulate(**overrides):
    """Run to ``profile_time``, record the profiles, run on to ``t_final``; returns
    ``(result dict, profiles dict)``.  Wall times cover ``sim.run`` only (not the set-up
    nor the read-back of the profiles)."""
    o = merge_options(OPTIONS, overrides, "urban_dam_break")
    sim = setup(**overrides)
    area = sim.dx * sim.dy
    v0 = float(sim.state()[0].sum() * area)
    t_prof = min(o["profile_time"], o["t_final"])
    t0 = time.perf_counter()
    sim.run(t_prof)
    wall_prof = time.perf_counter() - t0
    state = sim.state()
    prof = profile(sim, state)
    at_profile = dict(t=float(sim.t), steps=int(sim.steps), cell_updates=leaf_updates(sim),
                      leaves=int(sim.nleaves) if sim.eps is not None else int(sim.z.size),
                      wall_s=wall_prof, volume=float(state[0].sum() * area),
                      front_x_centreline=front_position(sim, state[0]))
    at_profile["vs_measured"] = geo.compare_measured(prof["x"], prof["depth"], prof["speed"])
    t1 = time.perf_counter()
    sim.run(o["t_final"])
    wall = wall_prof + time.perf_counter() - t1
    h = sim.state()[0]
    v1 = float(h.sum() * area)
    hist = [n for _, n in sim.leaf_history] if sim.eps is not None else []
    ncells = int(sim.z.size) if sim.eps is None else 4**o["L"]
    result = dict(
        solver="hwfv1" if o["eps"] is not None else f"fv1_{o['uniform_grid']}", L=o["L"],
        eps=o["eps"], backend=o["backend"], dx=sim.dx, cells=ncells, t=float(sim.t),
        steps=int(sim.steps), cell_updates=leaf_updates(sim), wall_s=wall,
        mean_leaves=float(np.mean(hist)) if hist else float(ncells),
        sparse_steps=getattr(sim, "sparse_steps", None),
        full_steps=getattr(sim, "full_steps", None),
        volume_exact=geo.VOLUME, volume_initial=v0, volume_final=v1,
        volume_initial_minus_exact_relative=(v0 - geo.VOLUME) / geo.VOLUME,
        volume_change_relative=(v1 - v0) / v0,
        front_x_centreline=front_position(sim, h),
        profile=at_profile,
    )
    return result, prof


def label(result: dict) -> str:
    """Legend text of a run."""
    if result["eps"] is None:
        return f"uniform FV1 {result['dx']:g} m ({result['solver'][4:]})"
    return f"HWFV1 L={result['L']}, eps={result['eps']:g}"


def main(out=None, **overrides) -> dict:
    """:func:`simulate`; with a folder ``out`` write ``profiles.npz``, ``result.json`` and
    ``profiles.png`` there."""
    result, prof = simulate(**overrides)
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "profiles.npz", t=result["profile"]["t"], y=geo.PROFILE_Y, **prof)
        (out / "result.json").write_text(json.dumps(result, indent=1))
        png = geo.plot_profiles(out / "profiles.png", [dict(label=label(result), **prof)],
                                geo.measured_profiles(), t=result["profile"]["t"])
        if png is not None:
            result["png"] = str(png)
    return result


if __name__ == "__main__":
    print(json.dumps(main(out="out/hwfv1_urban_dam_break"), indent=1))
