"""Radial dam break: shallow water, a column of depth 2 collapses into depth 1.

Domain [-2.5, 2.5]^2 with reflecting walls, g = 1, depth 2 inside radius 0.5 and 1
outside, still water, run to t = 1 with the MC limiter, transverse_waves = 2 and
Courant number 0.9.  Refinement follows the undivided difference of the depth.

    forestpy run demos/radial_dam.py --set max_level=5 --out out/radial
"""

import numpy as np

from forestpy import Domain, Simulation
from forestpy.options import Option, merge_options, simulation_options, standard_options

OPTIONS = dict(
    **standard_options(max_level=4, refine_threshold=0.02, t_final=1.0, cfl=0.9),
    solver=Option("roe", "Riemann solver", choices=("roe", "hlle")),
)

SOLVERS = {"roe": "shallow_roe", "hlle": "shallow_hlle"}
RADIUS, H_IN, H_OUT, GRAV = 0.5, 2.0, 1.0, 1.0


def qinit(x, y):
    h = np.where(np.hypot(x, y) < RADIUS, H_IN, H_OUT)
    return np.stack([h, np.zeros_like(x), np.zeros_like(x)])


def setup(**overrides) -> Simulation:
    o = merge_options(OPTIONS, overrides, "radial_dam")
    if o["solver"] not in SOLVERS:
        raise ValueError(f"unknown solver {o['solver']!r}; valid: {sorted(SOLVERS)}")
    return Simulation(
        SOLVERS[o["solver"]],
        qinit=qinit,
        domain=Domain(lower=(-2.5, -2.5), upper=(2.5, 2.5)),
        bc="wall",
        params={"grav": GRAV},
        **simulation_options(o),
        refine_threshold=o["refine_threshold"],
        limiter="mc",
        transverse_waves=2,
        name="radial_dam",
    )


if __name__ == "__main__":
    sim = setup().run()
    print(sim.summary())
