"""Swirling advection that reverses: after one period the exact solution is the start.

The velocity comes from the stream function psi = sin^2(pi x) sin^2(pi y) / pi on the
unit square, scaled in time by cos(2 pi t / T), so the flow winds the data up until
T/2 and unwinds it exactly at T (LeVeque 1996, "High-resolution conservative
algorithms for advection in incompressible flow").  Edge velocities are differences
of psi at cell corners, so the discrete velocity field is divergence free.  Two blobs:
a smooth cos^4 bump (for convergence) and a discontinuous disc.
"""

import numpy as np

from forestpy import Domain, Simulation
from forestpy.options import Option, merge_options, simulation_options, standard_options

OPTIONS = dict(
    **standard_options(max_level=2, refine_threshold=0.05, t_final=1.0, cfl=0.9),
    period=Option(1.0, "period of the swirling velocity field", min=0.0, min_inclusive=False),
    blob=Option("both", "initial data", choices=("smooth", "disc", "both")),
    limiter=Option("mc", "wave limiter", choices=("none", "minmod", "superbee", "vanleer", "mc")),
)

SMOOTH_CENTER, SMOOTH_RADIUS = (0.5, 0.27), 0.18
DISC_CENTER, DISC_RADIUS = (0.5, 0.73), 0.12


def smooth_blob(x, y):
    r = np.hypot(x - SMOOTH_CENTER[0], y - SMOOTH_CENTER[1]) / SMOOTH_RADIUS
    return np.where(r < 1.0, np.cos(0.5 * np.pi * np.minimum(r, 1.0)) ** 4, 0.0)


def disc_blob(x, y):
    return np.where(np.hypot(x - DISC_CENTER[0], y - DISC_CENTER[1]) < DISC_RADIUS, 1.0, 0.0)


def psi(x, y):
    return np.sin(np.pi * x) ** 2 * np.sin(np.pi * y) ** 2 / np.pi


def setaux(x, y, dx, dy):
    """Edge velocities: aux[0] = u on the left face, aux[1] = v on the bottom face."""
    xl, yb = x - 0.5 * dx, y - 0.5 * dy
    u = (psi(xl, y + 0.5 * dy) - psi(xl, y - 0.5 * dy)) / dy
    v = -(psi(x + 0.5 * dx, yb) - psi(x - 0.5 * dx, yb)) / dx
    return np.stack([u, v])


def setup(**overrides) -> Simulation:
    o = merge_options(OPTIONS, overrides, "advection_swirl")
    blobs = {"both": (smooth_blob, disc_blob), "smooth": (smooth_blob,), "disc": (disc_blob,)}
    if o["blob"] not in blobs:
        raise ValueError(f"unknown blob {o['blob']!r}; valid: {sorted(blobs)}")
    chosen = blobs[o["blob"]]
    period = float(o["period"])

    def qinit(x, y):
        return sum(b(x, y) for b in chosen)[None]

    def b4step(sim, dt):
        sim.aux[:] = sim.aux_setaux * np.cos(2.0 * np.pi * (sim.t + 0.5 * dt) / period)

    return Simulation(
        "advection_variable",
        qinit=qinit,
        setaux=setaux,
        b4step=b4step,
        domain=Domain(lower=(0.0, 0.0), upper=(1.0, 1.0)),
        bc="extrap",
        **simulation_options(o),
        refine_threshold=o["refine_threshold"],
        limiter=o["limiter"],
        transverse_waves=2,
        name="advection_swirl",
    )


def exact(x, y, blob="both"):
    """The exact solution at t = period (equal to the initial condition)."""
    parts = {
        "both": smooth_blob(x, y) + disc_blob(x, y),
        "smooth": smooth_blob(x, y),
        "disc": disc_blob(x, y),
    }
    return parts[blob]


if __name__ == "__main__":
    sim = setup().run()
    print(sim.summary())
