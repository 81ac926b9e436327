"""A small GeoClaw case with AMR for the distributed tests (the runup in a bowl of
tests/extensions/geoclaw/test_geoclaw_solver.py): ``setup(**options)`` like a demo."""

import numpy as np
from forestpy.extensions.geoclaw.model import geoclaw_simulation

from forestpy import Domain


def bowl_bottom(x, y, dx, dy):
    """Exact cell averages of the paraboloid 0.01 (x^2 + y^2) - 80."""
    return 1e-2 * (x**2 + y**2 + (dx**2 + dy**2) / 12.0) - 80.0


def hump(x, y):
    return 40.0 * np.exp(-((x - 20.0) ** 2 + (y - 10.0) ** 2) / 200.0)


def sources():
    """Discharge sources: a point source (the leaf cell containing it) and a disc that
    spans several patches."""
    from forestpy.extensions.geoclaw.sources import DischargeSource

    return [DischargeSource(-35.0, 25.0, 400.0), DischargeSource(30.0, -30.0, 900.0, radius=12.0)]


def setup(**options):
    opts = dict(domain=Domain((-100, -100), (100, 100)), eta_init=hump, mx=8, min_level=2,
                max_level=4, wave_tolerance=1.0, regrid_interval=2, t_final=2.0,
                subcycle=False)  # the distributed runs take one dt for all levels
    opts.update(options)
    return geoclaw_simulation(bowl_bottom, **opts)
