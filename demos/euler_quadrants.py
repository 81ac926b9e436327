"""Two-dimensional Riemann problem for the Euler equations (four constant quadrants).

Configuration 3 of Lax & Liu (1998, SIAM J. Sci. Comput. 19:319) on [0, 1]^2 with the
corner at (0.8, 0.8) as in Clawpack's ``euler_2d/quadrants``: four shocks meet and roll
up into a mushroom-shaped jet along the diagonal.  Extrapolation boundaries, gamma 1.4.
"""

import numpy as np

from forestpy import Domain, Simulation
from forestpy.options import merge_options, simulation_options, standard_options

OPTIONS = standard_options(max_level=4, refine_threshold=0.05, t_final=0.8, cfl=0.8)

GAMMA = 1.4
CORNER = (0.8, 0.8)
# (rho, u, v, p) in the quadrants NE, NW, SW, SE
STATES = {
    "ne": (1.5, 0.0, 0.0, 1.5),
    "nw": (0.532258064516129, 1.206045378311055, 0.0, 0.3),
    "sw": (0.137992831541219, 1.206045378311055, 1.206045378311055, 0.029032258064516),
    "se": (0.532258064516129, 0.0, 1.206045378311055, 0.3),
}


def qinit(x, y):
    east, north = x >= CORNER[0], y >= CORNER[1]
    q = np.zeros((4,) + x.shape)
    for key, (rho, u, v, p) in STATES.items():
        m = (north if key[0] == "n" else ~north) & (east if key[1] == "e" else ~east)
        q[0][m] = rho
        q[1][m] = rho * u
        q[2][m] = rho * v
        q[3][m] = p / (GAMMA - 1.0) + 0.5 * rho * (u * u + v * v)
    return q


def setup(**overrides) -> Simulation:
    o = merge_options(OPTIONS, overrides, "euler_quadrants")
    return Simulation(
        "euler",
        qinit=qinit,
        domain=Domain(lower=(0.0, 0.0), upper=(1.0, 1.0)),
        bc="extrap",
        params={"gamma": GAMMA},
        **simulation_options(o),
        refine_threshold=o["refine_threshold"],
        tag_field=0,
        limiter="mc",
        transverse_waves=2,
        name="euler_quadrants",
    )


if __name__ == "__main__":
    sim = setup().run()
    print(sim.summary())
