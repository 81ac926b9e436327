"""HWFV1 time stepping: encode -> significance -> parallel traversal -> FV1 on the leaves
(neighbours taken at the leaf's own level) -> project the leaves back to the finest
level.  :class:`HWFV1` runs adaptive (``eps >= 0``) or uniform (``eps=None``) on the CPU
with Numba kernels."""

import time

import numba
import numpy as np

from forestpy.callbacks import report_start, report_step

from . import mra
from .fv1 import INFLOW, OPEN, WALL, cell_update, dt_uniform, ghost_bc, step_uniform, wave_speed
from .mra import demorton, haar, morton

__all__ = ["HWFV1", "HWFV1Tree", "stoker", "bed_stats"]

BCS = {"wall": WALL, "open": OPEN, "inflow": INFLOW}


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
def _update_leaves(s, sig, lev, code, L, dx, dy, dt, g, n_manning, bc, eta_in, new):
    """FV1 update of every leaf from its neighbours at its own level; the new (h, qx, qy)
    of leaf (n, m) goes to ``new[:, offset(n) + m]`` (a hierarchy-sized buffer)."""
    for k in numba.prange(lev.size):
        c = np.empty(4)
        e = np.empty(4)
        w = np.empty(4)
        no = np.empty(4)
        so = np.empty(4)
        out = np.empty(3)
        p = (4 ** lev[k] - 1) // 3 + code[k]
        # every node is encoded: the neighbours' stored values (sparse=False)
        _leaf_update(s, sig, False, p, lev[k], L, dx, dy, dt, g, n_manning, bc, eta_in,
                     c, e, w, no, so, out)
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
        self.cell_updates = 0  # leaves (or cells) updated, summed over the steps
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

    def frame_fields(self) -> dict:
        """The state on the finest grid for a ParaView frame
        (:class:`forestpy.io.vtk.GridOutput`): depth, discharges, bed, surface, speed."""
        h, qx, qy, z = (np.asarray(a, dtype=np.float64) for a in self.state())
        wet = h > 1e-10
        speed = np.where(wet, np.hypot(qx, qy) / np.where(wet, h, 1.0), 0.0)
        x0, _, y0, _ = self.extent
        return {"fields": {"depth": h, "qx": qx, "qy": qy, "bed": z, "surface": h + z,
                           "speed": speed},
                "lower": (x0, y0), "spacing": (self.dx, self.dy),
                "units": {"x": "m", "y": "m", "t": "s", "depth": "m", "qx": "m2 s-1",
                          "qy": "m2 s-1", "bed": "m", "surface": "m", "speed": "m s-1"},
                "block": f"level {self.L} (finest, uniform)"}

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
            _update_leaves(self.s, self.sig, lev, code, self.L, self.dx, self.dy, dt, self.g,
                           self.n_manning, self.bc, self._eta_in(), self.new)
            _project(self.new, self.level, self.L, self.s)
            self.time_mra += t1 - t0
            self.time_fv += time.perf_counter() - t1
            self.nleaves = lev.size
            self.leaf_history.append((self.t, int(lev.size)))
        self.t += dt
        self.steps += 1
        self._count_updates()
        report_step(self, t_end if np.isfinite(t_end) else None)
        return dt

    def _count_updates(self) -> None:
        """Add this step's updated leaves (or cells) to ``cell_updates`` (progress)."""
        n = getattr(self, "nleaves", None)
        if not n:
            q = getattr(self, "q", None)
            n = q[0].size if q is not None else 4**self.L
        self.cell_updates = getattr(self, "cell_updates", 0) + int(n)

    def run(self, t_final):
        if not np.isfinite(t_final) or t_final < self.t:
            raise ValueError(f"t_final={t_final} must be finite and >= t={self.t}")
        report_start(self, t_final)
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


def bed_stats(s, d, L):
    """Per node: max and max |.| of the finest bed under it, and the largest bed detail
    of its subtree (levels n..L-1) scaled to the finest threshold (|d| 2^(L-n)), so that
    a dry leaf with ``zsub <= eps`` has no significant detail below it."""
    oL = mra.offset(L)
    zf = s[3, oL:]
    zmax = np.empty(mra.ntotal(L))
    zabs = np.empty(mra.ntotal(L))
    zsub = np.zeros(mra.ntotal(L))
    for n in range(L + 1):
        blk = zf.reshape(4**n, -1)
        zmax[mra.offset(n):mra.offset(n + 1)] = blk.max(axis=1)
        zabs[mra.offset(n):mra.offset(n + 1)] = np.abs(blk).max(axis=1)
    for n in range(L - 1, -1, -1):
        o, oc = mra.offset(n), mra.offset(n + 1)
        own = np.abs(d[3, :, o:oc]).max(axis=0) * 2.0 ** (L - n)
        kids = zsub[oc:oc + 4 ** (n + 1)].reshape(-1, 4).max(axis=1)
        zsub[o:oc] = np.maximum(own, kids)
    return zmax, zabs, zsub


# -- O(tree nodes) adaptive stepping on the CPU (same scheme as solvers.hwfv1.gpu) ------
@numba.njit(cache=True, inline="always")
def _node_value(s, sig_old, sparse, x, n, out):
    """(h, qx, qy, z) of node ``x`` (level ``n``) as encoding the projected finest data
    gives it: stored for nodes of the old tree (every node after a full encode), derived
    from the old leaf above it otherwise.  Also the GPU's device function
    (:mod:`.gpu`, through ``cuda_device``)."""
    m = x - ((1 << (2 * n)) - 1) // 3  # level offsets (4^n - 1) / 3
    if sparse:
        while n > 0 and not sig_old[((1 << (2 * n - 2)) - 1) // 3 + (m >> 2)]:
            n -= 1
            m >>= 2
    a = ((1 << (2 * n)) - 1) // 3 + m
    out[3] = s[3, x]
    if a == x:
        out[0] = s[0, x]
        out[1] = s[1, x]
        out[2] = s[2, x]
    else:
        ha = s[0, a]
        out[0] = max(0.0, ha + s[3, a] - s[3, x]) if ha > 0.0 else ha
        out[1] = s[1, a]
        out[2] = s[2, a]


@numba.njit(cache=True, inline="always")
def _leaf_update(s, sig_old, sparse, x, n, L, dx, dy, dt, g, n_manning, bc, eta_in, c, e, w,
                 no, so, out):
    """FV1 update of leaf ``x`` (level ``n``) from its four neighbours at its own level
    (:func:`_node_value`; ghost states beyond the domain, :func:`~.fv1.ghost_bc`): the
    leaf's (h, qx, qy, z) to ``c``, its new (h, qx, qy) to ``out``.  ``e, w, no, so``
    are scratch for the neighbours.  The CPU kernels and the GPU's ``k_update``
    (:mod:`.gpu`, through ``cuda_device``) run this one body."""
    off = ((1 << (2 * n)) - 1) // 3
    size = 1 << n
    i, j = demorton(x - off)
    _node_value(s, sig_old, sparse, x, n, c)
    if i + 1 < size:
        _node_value(s, sig_old, sparse, off + morton(i + 1, j), n, e)
    else:
        e[0], e[1], e[2], e[3] = ghost_bc(c[0], c[1], c[2], c[3], True, bc[1], eta_in, g)
    if i > 0:
        _node_value(s, sig_old, sparse, off + morton(i - 1, j), n, w)
    else:
        w[0], w[1], w[2], w[3] = ghost_bc(c[0], c[1], c[2], c[3], True, bc[0], eta_in, g)
    if j + 1 < size:
        _node_value(s, sig_old, sparse, off + morton(i, j + 1), n, no)
    else:
        no[0], no[1], no[2], no[3] = ghost_bc(c[0], c[1], c[2], c[3], False, bc[3], eta_in,
                                              g)
    if j > 0:
        _node_value(s, sig_old, sparse, off + morton(i, j - 1), n, so)
    else:
        so[0], so[1], so[2], so[3] = ghost_bc(c[0], c[1], c[2], c[3], False, bc[2], eta_in,
                                              g)
    fac = 2.0 ** (L - n)
    cell_update(c, e, w, no, so, dx * fac, dy * fac, dt, g, n_manning, out)


@numba.njit(cache=True, inline="always")
def _projection_check(out, z, x, n, L, zmax, zabs, zsub, eps):
    """For leaf ``x`` (level ``n``, bed ``z``, new values ``out``): the largest |eta| of
    its projection onto the finest cells, and whether that projection is not flat (the
    next step must then run the full MRA): a wet leaf whose block has cells above its
    surface, or a dry leaf over a bed whose details may be significant.  Also the GPU's
    (:mod:`.gpu`)."""
    hn = out[0]
    eta = hn + z
    if n == L or hn > 0.0:
        return abs(eta), n < L and eta < zmax[x]
    return zabs[x], zsub[x] > eps


@numba.njit(cache=True, parallel=True)
def _project_tree(s, newv, sig, L):
    """Project the leaves of the tree ``sig`` (values ``newv``) onto every finest cell;
    returns the maxima max(1, |eta|), max(1, |qx|), max(1, |qy|) of the result."""
    oL = (4**L - 1) // 3
    nf = 4**L
    part = np.zeros((3, nf))
    for m in numba.prange(nf):
        n = 0
        while n < L and sig[(4**n - 1) // 3 + (m >> (2 * (L - n)))]:
            n += 1
        w = 2 * (L - n)
        p = (4**n - 1) // 3 + (m >> w)
        q = oL + m
        hn = newv[0, p]
        s[0, q] = max(0.0, hn + s[3, p] - s[3, q]) if w > 0 and hn > 0.0 else hn
        s[1, q] = newv[1, p]
        s[2, q] = newv[2, p]
        part[0, m] = abs(s[0, q] + s[3, q])
        part[1, m] = abs(s[1, q])
        part[2, m] = abs(s[2, q])
    return np.array([max(1.0, part[0].max()), max(1.0, part[1].max()),
                     max(1.0, part[2].max())])


@numba.njit(cache=True, inline="always")
def _encode_node(s, newv, sig_old, sparse, p, c, n, L, eps, norm):
    """Haar analysis of node ``p`` (level ``n``, first child ``c``) if it is an internal
    node of the old tree (any node if not ``sparse``); returns its significance flag
    (details above ``eps 2^(n-L)`` times the field maxima ``norm``).  In a ``sparse``
    step the leaf children first get their new values; a root that is the only leaf
    gets its own.  The CPU's :func:`_encode_tree` and the GPU's ``k_encode``
    (:mod:`.gpu`) run this body."""
    flag = False
    if not sparse or sig_old[p]:
        if sparse:
            for k in range(4):
                if n + 1 == L or not sig_old[c + k]:
                    for f in range(3):
                        s[f, c + k] = newv[f, c + k]
        thr = eps * 2.0 ** (n - L)
        flag = eps == 0.0
        _, dz0, dz1, dz2 = haar(s[3, c], s[3, c + 1], s[3, c + 2], s[3, c + 3])
        for f in range(3):
            s[f, p], a, b, g = haar(s[f, c], s[f, c + 1], s[f, c + 2], s[f, c + 3])
            if f == 0:  # free surface eta = h + z
                a += dz0
                b += dz1
                g += dz2
            lim = thr * norm[f]
            if abs(a) > lim or abs(b) > lim or abs(g) > lim:
                flag = True
    elif sparse and p == 0:  # the root is the only leaf
        for f in range(3):
            s[f, 0] = newv[f, 0]
    return flag


@numba.njit(cache=True, parallel=True)
def _encode_tree(s, newv, sig_old, sig_new, raw, norm, L, eps, sparse):
    """Haar analysis of the internal nodes of the old tree (of every node if not
    ``sparse``), significance flags into ``raw``, ``sig_new`` cleared."""
    for n in range(L - 1, -1, -1):
        op = (4**n - 1) // 3
        oc = (4 ** (n + 1) - 1) // 3
        for m in numba.prange(4**n):
            p = op + m
            sig_new[p] = False
            raw[p] = _encode_node(s, newv, sig_old, sparse, p, oc + 4 * m, n, L, eps, norm)


@numba.njit(cache=True)
def _mark(sig, n, m):
    while True:
        q = (4**n - 1) // 3 + m
        if sig[q]:
            return
        sig[q] = True
        if n == 0:
            return
        n -= 1
        m >>= 2


@numba.njit(cache=True)
def _predict_tree(raw, L, sig):
    """Prediction as a scatter from the flagged nodes (the node, its 8 same-level
    neighbours and its children become significant, with their ancestors); then the
    leaves: children of significant nodes that are not significant (levels, indices)."""
    nint = (4**L - 1) // 3
    n = 0
    for p in range(nint):
        while (4 ** (n + 1) - 1) // 3 <= p:
            n += 1
        if not raw[p]:
            continue
        m = p - (4**n - 1) // 3
        size = 1 << n
        i, j = demorton(m)
        for dj in range(-1, 2):
            for di in range(-1, 2):
                ii = i + di
                jj = j + dj
                if 0 <= ii < size and 0 <= jj < size:
                    _mark(sig, n, morton(ii, jj))
        if n + 1 < L:
            for k in range(4):
                _mark(sig, n + 1, 4 * m + k)
    cnt = 0 if sig[0] else 1
    for p in range(nint):
        if sig[p]:
            cnt += 4
    leaves = np.empty(cnt, dtype=np.int64)
    levels = np.empty(cnt, dtype=np.int64)
    k = 0
    n = 0
    if not sig[0]:
        leaves[0] = 0
        levels[0] = 0
        k = 1
    for p in range(nint):
        while (4 ** (n + 1) - 1) // 3 <= p:
            n += 1
        if sig[p]:
            c = (4 ** (n + 1) - 1) // 3 + 4 * (p - (4**n - 1) // 3)
            for q in range(4):
                if n + 1 == L or not sig[c + q]:
                    leaves[k] = c + q
                    levels[k] = n + 1
                    k += 1
    return leaves[:k], levels[:k]


@numba.njit(cache=True, parallel=True)
def _dt_tree(s, sig_old, sparse, leaves, levels, L, dx, dy, g, cfl):
    r = np.empty(leaves.size)
    for k in numba.prange(leaves.size):
        v = np.empty(4)
        _node_value(s, sig_old, sparse, leaves[k], levels[k], v)
        w = wave_speed(v[0], v[1], v[2], g)
        r[k] = min(dx, dy) * 2.0 ** (L - levels[k]) / w if w > 0.0 else 1e300
    return cfl * r.min() if r.size else 1e300


@numba.njit(cache=True, parallel=True)
def _update_tree(s, sig_old, sparse, leaves, levels, L, dx, dy, dt, g, n_manning, bc,
                 eta_in, newv, zmax, zabs, zsub, eps):
    """FV1 on every leaf from its neighbours at its own level (derived below old
    leaves); new values to ``newv``.  Returns the field maxima of the projected data and
    whether a projection is not flat (the next step then runs the full MRA)."""
    nl = leaves.size
    part = np.zeros((4, nl))
    for k in numba.prange(nl):
        c = np.empty(4)
        e = np.empty(4)
        w = np.empty(4)
        no = np.empty(4)
        so = np.empty(4)
        out = np.empty(3)
        x = leaves[k]
        n = levels[k]
        _leaf_update(s, sig_old, sparse, x, n, L, dx, dy, dt, g, n_manning, bc, eta_in,
                     c, e, w, no, so, out)
        newv[0, x] = out[0]
        newv[1, x] = out[1]
        newv[2, x] = out[2]
        v, not_flat = _projection_check(out, c[3], x, n, L, zmax, zabs, zsub, eps)
        part[0, k] = v
        if not_flat:
            part[3, k] = 1.0
        part[1, k] = abs(out[1])
        part[2, k] = abs(out[2])
    norm = np.ones(3)
    full = False
    if nl:
        norm[0] = max(1.0, part[0].max())
        norm[1] = max(1.0, part[1].max())
        norm[2] = max(1.0, part[2].max())
        full = part[3].max() > 0.0
    return norm, full


class HWFV1Tree(HWFV1):
    """:class:`HWFV1` whose adaptive step costs O(tree nodes) instead of O(4^L): the
    scheme of :mod:`solvers.hwfv1.gpu` on the CPU (coefficients only for the nodes of
    the current tree, nodes below a leaf derived from it in closed form, a full-finest
    step where a leaf's projection is not flat).  Same results as :class:`HWFV1` to
    round-off; ``sparse_steps`` and ``full_steps`` count the two kinds of steps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.eps is None:
            return
        L = self.L
        mra.encode(self.s, self.d, L)
        self.zmax, self.zabs, self.zsub = bed_stats(self.s, self.d, L)
        self.d = None
        self.sigs = [np.zeros(mra.offset(L), dtype=np.bool_) for _ in range(2)]
        self.newv = np.zeros((3, mra.ntotal(L)))
        fine = self.s[:, mra.offset(L):]
        self._norm = np.maximum(1.0, [np.abs(fine[0] + fine[3]).max(),
                                      np.abs(fine[1]).max(), np.abs(fine[2]).max()])
        self._mode = "initial"  # finest data valid, every node to be encoded
        self.sparse_steps = self.full_steps = 0

    def state(self):
        if self.eps is not None and self._mode != "initial":
            _project_tree(self.s, self.newv, self.sigs[0], self.L)
        return super().state()

    def step(self, t_end=np.inf):
        if self.eps is None:
            return super().step(t_end)
        L = self.L
        t0 = time.perf_counter()
        old, new = self.sigs
        if self._mode == "full":
            self._norm = _project_tree(self.s, self.newv, old, L)
        sparse = self._mode == "sparse"
        _encode_tree(self.s, self.newv, old, new, self.raw, self._norm, L, float(self.eps),
                     sparse)
        leaves, levels = _predict_tree(self.raw, L, new)
        t1 = time.perf_counter()
        dt = min(_dt_tree(self.s, old, sparse, leaves, levels, L, self.dx, self.dy, self.g,
                          self.cfl), t_end - self.t)
        if not dt > 0:
            return dt
        norm, full = _update_tree(self.s, old, sparse, leaves, levels, L, self.dx, self.dy,
                                  dt, self.g, self.n_manning, self.bc, self._eta_in(),
                                  self.newv, self.zmax, self.zabs, self.zsub,
                                  float(self.eps))
        if sparse:
            self.sparse_steps += 1
        else:
            self.full_steps += 1
        self._norm = norm
        self._mode = "full" if full else "sparse"
        self.sigs = [new, old]
        self.time_mra += t1 - t0
        self.time_fv += time.perf_counter() - t1
        self.nleaves = int(leaves.size)
        self.leaf_history.append((self.t, self.nleaves))
        self.t += dt
        self.steps += 1
        self._count_updates()
        report_step(self, t_end if np.isfinite(t_end) else None)
        return dt
