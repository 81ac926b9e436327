"""Humps test cases (HWFV1 paper): 70 m x 30 m with walls, two smooth humps, a steep
hump and a rectangular hump that emerge from the water (wet/dry fronts).

``case="lake"``: quiescent water at level 0.875 m for 100 s (discharges must stay 0);
``case="dam"``: frictional dam break (n = 0.018), 1.875 m behind x = 16 m, dry beyond,
12 s.

    python demos/hwfv1/humps.py            # writes out/hwfv1_humps/humps.npz
"""

import json
from pathlib import Path

import numpy as np
from forestpy.solvers.hwfv1.solver import HWFV1, HWFV1Tree

from forestpy.options import Option, merge_options

OPTIONS = dict(
    case=Option("lake", "lake (at rest) or dam (frictional dam break)", choices=("lake", "dam")),
    L=Option(8, "finest level: 2^L x 2^L cells", min=2, max=12),
    eps=Option(1e-3, "wavelet threshold (None: uniform FV1)", type=float, min=0.0, none_ok=True),
    t_final=Option(None, "end time [s]; None: 100 (lake) or 12 (dam)", type=float, min=0.0),
)
ETA_LAKE, H_DAM, X_DAM, N_DAM = 0.875, 1.875, 16.0, 0.018


def bed(x, y):
    """Smooth humps at (30, 6) and (30, 24), steep hump at (47.5, 15), rectangular
    hump 1 m high on 56 <= x <= 60, 8 <= y <= 22."""
    r = lambda a, b: np.hypot(x - a, y - b)  # noqa: E731
    z = np.maximum(0.0, 1.0 - 0.1 * r(30.0, 6.0))
    z = np.maximum(z, 1.0 - 0.1 * r(30.0, 24.0))
    z = np.maximum(z, 3.0 - 0.3 * r(47.5, 15.0))
    z = np.where((x >= 56.0) & (x <= 60.0) & (y >= 8.0) & (y <= 22.0), 1.0, z)
    return z


def setup(**overrides) -> HWFV1:
    o = merge_options(OPTIONS, overrides, "humps")
    n = 2 ** o["L"]
    x = (np.arange(n) + 0.5) * 70.0 / n
    y = (np.arange(n) + 0.5) * 30.0 / n
    X, Y = np.meshgrid(x, y)
    z = bed(X, Y)
    if o["case"] == "lake":
        h, nm = np.maximum(0.0, ETA_LAKE - z), 0.0
    else:
        h, nm = np.where(X < X_DAM, np.maximum(0.0, H_DAM - z), 0.0), N_DAM
    zero = np.zeros_like(h)
    return HWFV1Tree(h, zero, zero, z, (0.0, 70.0, 0.0, 30.0), eps=o["eps"], bc="wall",
                 n_manning=nm)


def main(out=None, **overrides) -> dict:
    """Run; with a folder ``out``, write the fields (``.npz``) and the result (``.json``)
    there (``forestpy run`` passes its ``--out``)."""
    o = merge_options(OPTIONS, overrides, "humps")
    t_final = o["t_final"] if o["t_final"] is not None else (100.0 if o["case"] == "lake" else 12.0)
    sim = setup(**overrides).run(t_final)
    h, qx, qy, z = sim.state()
    result = dict(case=o["case"], L=o["L"], eps=o["eps"], t=sim.t, steps=sim.steps,
                  max_discharge=float(max(np.abs(qx).max(), np.abs(qy).max())),
                  volume=float(h.sum() * sim.dx * sim.dy),
                  leaves=int(getattr(sim, "nleaves", h.size)))
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "humps.npz", h=h, qx=qx, qy=qy, z=z)
        (out / "humps.json").write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    print(json.dumps(main(out="out/hwfv1_humps")))
