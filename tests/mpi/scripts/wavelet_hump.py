"""A case for the wavelet criterion's normalisation in a distributed run: a tall dam (h
up to ``TALL``) in the south-west quadrant, the first in Morton order, and a low one (a
step of ``LOW - 1``) in the north-east quadrant, the last: on 2 ranks the first rank
holds the domain's largest depth, the second only depths near 1.  The low step's Haar
details lie between ``eps * 2^(n - Lp)`` times 1 and times ``TALL``: normalised by the
domain's maximum (the serial run) they are not significant, by the second rank's own
maximum they are, and that rank would refine around the low dam.
``setup(local_norm=True)`` is that wrong criterion (the tag without a context
normalises by the rank's own maximum)."""

import numpy as np

from forestpy import Domain, Simulation
from forestpy.indicators import indicator_wavelet

TALL, LOW = 10.0, 1.01


def qinit(x, y):
    tall = np.hypot(x + 1.875, y + 1.875) < 0.4
    low = np.hypot(x - 1.875, y - 1.875) < 0.4
    h = np.where(tall, TALL, np.where(low, LOW, 1.0))
    return np.stack([h, np.zeros_like(x), np.zeros_like(x)])


def setup(local_norm=False, eps=3e-3, **options):
    tag = indicator_wavelet(0, eps)
    if local_norm:
        def tag(q, aux, geom, t, wavelet=tag):  # no context: this rank's own maximum
            return wavelet(q, aux, geom, t)

    opts = dict(mx=8, min_level=1, max_level=3, t_final=0.02, regrid_interval=2,
                subcycle=False)
    opts.update(options)
    return Simulation("shallow_roe", qinit=qinit, domain=Domain((-2.5, -2.5), (2.5, 2.5)),
                      bc="wall", params={"grav": 1.0}, tag=tag, limiter="mc", **opts)
