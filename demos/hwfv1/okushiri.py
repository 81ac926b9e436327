"""Okushiri / Monai valley wave tank with HWFV1 (L = 9), against the measured gauges.

Benchmark 2 of the Third International Workshop on Long-Wave Runup Models (data in
``demos/geoclaw/data/okushiri``, loaded by :mod:`forestpy.extensions.geoclaw.datasets`):
the tank's bathymetry on 393 x 244 cells of 0.014 m (still water at z = 0), the
measured incident surface elevation entering at x = 0, walls elsewhere, Manning 0.01,
22.5 s; gauges ch5, ch7, ch9 in front of the Monai valley.

Grid: HWFV1 needs 2^L x 2^L cells.  The cells keep the file's 0.014 m spacing (its
values are used as the cell values, as its cell-registered header says), so L = 9 gives
a 7.168 m square whose lower-left 393 x 244 cells are the tank; the rest is padding at
``PAD_Z`` = 0.3 m, dry ground above any water level of the run (the highest bed of the
tank is 0.125 m), so the tank's east and north sides act as walls (a wet cell beside
higher dry ground is a wall for the well-balanced flux).  The padding is flat and dry:
its details vanish and it costs a few coarse leaves.  Coarser L keep the 7.168 m square
(cells of 7.168 / 2^L) with block averages of the padded grid as bed.

The west side generates the incident wave and absorbs outgoing ones
(:func:`solvers.hwfv1.fv1.ghost_bc`).  ``main`` returns, per gauge, the RMS difference
between model and measured surface elevation over 10-22.5 s and the errors in peak
height (m) and peak time (s) over that window.

    forestpy run demos/hwfv1/okushiri.py --out out/hwfv1_okushiri
    python demos/hwfv1/okushiri.py
"""

import json
from pathlib import Path

import numpy as np
from forestpy.extensions.geoclaw import datasets
from forestpy.solvers.hwfv1 import mra
from forestpy.solvers.hwfv1.solver import HWFV1, HWFV1Tree

from forestpy.options import Option, merge_options

OPTIONS = dict(
    L=Option(9, "finest level: 2^L x 2^L cells over 7.168 m (L = 9: 0.014 m cells)",
             min=4, max=9),
    eps=Option(1e-3, "wavelet threshold (None: uniform FV1)", type=float, min=0.0, none_ok=True),
    t_final=Option(22.5, "end time [s]", min=0.0, max=22.5),
    n_manning=Option(0.01, "Manning coefficient", min=0.0),
)
DX = 0.014  # cell size of the bathymetry file (m)
NFINE = 512  # cells per side at L = 9
PAD_Z = 0.3  # bed of the padding (m)
WINDOW = (10.0, 22.5)  # comparison window (s)
GAUGES = datasets.OKUSHIRI_GAUGES


def bed(L: int) -> np.ndarray:
    """Bed on 2^L x 2^L cells: the tank padded to 512 x 512 cells of 0.014 m, averaged
    over 2^(9-L) x 2^(9-L) blocks."""
    z = datasets.okushiri_bathymetry().z
    pad = np.full((NFINE, NFINE), PAD_Z)
    pad[:z.shape[0], :z.shape[1]] = z
    r = 2 ** (9 - L)
    return pad.reshape(2**L, r, 2**L, r).mean(axis=(1, 3))


def setup(**overrides) -> HWFV1:
    o = merge_options(OPTIONS, overrides, "okushiri")
    z = bed(o["L"])
    h = np.maximum(0.0, -z)
    zero = np.zeros_like(h)
    t_in, eta_in = datasets.okushiri_input_wave()
    return HWFV1Tree(h, zero, zero, z, (0.0, NFINE * DX, 0.0, NFINE * DX), eps=o["eps"],
                 bc=("inflow", "wall", "wall", "wall"), n_manning=o["n_manning"], g=9.81,
                 inflow=lambda t: np.interp(t, t_in, eta_in))


def _gauge_index(sim, x, y):
    """Index of the finest cell holding (x, y): Morton order for the adaptive solver
    (into ``s`` at level L), row-major (j, i) for the uniform one."""
    i, j = int(x / sim.dx), int(y / sim.dy)
    return (i, j) if sim.eps is None else mra.offset(sim.L) + int(mra.morton(i, j))


def _surface(sim, k):
    if sim.eps is None:
        i, j = k
        return sim.q[0, j, i] + sim.z[j, i]
    return sim.s[0, k] + sim.s[3, k]


def compare(t_mod, eta_mod, t_meas, eta_meas, window=WINDOW):
    """RMS difference (at the measured times) and peak height/time errors in ``window``."""
    keep = (t_meas >= window[0]) & (t_meas <= min(window[1], t_mod[-1]))
    tm, em = t_meas[keep], eta_meas[keep]
    model = np.interp(tm, t_mod, eta_mod)
    km, kd = int(np.argmax(model)), int(np.argmax(em))
    return dict(rms=float(np.sqrt(np.mean((model - em) ** 2))),
                peak_model=float(model[km]), peak_measured=float(em[kd]),
                peak_error=float(model[km] - em[kd]), peak_time_error=float(tm[km] - tm[kd]))


def main(out=None, **overrides) -> dict:
    """Run and compare with the measured gauges; writes ``gauges.npz`` and
    ``result.json`` into the folder ``out`` when given."""
    o = merge_options(OPTIONS, overrides, "okushiri")
    sim = setup(**overrides)
    ks = {g: _gauge_index(sim, *xy) for g, xy in GAUGES.items()}
    times, series = [0.0], {g: [_surface(sim, k)] for g, k in ks.items()}
    while sim.t < o["t_final"] * (1 - 1e-14):  # driver loop over time steps
        sim.step(o["t_final"])
        times.append(sim.t)
        for g, k in ks.items():
            series[g].append(_surface(sim, k))
    h = sim.state()[0]
    if not np.all(np.isfinite(h)) or h.min() < 0:
        raise RuntimeError(f"invalid depth at t={sim.t}")
    t_mod = np.array(times)
    t_meas, meas = datasets.okushiri_gauges()
    window = WINDOW if o["t_final"] > WINDOW[0] + 1.0 else (0.0, o["t_final"])
    result = dict(L=o["L"], eps=o["eps"], t=sim.t, steps=sim.steps, window_s=list(window),
                  leaves=int(getattr(sim, "nleaves", h.size)), cells=h.size,
                  mean_leaves=(float(np.mean([n for _, n in sim.leaf_history]))
                               if sim.leaf_history else float(h.size)),
                  gauges={g: compare(t_mod, np.array(series[g]), t_meas, meas[g], window)
                          for g in GAUGES})
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "gauges.npz", t=t_mod, **{g: np.array(v) for g, v in series.items()})
        (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    print(json.dumps(main(out="out/hwfv1_okushiri"), indent=1))
