"""Circular dam break (HWFV1 paper): [-20, 20]^2, 2.5 m inside radius 2.5 m, 0.5 m
outside, walls, run to 3.5 s.

    python demos/hwfv1/circular_dam.py     # writes out/hwfv1_circular_dam/circular_dam.npz
"""

import json
from pathlib import Path

import numpy as np
from forestpy.solvers.hwfv1.solver import HWFV1, HWFV1Tree

from forestpy.options import Option, merge_options

OPTIONS = dict(
    L=Option(8, "finest level: 2^L x 2^L cells", min=2, max=12),
    eps=Option(1e-3, "wavelet threshold (None: uniform FV1)", type=float, min=0.0, none_ok=True),
    t_final=Option(3.5, "end time [s]", min=0.0),
)
RADIUS, H_IN, H_OUT = 2.5, 2.5, 0.5


def setup(**overrides) -> HWFV1:
    o = merge_options(OPTIONS, overrides, "circular_dam")
    n = 2 ** o["L"]
    c = -20.0 + (np.arange(n) + 0.5) * 40.0 / n
    h = np.where(np.hypot(c[None, :], c[:, None]) < RADIUS, H_IN, H_OUT)
    z = np.zeros_like(h)
    return HWFV1Tree(h, z, z, z, (-20.0, 20.0, -20.0, 20.0), eps=o["eps"], bc="wall")


def main(out=None, **overrides) -> dict:
    """Run; with a folder ``out``, write the fields (``.npz``) and the result (``.json``)
    there (``forestpy run`` passes its ``--out``)."""
    o = merge_options(OPTIONS, overrides, "circular_dam")
    sim = setup(**overrides).run(o["t_final"])
    h, qx, qy, _ = sim.state()
    result = dict(L=o["L"], eps=o["eps"], t=sim.t, steps=sim.steps,
                  volume=float(h.sum() * sim.dx * sim.dy),
                  leaves=int(getattr(sim, "nleaves", h.size)))
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "circular_dam.npz", h=h, qx=qx, qy=qy)
        (out / "circular_dam.json").write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    print(json.dumps(main(out="out/hwfv1_circular_dam")))
