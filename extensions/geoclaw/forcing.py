r"""Boundary forcing for GeoClaw-like runs: an incident long wave on one side.

:class:`IncidentWave` is a user boundary callable (see
:mod:`forestpy.patches.boundary`): ``fn(side, q, aux, x, y, t)`` fills the ghost cells
of one side from a surface elevation time series :math:`\eta(t)` (e.g. the Okushiri
wave tank's input wave, given at the western boundary).  In every ghost cell

.. math::

    h = \max(0, \eta(t) - b), \qquad
    u_n = \pm\,\eta(t)\,\sqrt{g / h_0}, \qquad u_t = 0,

with :math:`h_0 = \max(\text{sea\_level} - b, 0)` the still-water depth at that ghost
cell and the sign pointing into the domain.  This is the linear long-wave relation of a
wave travelling into the domain (:math:`u = \eta c_0 / h_0`, :math:`c_0 = \sqrt{g h_0}`),
the same choice as GeoClaw's incoming-wave boundary of its Okushiri example; it lets an
outgoing (reflected) wave leave only approximately, which is adequate while the
reflected wave is small at the boundary, as in the wave tank during the 22.5 s of the
benchmark.  The bottom ``b`` in the ghost cells is the extrapolated one (the framework
extrapolates ``aux`` at sides with a user boundary).  Where :math:`h_0` is zero (dry
ghost cells) the velocity is zero.

:func:`side_conditions` builds the ``bc`` option from per-side kinds ("wall",
"extrap") and forcing callables.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from forestpy.backend import array_module
from forestpy.hooks import PointwiseBoundary

__all__ = ["IncidentWave", "side_conditions", "SIDES"]

SIDES = ("x_lower", "x_upper", "y_lower", "y_upper")


@numba.njit(inline="always")
def _not_below_zero(a):
    """``max(a, 0)`` as NumPy's ``maximum`` (NaN and -0.0 kept)."""
    return a if not a < 0.0 else 0.0


@numba.njit(inline="always")
def incident_wave_cell(side, q, q_in, aux, x, y, t, params, de):
    """One ghost cell of :class:`IncidentWave` (``params``: grav, sea level; ``de``: the
    incident surface's departure from sea level at ``t``), in the array path's order."""
    grav = params[0]
    sea_level = params[1]
    bot = aux[0]
    h0 = _not_below_zero(sea_level - bot)
    h = _not_below_zero(sea_level + de - bot)
    un = de * math.sqrt(grav / h0) if h0 > 0.0 else 0.0
    if not h > 0.0:
        un = 0.0
    sign = 1.0 if side == 0 or side == 2 else -1.0
    normal = 1 if side < 2 else 2
    q[0] = h
    q[normal] = sign * h * un
    q[3 - normal] = 0.0


class IncidentWave(PointwiseBoundary):
    """Ghost cells of one side from a surface elevation time series.

    A pointwise boundary (:func:`forestpy.hooks.pointwise_boundary`): the framework runs
    :func:`incident_wave_cell` over the side's ghost cells, one launch per side on
    either backend, with the series interpolated once per call on the host.  Calling
    the object (``wave(side, q, aux, x, y, t)``) is the array-level form of the same
    condition.

    Parameters
    ----------
    times, eta : 1D sequences
        The series :math:`\\eta(t)` (m), linearly interpolated, held constant
        outside ``[times[0], times[-1]]``.
    grav, sea_level : float
        As the Riemann solver's parameters.
    relative : bool
        True (default): ``eta`` values are departures from ``sea_level``; False: they
        are absolute surface elevations.

    Examples
    --------
    >>> import numpy as np
    >>> wave = IncidentWave([0.0, 1.0], [0.0, 0.01], grav=9.81)
    >>> q = np.zeros((1, 3, 4, 6)); aux = np.full((1, 1, 4, 6), -0.1)
    >>> wave(0, q, aux, None, None, 0.5)                 # x_lower: ghost columns 0, 1
    >>> round(float(q[0, 0, 0, 0]), 12), float(q[0, 1, 0, 0]) > 0   # h = 0.105, u > 0
    (0.105, True)
    """

    def __init__(self, times, eta, *, grav: float = 9.81, sea_level: float = 0.0,
                 relative: bool = True):
        t = np.asarray(times, dtype=np.float64)
        e = np.asarray(eta, dtype=np.float64)
        if t.ndim != 1 or e.shape != t.shape or len(t) < 1:
            raise ValueError(
                f"incident wave needs 1D times and eta of the same length, got shapes "
                f"{t.shape} and {e.shape}"
            )
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(e))):
            raise ValueError("incident wave times and eta must be finite")
        if np.any(np.diff(t) <= 0):
            raise ValueError("incident wave times must increase strictly")
        if not grav > 0:
            raise ValueError(f"grav must be > 0, got {grav}")
        self.times = t
        self.eta = e
        self.grav = float(grav)
        self.sea_level = float(sea_level)
        self.relative = bool(relative)
        super().__init__(incident_wave_cell, params=(self.grav, self.sea_level),
                         value=self.elevation)

    def elevation(self, t: float) -> float:
        """Departure of the incident surface from sea level at time ``t``."""
        e = float(np.interp(t, self.times, self.eta))
        return e if self.relative else e - self.sea_level

    def __call__(self, side, q, aux, x, y, t):
        xp = array_module(q)
        # the first half of the columns (rows) on that side: every ghost layer, whatever
        # mbc is (mx >= 2 mbc); the framework copies back only the ghost layers
        n = q.shape[3] if side < 2 else q.shape[2]
        m = n // 2
        g = slice(0, m) if side in (0, 2) else slice(n - m, n)
        if side < 2:
            bot = aux[:, 0, :, g]
        else:
            bot = aux[:, 0, g, :]
        de = self.elevation(t)
        h0 = xp.maximum(self.sea_level - bot, 0.0)
        h = xp.maximum(self.sea_level + de - bot, 0.0)
        un = xp.where(h0 > 0.0, de * xp.sqrt(self.grav / xp.where(h0 > 0.0, h0, 1.0)), 0.0)
        un = xp.where(h > 0.0, un, 0.0)
        sign = 1.0 if side in (0, 2) else -1.0
        mn, mt = (1, 2) if side < 2 else (2, 1)
        if side < 2:
            q[:, 0, :, g] = h
            q[:, mn, :, g] = sign * h * un
            q[:, mt, :, g] = 0.0
        else:
            q[:, 0, g, :] = h
            q[:, mn, g, :] = sign * h * un
            q[:, mt, g, :] = 0.0


def side_conditions(**sides):
    """The ``bc`` option from keyword arguments ``x_lower=..., x_upper=..., y_lower=...,
    y_upper=...`` (each "wall", "extrap" or a callable; missing sides: "wall").

    >>> side_conditions(x_upper="extrap")
    ('wall', 'extrap', 'wall', 'wall')
    """
    unknown = set(sides) - set(SIDES)
    if unknown:
        raise ValueError(f"unknown side(s) {sorted(unknown)}; valid: {SIDES}")
    return tuple(sides.get(s, "wall") for s in SIDES)
