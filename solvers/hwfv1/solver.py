"""HWFV1 time stepping: encode -> significance -> parallel traversal -> FV1 on the leaves
(neighbours taken at the leaf's own level) -> project the leaves back to the finest
level.  :class:`HWFV1` runs adaptive (``eps >= 0``) or uniform (``eps=None``) on the CPU
with Numba kernels."""

import time

import numba
import numpy as np

from . import mra
from .fv1 import INFLOW, OPEN, WALL, cell_update, dt_uniform, ghost_bc, step_uniform, wave_speed

__all__ = ["HWFV1", "stoker"]

BCS = {"wall": WALL, "open": OPEN, "inflow": INFLOW}


@numba.njit(cache=True, inline="always")
def _load(s, p, out):
    out[0] = s[0, p]
    out[1] = s[1, p]
    out[2] = s[2, p]
    out[3] = s[3, p]


@numba.njit(cache=True, parallel=True)
def _dt_leaves(s, lev, code, L, dx, dy, g, cfl):
    nl = lev.size
    r = np.empty(nl)
    for k in numba.prange(nl):
        p = (4 ** lev[k] - 1) // 3 + code[k]
        w = wave_speed(s[0, p], s[1, p], s[2, p], g)
        size = min(dx, dy) * 2.0 ** (L - lev[k])
        r[k] = size / w if w > 0.0 else 1e300
    return cfl * r.min()


@numba.njit(cache=True, parallel=True)
def _update_leaves(s, lev, code, L, dx, dy, dt, g, n_manning, bc, eta_in, new):
    """FV1 update of every leaf from its neighbours at its own level; the new (h, qx, qy)
    of leaf (n, m) goes to ``new[:, offset(n) + m]`` (a hierarchy-sized buffer)."""
    for k in numba.prange(lev.size):
        c = np.empty(4)
        e = np.empty(4)
        w = np.empty(4)
        no = np.empty(4)
        so = np.empty(4)
        out = np.empty(3)
        n = lev[k]
        off = (4**n - 1) // 3
        size = 1 << n
        i, j = mra.demorton(code[k])
        _load(s, off + code[k], c)
        if i + 1 < size:
            _load(s, off + mra.morton(i + 1, j), e)
        else:
            e[0], e[1], e[2], e[3] = ghost_bc(c[0], c[1], c[2], c[3], True,
                                                        bc[1], eta_in, g)
        if i > 0:
            _load(s, off + mra.morton(i - 1, j), w)
        else:
            w[0], w[1], w[2], w[3] = ghost_bc(c[0], c[1], c[2], c[3], True,
                                                        bc[0], eta_in, g)
        if j + 1 < size:
            _load(s, off + mra.morton(i, j + 1), no)
        else:
            no[0], no[1], no[2], no[3] = ghost_bc(c[0], c[1], c[2], c[3], False,
                                                        bc[3], eta_in, g)
        if j > 0:
            _load(s, off + mra.morton(i, j - 1), so)
        else:
            so[0], so[1], so[2], so[3] = ghost_bc(c[0], c[1], c[2], c[3], False,
                                                        bc[2], eta_in, g)
        fac = 2.0 ** (L - n)
        cell_update(c, e, w, no, so, dx * fac, dy * fac, dt, g, n_manning, out)
        p = off + code[k]
        new[0, p] = out[0]
        new[1, p] = out[1]
        new[2, p] = out[2]


@numba.njit(cache=True, parallel=True)
def _project(new, level, L, s):
    """Write every leaf's value to its contiguous block of finest cells, one finest cell
    per iteration (``level[m]`` is the level of the leaf over finest cell m, from the
    traversal): the free surface eta = h + z and the discharges are constant over the
    block (zero details), so a lake at rest stays at rest over a varying bed; the depth
    is eta - z_fine."""
    oL = (4**L - 1) // 3
    for m in numba.prange(4**L):
        n = level[m]
        w = 2 * (L - n)
        p = (4**n - 1) // 3 + (m >> w)
        hn = new[0, p]
        s[0, oL + m] = max(0.0, hn + s[3, p] - s[3, oL + m]) if w > 0 and hn > 0.0 else hn
        s[1, oL + m] = new[1, p]
        s[2, oL + m] = new[2, p]


class HWFV1:
    """Shallow water on a 2^L x 2^L grid over ``[x0, x1] x [y0, y1]``.

    Parameters
    ----------
    h, qx, qy, z : arrays (2^L, 2^L), indexed [row j (y), column i (x)]
    extent : (x0, x1, y0, y1)
    eps : float or None
        Wavelet threshold; ``None`` runs the uniform FV1 baseline, ``0`` full resolution
        through the adaptive machinery.
    bc : "wall" or "open", or a 4-tuple (west, east, south, north) of those; the west
        side may be "inflow" (incident wave, see :func:`~solvers.hwfv1.fv1.ghost_bc`)
    inflow : callable ``t -> eta`` (incident surface elevation at time t above still
        water at z = 0), required with an "inflow" side; evaluated at the start of each
        step
    n_manning, g, cfl : Manning coefficient, gravity, Courant number (0.5)
    """

    def __init__(self, h, qx, qy, z, extent, eps=1e-3, bc="wall", n_manning=0.0,
                 g=9.80665, cfl=0.5, inflow=None):
        q = np.stack([np.asarray(a, dtype=np.float64) for a in (h, qx, qy, z)])
        q, self.L = mra._check_grid(q, "h, qx, qy, z")
        if self.L < 1 or self.L > 14:
            raise ValueError(f"grid level L={self.L} outside 1..14")
        if np.any(q[0] < 0) or not np.all(np.isfinite(q)):
            raise ValueError("depth must be finite and non-negative")
        if eps is not None and not eps >= 0:
            raise ValueError(f"eps must be >= 0 or None (uniform), got {eps}")
        bcs = (bc,) * 4 if isinstance(bc, str) else tuple(bc)
        if len(bcs) != 4 or any(b not in BCS for b in bcs):
            raise ValueError(f"bc must be one of {tuple(BCS)} or a 4-tuple of them, got {bc!r}")
        if "inflow" in bcs[1:]:
            raise ValueError(f"only the west side can be 'inflow', got bc={bc!r}")
        if (bcs[0] == "inflow") != (inflow is not None) or not (inflow is None
                                                                or callable(inflow)):
            raise ValueError("an 'inflow' west side needs inflow=callable(t) -> eta, and "
                             "inflow= needs bc[0] == 'inflow'")
        self.walls = np.array([b == "wall" for b in bcs])
        self.bc = np.array([BCS[b] for b in bcs], dtype=np.int64)
        self.inflow = inflow
        x0, x1, y0, y1 = extent
        n = 2**self.L
        self.extent = extent
        self.dx, self.dy = (x1 - x0) / n, (y1 - y0) / n
        self.eps, self.g, self.cfl, self.n_manning = eps, float(g), float(cfl), float(n_manning)
        self.t, self.steps = 0.0, 0
        self.time_mra = self.time_fv = 0.0
        self.leaf_history = []
        if eps is None:
            self.q = np.ascontiguousarray(q[:3])
            self.z = np.ascontiguousarray(q[3])
            self._qn = np.empty_like(self.q)
        else:
            L = self.L
            self.s = np.zeros((4, mra.ntotal(L)))
            self.s[:, mra.offset(L):] = mra.to_zorder(q)
            self.d = np.zeros((4, 3, mra.offset(L)))
            self.sig = np.zeros(mra.offset(L), dtype=np.bool_)
            self.raw = np.zeros(mra.offset(L), dtype=np.bool_)
            self.new = np.zeros((3, mra.ntotal(L)))
            self.is_leaf = np.empty(4**L, dtype=np.bool_)
            self.level = np.empty(4**L, dtype=np.int8)
            self.nleaves = 4**L

    # -- state ------------------------------------------------------------------
    def state(self):
        """(h, qx, qy, z) on the finest grid as (2^L, 2^L) arrays."""
        if self.eps is None:
            return self.q[0], self.q[1], self.q[2], self.z
        f = mra.from_zorder(self.s[:, mra.offset(self.L):])
        return f[0], f[1], f[2], f[3]

    def cell_centres(self):
        x0, _, y0, _ = self.extent
        n = 2**self.L
        return (x0 + (np.arange(n) + 0.5) * self.dx, y0 + (np.arange(n) + 0.5) * self.dy)

    # -- stepping ---------------------------------------------------------------
    def _mra(self):
        """Encode, flag and traverse; returns the leaves (level, morton) and keeps the
        leaf level over every finest cell in ``self.level``."""
        L, s = self.L, self.s
        mra.encode(s, self.d, L)
        mra.significance_swe(s, self.d, float(self.eps), L, self.raw)
        mra.predict(self.raw, L, self.sig)
        mra._walk(self.sig, L, self.is_leaf, self.level)
        return mra._compact_leaves(self.is_leaf, self.level, L)

    def _eta_in(self):
        return 0.0 if self.inflow is None else float(self.inflow(self.t))

    def step(self, t_end=np.inf):
        if self.eps is None:
            t0 = time.perf_counter()
            dt = min(dt_uniform(self.q, self.z, self.dx, self.dy, self.g, self.cfl),
                     t_end - self.t)
            step_uniform(self.q, self.z, self._qn, self.dx, self.dy, dt, self.g,
                         self.n_manning, self.bc, self._eta_in())
            self.q, self._qn = self._qn, self.q
            self.time_fv += time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            lev, code = self._mra()
            t1 = time.perf_counter()
            dt = min(_dt_leaves(self.s, lev, code, self.L, self.dx, self.dy, self.g,
                                self.cfl), t_end - self.t)
            _update_leaves(self.s, lev, code, self.L, self.dx, self.dy, dt, self.g,
                           self.n_manning, self.bc, self._eta_in(), self.new)
            _project(self.new, self.level, self.L, self.s)
            self.time_mra += t1 - t0
            self.time_fv += time.perf_counter() - t1
            self.nleaves = lev.size
            self.leaf_history.append((self.t, int(lev.size)))
        self.t += dt
        self.steps += 1
        return dt

    def run(self, t_final):
        if not np.isfinite(t_final) or t_final < self.t:
            raise ValueError(f"t_final={t_final} must be finite and >= t={self.t}")
        while self.t < t_final * (1 - 1e-14):
            dt = self.step(t_final)
            if not dt > 0:
                raise RuntimeError(f"time step collapsed to {dt} at t={self.t}")
        h = self.state()[0]
        if not np.all(np.isfinite(h)) or h.min() < 0:
            raise RuntimeError(f"invalid depth at t={self.t}")
        return self


def stoker(x, t, hl, hr, x0, g=9.80665):
    """Exact 1D dam-break solution (Stoker, wet bed hr > 0; Ritter for hr = 0) of
    still water hl for x < x0 and hr beyond: returns (h, u) at positions ``x``."""
    from scipy.optimize import brentq

    x = np.asarray(x, dtype=float)
    cl = np.sqrt(g * hl)
    xi = (x - x0) / t
    h = np.full_like(x, hl)
    u = np.zeros_like(x)
    if hr == 0.0:
        fan = (xi >= -cl) & (xi <= 2 * cl)
        h[fan] = (2 * cl - xi[fan]) ** 2 / (9 * g)
        u[fan] = 2.0 / 3.0 * (cl + xi[fan])
        h[xi > 2 * cl] = 0.0
        return h, u
    cr = np.sqrt(g * hr)

    # middle state: u_m = 2(cl - cm); shock speed S = hm u_m / (hm - hr); momentum jump
    def g_(cm):
        hm = cm * cm / g
        um = 2 * (cl - cm)
        return um - (hm - hr) * np.sqrt(0.5 * g * (hm + hr) / (hm * hr))

    cm = brentq(g_, cr, cl)
    hm, um = cm * cm / g, 2 * (cl - cm)
    S = hm * um / (hm - hr)
    fan = (xi >= -cl) & (xi <= um - cm)
    h[fan] = (2 * cl - xi[fan]) ** 2 / (9 * g)
    u[fan] = 2.0 / 3.0 * (cl + xi[fan])
    mid = (xi > um - cm) & (xi < S)
    h[mid], u[mid] = hm, um
    h[xi >= S] = hr
    return h, u
