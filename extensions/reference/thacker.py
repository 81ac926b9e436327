r"""Thacker's (1981) planar surface oscillating in a paraboloid: an exact wet/dry solution.

Bottom :math:`b(x, y) = h_0 (r^2/a^2 - 1)`; the water is a disc of radius :math:`a`
whose centre circles the bowl's axis at the distance :math:`\eta` (a length) with
:math:`\omega = \sqrt{2 g h_0}/a`; its surface is the plane

.. math::

    W(x, y, t) = \frac{\eta h_0}{a^2}\left(2 x \cos\omega t + 2 y \sin\omega t - \eta\right),

the depth :math:`h = \max(0, W - b)`, the velocity uniform,
:math:`u = -\eta\omega\sin\omega t`, :math:`v = \eta\omega\cos\omega t`.  The shoreline
moves over the whole slope, so the case tests wet/dry fronts together with the bottom
source term in the deep interior (SWASHES 4.2.2 uses :math:`a = 1`, :math:`h_0 = 0.1`,
:math:`\eta = 0.5` on :math:`[-2, 2]^2`).

References: W. C. Thacker, Some exact solutions to the nonlinear shallow-water wave
equations, *J. Fluid Mech.* 107 (1981) 499-508; O. Delestre et al., SWASHES: a
compilation of shallow water analytic solutions, *Int. J. Numer. Meth. Fluids* 72
(2013) 269-300.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ThackerPlanar"]


class ThackerPlanar:
    """Exact solution; lengths in metres, ``eta`` the radius of the centre's circle."""

    def __init__(self, a: float = 1.0, h0: float = 0.1, eta: float = 0.5,
                 grav: float = 9.81):
        if not (a > 0.0 and h0 > 0.0 and grav > 0.0 and 0.0 <= eta < a):
            raise ValueError(f"ThackerPlanar needs a, h0, grav > 0 and 0 <= eta < a; got "
                             f"a={a}, h0={h0}, eta={eta}, grav={grav}")
        self.a, self.h0, self.eta, self.grav = float(a), float(h0), float(eta), float(grav)
        self.omega = math.sqrt(2.0 * grav * h0) / a
        self.period = 2.0 * math.pi / self.omega

    def bottom(self, x, y):
        return self.h0 * ((np.asarray(x) ** 2 + np.asarray(y) ** 2) / self.a**2 - 1.0)

    def cell_average_bottom(self, x, y, dx, dy):
        """Exact averages of the paraboloid over cells ``dx x dy`` centred at ``(x, y)``."""
        return self.h0 * ((np.asarray(x) ** 2 + np.asarray(y) ** 2
                           + (np.asarray(dx) ** 2 + np.asarray(dy) ** 2) / 12.0)
                          / self.a**2 - 1.0)

    def surface(self, x, y, t):
        wt = self.omega * t
        return (self.eta * self.h0 / self.a**2
                * (2.0 * np.asarray(x) * math.cos(wt) + 2.0 * np.asarray(y) * math.sin(wt)
                   - self.eta))

    def depth(self, x, y, t):
        return np.maximum(0.0, self.surface(x, y, t) - self.bottom(x, y))

    def velocity(self, t):
        """``(u, v)`` of the water (the same everywhere it is wet)."""
        wt = self.omega * t
        return -self.eta * self.omega * math.sin(wt), self.eta * self.omega * math.cos(wt)

    def centre(self, t):
        """Centre of the wet disc."""
        wt = self.omega * t
        return self.eta * math.cos(wt), self.eta * math.sin(wt)

    def cell_average_depth(self, x, y, dx, dy, t, n: int = 16):
        """Depth averaged over cells ``dx x dy`` centred at ``(x, y)``: exact where the
        cell is wholly wet (the surface is a plane, the bottom's average is known),
        zero where it is wholly dry, the n x n midpoint rule where the shoreline
        crosses it."""
        x, y, dx, dy = np.broadcast_arrays(*(np.asarray(v, float) for v in (x, y, dx, dy)))
        cx, cy = self.centre(t)
        far = np.hypot(np.abs(x - cx) + dx / 2, np.abs(y - cy) + dy / 2)
        near = np.hypot(np.maximum(np.abs(x - cx) - dx / 2, 0.0),
                        np.maximum(np.abs(y - cy) - dy / 2, 0.0))
        wet = far <= self.a
        shore = ~wet & (near < self.a)
        out = np.where(wet, self.surface(x, y, t) - self.cell_average_bottom(x, y, dx, dy), 0.0)
        if np.any(shore):
            xs, ys, dxs, dys = x[shore], y[shore], dx[shore], dy[shore]
            total = np.zeros(xs.shape)
            offs = (np.arange(n) + 0.5) / n - 0.5
            for ox in offs:
                for oy in offs:
                    total += self.depth(xs + ox * dxs, ys + oy * dys, t)
            out[shore] = total / (n * n)
        return out
