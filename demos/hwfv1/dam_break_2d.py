"""Pseudo-2D dam break (HWFV1 paper): 50 m x 25 m, dam at x = 10 m, 6 m upstream and
2 m downstream, open ends and walls along y, compared with the exact Stoker solution.

    python demos/hwfv1/dam_break_2d.py     # writes out/hwfv1_dam_break_2d/dam_break_2d.npz
"""

import json
from pathlib import Path

import numpy as np
from forestpy.solvers.hwfv1.solver import HWFV1, HWFV1Tree, stoker

from forestpy.options import Option, merge_options

OPTIONS = dict(
    L=Option(8, "finest level: 2^L x 2^L cells", min=2, max=12),
    eps=Option(1e-3, "wavelet threshold (None: uniform FV1)", type=float, min=0.0, none_ok=True),
    t_final=Option(2.5, "end time [s] (paper: 2.5 against the exact solution, 40 for timing)",
                   min=0.0),
)
X0, HL, HR = 10.0, 6.0, 2.0


def setup(**overrides) -> HWFV1:
    o = merge_options(OPTIONS, overrides, "dam_break_2d")
    n = 2 ** o["L"]
    x = (np.arange(n) + 0.5) * 50.0 / n
    h = np.repeat(np.where(x < X0, HL, HR)[None, :], n, axis=0)
    z = np.zeros_like(h)
    return HWFV1Tree(h, z, z, z, (0.0, 50.0, 0.0, 25.0), eps=o["eps"],
                 bc=("open", "open", "wall", "wall"))


def main(out=None, **overrides) -> dict:
    """Run; with a folder ``out``, write the fields (``.npz``) and the result (``.json``)
    there (``forestpy run`` passes its ``--out``)."""
    o = merge_options(OPTIONS, overrides, "dam_break_2d")
    sim = setup(**overrides).run(o["t_final"])
    x, _ = sim.cell_centres()
    h = sim.state()[0]
    he, _ = stoker(x, o["t_final"], HL, HR, X0) if o["t_final"] > 0 else (h[0], None)
    err = float(np.abs(h - he[None, :]).mean())
    result = dict(L=o["L"], eps=o["eps"], t=sim.t, steps=sim.steps, l1_error_h=err,
                  leaves=int(getattr(sim, "nleaves", h.size)))
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "dam_break_2d.npz", x=x, h=h, h_exact=he)
        (out / "dam_break_2d.json").write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    print(json.dumps(main(out="out/hwfv1_dam_break_2d")))
