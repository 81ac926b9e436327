"""Radial dam break on the patch forest refined by normalised Haar details
(``forestpy.indicators.indicator_wavelet``, the HWFV1 criterion) instead of the
undivided difference.

    forestpy run demos/wavelet_tagging.py --set eps=0.003 --out out/wavelet
"""

import numpy as np

from forestpy import Domain, Simulation
from forestpy.indicators import indicator_wavelet
from forestpy.options import Option, merge_options, simulation_options, standard_options

OPTIONS = dict(
    **standard_options(max_level=4, t_final=1.0, cfl=0.9),
    eps=Option(1e-2, "Haar threshold on the depth", min=0.0, min_inclusive=False),
)
RADIUS, H_IN, H_OUT, GRAV = 0.5, 2.0, 1.0, 1.0


def qinit(x, y):
    h = np.where(np.hypot(x, y) < RADIUS, H_IN, H_OUT)
    return np.stack([h, np.zeros_like(x), np.zeros_like(x)])


def setup(**overrides) -> Simulation:
    o = merge_options(OPTIONS, overrides, "wavelet_tagging")
    return Simulation(
        "shallow_roe",
        qinit=qinit,
        domain=Domain(lower=(-2.5, -2.5), upper=(2.5, 2.5)),
        bc="wall",
        params={"grav": GRAV},
        **simulation_options(o),
        tag=indicator_wavelet(0, o["eps"]),
        limiter="mc",
        name="wavelet_tagging",
    )


if __name__ == "__main__":
    sim = setup().run()
    print(sim.summary())
