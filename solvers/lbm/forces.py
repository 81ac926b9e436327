r"""Force on a body every step, on the device: momentum exchange over the body's links,
and the analysis of a force history (mean drag coefficient, Strouhal number).

**Momentum exchange** (Ladd, J. Fluid Mech. 271, 1994; the same sum as
:meth:`.solver.LBM.force_on`, without the host copy).  With half-way bounce-back on a
resting wall each link from a fluid cell ``x`` to a body cell ``x + c_q`` gives the body
``2 c_q f*_q(x)`` per step.  In the AA pattern of :mod:`.kernels`, after *either* step
parity the post-collision ``f*_q(x)`` of such a link sits in slot ``OPP[q]`` of cell
``x`` (the even step writes every ``f*_q`` to its own cell's opposite slot; the odd step
writes the ones aimed at a solid neighbour there), so the force is one gather of the
``L`` link slots (their flat indices are computed once) and a ``(L,) x (L, 3)``
product:

.. math::

    F = \sum_{\rm links} 2 c_q (h_{OPP[q]}(x) + w_q).

:class:`MomentumExchange` does it with the backend's array module (NumPy, or CuPy on the
GPU: no host transfer; the history stays on the device until asked for).
"""

from __future__ import annotations

import numpy as np

from . import fp16
from .lattice import OPP, C, Q, W

__all__ = ["MomentumExchange", "strouhal", "periodic_window"]


class MomentumExchange:
    """Momentum-exchange force on the solid cells ``body`` (bool mask, shape of the
    grid) of :class:`~.solver.LBM` ``sim``, computed on the device.

    ``record()`` (after a step) appends the force to a device history;
    :meth:`history` copies it to the host as an ``(n, 3)`` float64 array.
    """

    def __init__(self, sim, body=None):
        body = sim.solid if body is None else np.asarray(body, dtype=bool)
        if body.shape != sim.shape or np.any(body & ~sim.solid):
            raise ValueError("body must be a mask of solid cells of the grid's shape")
        self.sim = sim
        fluid = ~sim.walls
        flat, coef = [], []
        for q in range(1, Q):
            shift = tuple(-int(s) for s in C[q])
            links = (fluid & np.roll(body, shift, axis=(0, 1, 2))).reshape(-1)  # body[x + c_q]
            cells = np.flatnonzero(links)
            flat.append(OPP[q] * sim.ncell + cells)
            coef.append(np.broadcast_to(2.0 * C[q], (cells.size, 3)))
        flat = np.concatenate(flat)
        coef = np.concatenate(coef).astype(np.float64)
        #: number of fluid-body links
        self.links = int(flat.size)
        xp = sim.backend.xp
        self._flat = sim.backend.to_device(flat)
        self._coef = sim.backend.to_device(coef)
        # the rest weights' share: sum over links of 2 c_q w_q (w_q = w_OPP[q])
        self._const = sim.backend.to_device((coef * W[flat // sim.ncell][:, None]).sum(axis=0))
        self._xp = xp
        self._hist: list = []

    def force(self):
        """The force of the last step (a length-3 array of the backend: not copied)."""
        sim = self.sim
        if sim.t < 1:
            raise ValueError("the force needs at least one step (t >= 1)")
        xp = self._xp
        vals = sim._h.reshape(-1)[self._flat]
        if sim.dtype == np.float16:
            vals = vals.view(xp.float16).astype(xp.float64) * (1.0 / fp16.SCALE)
        else:
            vals = vals.astype(xp.float64)
        return vals @ self._coef + self._const

    def record(self) -> None:
        """Append the last step's force to the (device) history."""
        self._hist.append(self.force())

    def history(self) -> np.ndarray:
        """The recorded forces, ``(n, 3)`` float64 on the host (one transfer)."""
        if not self._hist:
            return np.zeros((0, 3))
        xp = self._xp
        return np.asarray(self.sim.backend.to_host(xp.stack(self._hist)), dtype=np.float64)

    def clear(self) -> None:
        self._hist = []


def periodic_window(signal, fraction: float = 0.5) -> slice:
    """The analysis window: the last ``fraction`` of the record (the transient before
    it is left out)."""
    n = len(signal)
    return slice(n - max(2, int(round(n * fraction))), n)


def strouhal(lift, dt: float, diameter: float, speed: float) -> dict:
    """Shedding frequency of a transverse force history ``lift`` (``(n,)`` or
    ``(n, 2)``: both transverse components, projected on the direction in which they
    vary most) sampled every ``dt``: the peak of the periodogram (mean removed, Hann
    window, zero-padded 8x, peak refined by a parabola through the log magnitudes) and,
    as a cross-check, from the mean spacing of the zero crossings (mean removed,
    smoothed over a tenth of the period).
    Returns ``St = f D / U`` both ways, the frequency, and the oscillation amplitude
    (half the peak-to-peak)."""
    x = np.asarray(lift, dtype=np.float64)
    if x.ndim == 2:
        x = x - x.mean(axis=0)
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        x = x @ vt[0]
    else:
        x = x - x.mean()
    n = x.size
    if n < 8:
        raise ValueError(f"strouhal needs at least 8 samples, got {n}")
    win = np.hanning(n)
    m = 8 * n
    spec = np.abs(np.fft.rfft(x * win, m))
    k = int(np.argmax(spec[1:])) + 1
    if 1 <= k < spec.size - 1:
        a, b, c = np.log(spec[k - 1:k + 2] + 1e-300)
        k = k + 0.5 * (a - c) / (a - 2 * b + c) if (a - 2 * b + c) != 0 else k
    f_fft = k / (m * dt)
    # zero crossings of the signal smoothed over a tenth of the FFT period (so that noise
    # near a crossing does not count as more crossings)
    width = max(1, int(0.1 / (f_fft * dt))) if f_fft > 0 else 1
    xs = np.convolve(x, np.ones(width) / width, mode="valid") if width < n // 4 else x
    s = np.signbit(xs)
    x = xs
    crossings = np.flatnonzero(s[1:] != s[:-1])
    if crossings.size >= 3:
        # linear interpolation of each crossing time
        t = crossings + x[crossings] / (x[crossings] - x[crossings + 1])
        f_zero = (crossings.size - 1) / (2.0 * (t[-1] - t[0]) * dt)
    else:
        f_zero = float("nan")
    return dict(St=f_fft * diameter / speed, St_zero_crossings=f_zero * diameter / speed,
                frequency=f_fft, amplitude=0.5 * float(np.ptp(x)))
