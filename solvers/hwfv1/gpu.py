"""HWFV1 on the GPU: the same MRA, traversal and FV1 update as the CPU path, as
Numba-CUDA kernels with the pointwise flux/friction code shared through
:func:`forestpy.cuda_device.cuda_device`.  Arrays are Numba device arrays (NumPy-backed
in the CUDA simulator, ``NUMBA_ENABLE_CUDASIM=1``).

One adaptive step is 5 + ceil(L / 5) kernel launches and no host round trip:

* ``k_encode`` (one launch per 5 levels): a block of 256 threads encodes 256 parents,
  then, after a barrier, their 64 parents, ... up to 5 levels (the children of a parent
  are contiguous in Z-order, so every block works on its own subtree).  It writes the
  scale coefficients of h, qx, qy (the bed's are fixed and computed once), flags the
  significant details directly (no detail array is stored) and clears ``sig``;
* ``k_predict`` (one launch for all levels): Harten prediction per cell; a flagged cell
  walks up and makes its ancestors significant (stops at an ancestor already flagged:
  whoever flagged it walks on);
* ``k_walk`` (one thread per finest cell): parallel traversal; records the leaf level
  over every finest cell and reduces the CFL limit and the leaf count of the block with
  one atomic each;
* ``k_update`` (one thread per finest cell, the first cell of each leaf works): FV1 on
  the leaf from its neighbours at its own level, dt computed on the device;
* ``k_project`` (one thread per finest cell): writes the leaf value to the finest cell
  and reduces the field maxima used to normalise the next step's details;
* ``k_finish`` (one thread): t += dt, step count, histories.

``run`` launches many steps before it reads the clock back (the number is bounded by the
steps left at the last dt; steps after ``t_final`` do nothing).
"""

import time

import numpy as np
from numba import cuda

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import cuda_device

from . import fv1, mra
from .solver import HWFV1

__all__ = ["HWFV1GPU"]

TPB = 64 if cuda_simulator_enabled() else 256  # a power of 4
LEVELS_PER_LAUNCH = (TPB.bit_length() - 1) // 2 + 1
HIST = 4096  # history slots per flush

_morton = cuda_device(mra.morton)
_demorton = cuda_device(mra.demorton)
_cell_update = cuda_device(fv1.cell_update)
_ghost = cuda_device(fv1.ghost)
_wave = cuda_device(fv1.wave_speed)


@cuda.jit(device=True, inline=True)
def _off(n):
    return ((1 << (2 * n)) - 1) // 3


@cuda.jit(device=True, inline=True)
def _dt(cfl, rmin, t, t_end):
    return min(cfl * rmin[0], t_end - t[0])


@cuda.jit
def k_encode(s, raw, sig, norm, par, n_start, nlev, L, eps):
    t = cuda.threadIdx.x
    base = cuda.blockIdx.x * TPB
    width = TPB
    if n_start == L - 1 and base == 0 and t < 3:
        norm[1 - par, t] = 1.0  # reset the maxima that k_project of this step fills
    n = n_start
    for _ in range(nlev):
        m = base + t
        if t < width and m < (1 << (2 * n)):
            p = _off(n) + m
            c = _off(n + 1) + 4 * m
            thr = eps * 2.0 ** (n - L)
            flag = eps == 0.0
            z0 = s[3, c]
            z1 = s[3, c + 1]
            z2 = s[3, c + 2]
            z3 = s[3, c + 3]
            dz0 = 0.25 * ((z1 + z3) - (z0 + z2))
            dz1 = 0.25 * ((z2 + z3) - (z0 + z1))
            dz2 = 0.25 * ((z0 + z3) - (z1 + z2))
            for f in range(3):
                c0 = s[f, c]
                c1 = s[f, c + 1]
                c2 = s[f, c + 2]
                c3 = s[f, c + 3]
                s[f, p] = 0.25 * ((c0 + c1) + (c2 + c3))
                a = 0.25 * ((c1 + c3) - (c0 + c2))
                b = 0.25 * ((c2 + c3) - (c0 + c1))
                g = 0.25 * ((c0 + c3) - (c1 + c2))
                if f == 0:  # free surface eta = h + z
                    a += dz0
                    b += dz1
                    g += dz2
                lim = thr * norm[par, f]
                if abs(a) > lim or abs(b) > lim or abs(g) > lim:
                    flag = True
            raw[p] = flag
            sig[p] = False
        cuda.syncthreads()
        base >>= 2
        width >>= 2
        n -= 1


@cuda.jit
def k_predict(raw, sig, L):
    p = cuda.grid(1)
    if p >= _off(L):
        return
    n = 0
    while _off(n + 1) <= p:
        n += 1
    op = _off(n)
    m = p - op
    size = 1 << n
    i, j = _demorton(m)
    flag = False
    for dj in range(-1, 2):
        for di in range(-1, 2):
            ii = i + di
            jj = j + dj
            if 0 <= ii < size and 0 <= jj < size and raw[op + _morton(ii, jj)]:
                flag = True
    if n > 0 and raw[_off(n - 1) + (m >> 2)]:
        flag = True
    if flag:
        sig[p] = True
        while n > 0:
            n -= 1
            m >>= 2
            q = _off(n) + m
            if sig[q]:
                break
            sig[q] = True


@cuda.jit
def k_walk(sig, s, L, level, dx, dy, g, rmin, count, slot):
    m = cuda.grid(1)
    tid = cuda.threadIdx.x
    sh_r = cuda.shared.array(TPB, np.float64)
    sh_c = cuda.shared.array(TPB, np.int32)
    r = 1e300
    c = 0
    if m < (1 << (2 * L)):
        n = 0
        while n < L and sig[_off(n) + (m >> (2 * (L - n)))]:
            n += 1
        level[m] = n
        w = 2 * (L - n)
        if (m & ((1 << w) - 1)) == 0:
            p = _off(n) + (m >> w)
            v = _wave(s[0, p], s[1, p], s[2, p], g)
            size = min(dx, dy) * 2.0 ** (L - n)
            r = size / v if v > 0.0 else 1e300
            c = 1
    sh_r[tid] = r
    sh_c[tid] = c
    cuda.syncthreads()
    stride = TPB // 2
    while stride > 0:
        if tid < stride:
            sh_r[tid] = min(sh_r[tid], sh_r[tid + stride])
            sh_c[tid] += sh_c[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        cuda.atomic.min(rmin, 0, sh_r[0])
        cuda.atomic.add(count, slot, sh_c[0])


@cuda.jit
def k_update(s, level, L, dx, dy, cfl, rmin, t, t_end, g, nm, walls, new):
    mm = cuda.grid(1)
    if mm >= (1 << (2 * L)):
        return
    n = int(level[mm])
    wl = 2 * (L - n)
    if (mm & ((1 << wl) - 1)) != 0:
        return
    dt = _dt(cfl, rmin, t, t_end)
    if not dt > 0.0:
        return
    c = cuda.local.array(4, np.float64)
    e = cuda.local.array(4, np.float64)
    w = cuda.local.array(4, np.float64)
    no = cuda.local.array(4, np.float64)
    so = cuda.local.array(4, np.float64)
    out = cuda.local.array(3, np.float64)
    off = _off(n)
    size = 1 << n
    code = mm >> wl
    i, j = _demorton(code)
    p0 = off + code
    for f in range(4):
        c[f] = s[f, p0]
    if i + 1 < size:
        p = off + _morton(i + 1, j)
        for f in range(4):
            e[f] = s[f, p]
    else:
        e[0], e[1], e[2], e[3] = _ghost(c[0], c[1], c[2], c[3], True, walls[1])
    if i > 0:
        p = off + _morton(i - 1, j)
        for f in range(4):
            w[f] = s[f, p]
    else:
        w[0], w[1], w[2], w[3] = _ghost(c[0], c[1], c[2], c[3], True, walls[0])
    if j + 1 < size:
        p = off + _morton(i, j + 1)
        for f in range(4):
            no[f] = s[f, p]
    else:
        no[0], no[1], no[2], no[3] = _ghost(c[0], c[1], c[2], c[3], False, walls[3])
    if j > 0:
        p = off + _morton(i, j - 1)
        for f in range(4):
            so[f] = s[f, p]
    else:
        so[0], so[1], so[2], so[3] = _ghost(c[0], c[1], c[2], c[3], False, walls[2])
    fac = 2.0 ** (L - n)
    _cell_update(c, e, w, no, so, dx * fac, dy * fac, dt, g, nm, out)
    new[0, p0] = out[0]
    new[1, p0] = out[1]
    new[2, p0] = out[2]


@cuda.jit
def k_project(new, level, L, s, cfl, rmin, t, t_end, norm, par):
    m = cuda.grid(1)
    tid = cuda.threadIdx.x
    sh = cuda.shared.array((3, TPB), np.float64)
    v0 = 0.0
    v1 = 0.0
    v2 = 0.0
    if m < (1 << (2 * L)):
        q = _off(L) + m
        if _dt(cfl, rmin, t, t_end) > 0.0:
            n = int(level[m])
            w = 2 * (L - n)
            p = _off(n) + (m >> w)
            hn = new[0, p]
            s[0, q] = max(0.0, hn + s[3, p] - s[3, q]) if w > 0 and hn > 0.0 else hn
            s[1, q] = new[1, p]
            s[2, q] = new[2, p]
        v0 = abs(s[0, q] + s[3, q])
        v1 = abs(s[1, q])
        v2 = abs(s[2, q])
    sh[0, tid] = v0
    sh[1, tid] = v1
    sh[2, tid] = v2
    cuda.syncthreads()
    stride = TPB // 2
    while stride > 0:
        if tid < stride:
            for f in range(3):
                sh[f, tid] = max(sh[f, tid], sh[f, tid + stride])
        cuda.syncthreads()
        stride //= 2
    if tid < 3:
        cuda.atomic.max(norm, (1 - par, tid), sh[tid, 0])


@cuda.jit
def k_finish(cfl, rmin, t, t_end, clock, dthist, thist, slot):
    if cuda.grid(1) != 0:
        return
    dt = _dt(cfl, rmin, t, t_end)
    thist[slot] = t[0]
    if dt > 0.0:
        t[0] += dt
        clock[1] += 1.0
        dthist[slot] = dt
    else:
        dthist[slot] = 0.0
    clock[0] = dt
    rmin[0] = 1e300


@cuda.jit
def k_speed_uniform(q, g, umax):
    c = cuda.grid(1)
    tid = cuda.threadIdx.x
    sh = cuda.shared.array(TPB, np.float64)
    ny, nx = q.shape[1], q.shape[2]
    v = 0.0
    if c < nx * ny:
        j = c // nx
        i = c - j * nx
        v = _wave(q[0, j, i], q[1, j, i], q[2, j, i], g)
    sh[tid] = v
    cuda.syncthreads()
    stride = TPB // 2
    while stride > 0:
        if tid < stride:
            sh[tid] = max(sh[tid], sh[tid + stride])
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        cuda.atomic.max(umax, 0, sh[0])


@cuda.jit(device=True, inline=True)
def _dt_uniform(cfl, hmin, umax, t, t_end):
    return min(cfl * hmin / max(umax[0], 1e-300), t_end - t[0])


@cuda.jit
def k_uniform(q, z, qn, dx, dy, cfl, umax, t, t_end, g, nm, walls):
    c = cuda.grid(1)
    ny, nx = z.shape
    if c >= nx * ny:
        return
    j = c // nx
    i = c - j * nx
    dt = _dt_uniform(cfl, min(dx, dy), umax, t, t_end)
    if not dt > 0.0:
        for f in range(3):
            qn[f, j, i] = q[f, j, i]
        return
    cc = cuda.local.array(4, np.float64)
    e = cuda.local.array(4, np.float64)
    w = cuda.local.array(4, np.float64)
    no = cuda.local.array(4, np.float64)
    so = cuda.local.array(4, np.float64)
    out = cuda.local.array(3, np.float64)
    cc[0], cc[1], cc[2], cc[3] = q[0, j, i], q[1, j, i], q[2, j, i], z[j, i]
    if i + 1 < nx:
        e[0], e[1], e[2], e[3] = q[0, j, i + 1], q[1, j, i + 1], q[2, j, i + 1], z[j, i + 1]
    else:
        e[0], e[1], e[2], e[3] = _ghost(cc[0], cc[1], cc[2], cc[3], True, walls[1])
    if i > 0:
        w[0], w[1], w[2], w[3] = q[0, j, i - 1], q[1, j, i - 1], q[2, j, i - 1], z[j, i - 1]
    else:
        w[0], w[1], w[2], w[3] = _ghost(cc[0], cc[1], cc[2], cc[3], True, walls[0])
    if j + 1 < ny:
        no[0], no[1], no[2], no[3] = q[0, j + 1, i], q[1, j + 1, i], q[2, j + 1, i], z[j + 1, i]
    else:
        no[0], no[1], no[2], no[3] = _ghost(cc[0], cc[1], cc[2], cc[3], False, walls[3])
    if j > 0:
        so[0], so[1], so[2], so[3] = q[0, j - 1, i], q[1, j - 1, i], q[2, j - 1, i], z[j - 1, i]
    else:
        so[0], so[1], so[2], so[3] = _ghost(cc[0], cc[1], cc[2], cc[3], False, walls[2])
    _cell_update(cc, e, w, no, so, dx, dy, dt, g, nm, out)
    qn[0, j, i] = out[0]
    qn[1, j, i] = out[1]
    qn[2, j, i] = out[2]


@cuda.jit
def k_finish_uniform(cfl, hmin, umax, t, t_end, clock, dthist, thist, slot):
    if cuda.grid(1) != 0:
        return
    dt = _dt_uniform(cfl, hmin, umax, t, t_end)
    thist[slot] = t[0]
    if dt > 0.0:
        t[0] += dt
        clock[1] += 1.0
        dthist[slot] = dt
    else:
        dthist[slot] = 0.0
    clock[0] = dt
    umax[0] = 0.0


def _blocks(n):
    return (n + TPB - 1) // TPB


class _Launch:
    """One kernel launch of a step with a fixed grid and fixed arguments, of which the
    ones named in ``names`` ({"par" | "slot" | "t_end": position}) change between
    steps."""

    def __init__(self, disp, grid, block, args, **names):
        self.kernel = disp[grid, block]
        self.args, self.names = list(args), names

    def set(self, name, value):
        i = self.names.get(name)
        if i is not None:
            self.args[i] = value

    def __call__(self):
        self.kernel(*self.args)


class HWFV1GPU(HWFV1):
    """:class:`~solvers.hwfv1.solver.HWFV1` with every kernel on the GPU (adaptive, or
    the uniform FV1 baseline for ``eps=None``).  The state, dt and the clock stay on the
    device; ``step`` reads dt back, ``run`` reads the clock only every few steps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.inflow is not None:
            raise ValueError("HWFV1GPU has no 'inflow' boundary (CPU HWFV1 only)")
        dev = cuda.to_device
        L = self.L
        self.walls_d = dev(self.walls)
        self.t_d = dev(np.zeros(1))
        self.clock = dev(np.zeros(2))  # last dt, steps taken
        self.dthist = dev(np.zeros(HIST))
        self.thist = dev(np.zeros(HIST))
        self.count = dev(np.zeros(HIST, dtype=np.int32))
        self._slot = 0
        self._launched = 0
        self._hist_host = []
        cfl, g, nm, dx, dy, inf = self.cfl, self.g, self.n_manning, self.dx, self.dy, np.inf
        nb = _blocks(4**L)
        if self.eps is None:
            self.q, self.z, self._qn = (dev(a) for a in (self.q, self.z, self._qn))
            self.umax = dev(np.zeros(1))
            hmin = min(dx, dy)
            self._plans = []
            for a, b in ((self.q, self._qn), (self._qn, self.q)):
                fv = [_Launch(k_speed_uniform, nb, TPB, (a, g, self.umax)),
                      _Launch(k_uniform, nb, TPB, (a, self.z, b, dx, dy, cfl, self.umax,
                                                   self.t_d, inf, g, nm, self.walls_d),
                              t_end=8),
                      _Launch(k_finish_uniform, 1, 1, (cfl, hmin, self.umax, self.t_d, inf,
                                                       self.clock, self.dthist, self.thist, 0),
                              t_end=4, slot=8)]
                self._plans.append(([], fv))
        else:
            mra.encode(self.s, self.d, L)  # the bed's scale coefficients on every level
            fine = self.s[:, mra.offset(L):]
            norm = np.ones((2, 3))
            norm[0] = np.maximum(1.0, [np.abs(fine[0] + fine[3]).max(),
                                       np.abs(fine[1]).max(), np.abs(fine[2]).max()])
            self.norm = dev(norm)
            self.s = dev(self.s)
            self.d = None  # details are not stored on the GPU
            self.raw = dev(self.raw)
            self.sig = dev(self.sig)
            self.new = cuda.device_array((3, mra.ntotal(L)))
            self.level = cuda.device_array(4**L, dtype=np.int8)
            self.rmin = dev(np.full(1, 1e300))
            eps = float(self.eps)
            self._plans = []
            for par in (0, 1):
                steps, n = [], L - 1
                while n >= 0:
                    nlev = min(LEVELS_PER_LAUNCH, n + 1)
                    steps.append(_Launch(k_encode, _blocks(4**n), TPB,
                                         (self.s, self.raw, self.sig, self.norm, par, n, nlev,
                                          L, eps)))
                    n -= nlev
                steps += [_Launch(k_predict, _blocks(mra.offset(L)), TPB, (self.raw, self.sig, L)),
                          _Launch(k_walk, nb, TPB, (self.sig, self.s, L, self.level, dx, dy, g,
                                                    self.rmin, self.count, 0), slot=9)]
                fv = [_Launch(k_update, nb, TPB, (self.s, self.level, L, dx, dy, cfl, self.rmin,
                                                  self.t_d, inf, g, nm, self.walls_d, self.new),
                              t_end=8),
                      _Launch(k_project, nb, TPB, (self.new, self.level, L, self.s, cfl,
                                                   self.rmin, self.t_d, inf, self.norm, par),
                              t_end=7),
                      _Launch(k_finish, 1, 1, (cfl, self.rmin, self.t_d, inf, self.clock,
                                               self.dthist, self.thist, 0), t_end=3, slot=7)]
                self._plans.append((steps, fv))

    # -- launching ----------------------------------------------------------------
    def _mra_launch(self):
        for k in self._plans[self._launched % 2][0]:
            k.set("slot", self._slot)
            k()

    def _fv_launch(self, t_end):
        t_end = float(t_end)
        for k in self._plans[self._launched % 2][1]:
            k.set("slot", self._slot)
            k.set("t_end", t_end)
            k()
        if self.eps is None:
            self.q, self._qn = self._qn, self.q
        self._launched += 1
        self._slot += 1

    def _launch(self, t_end):
        self._mra_launch()
        self._fv_launch(t_end)

    def _sync(self):
        """Read the clock back; move full or final histories to the host."""
        dt, steps = self.clock.copy_to_host()
        self.t = float(self.t_d.copy_to_host()[0])
        self.steps = int(steps)
        if self._slot:
            dts = self.dthist.copy_to_host()[:self._slot]
            ts = self.thist.copy_to_host()[:self._slot]
            cnt = self.count.copy_to_host()[:self._slot]
            for k in np.flatnonzero(dts > 0):
                self._hist_host.append((float(ts[k]), int(cnt[k]), float(dts[k])))
            self.count.copy_to_device(np.zeros(HIST, dtype=np.int32))
            self._slot = 0
        if self.eps is not None:
            self.leaf_history = [(t, n) for t, n, _ in self._hist_host]
            if self.leaf_history:
                self.nleaves = self.leaf_history[-1][1]
        return float(dt)

    # -- stepping -----------------------------------------------------------------
    def step(self, t_end=np.inf):
        t0 = time.perf_counter()
        self._launch(t_end)
        dt = self._sync()
        self.time_fv += time.perf_counter() - t0
        return dt

    def run(self, t_final):
        if not np.isfinite(t_final) or t_final < self.t:
            raise ValueError(f"t_final={t_final} must be finite and >= t={self.t}")
        t0 = time.perf_counter()
        dt = self._sync()
        while self.t < t_final * (1 - 1e-14):
            if self._hist_host and not dt > 0:
                raise RuntimeError(f"time step collapsed to {dt} at t={self.t}")
            left = (t_final - self.t) / self._hist_host[-1][2] if self._hist_host else 1.0
            nsteps = max(1, min(64, HIST - self._slot, int(0.9 * left)))
            for _ in range(nsteps):
                self._launch(t_final)
            dt = self._sync()
        self.time_fv += time.perf_counter() - t0
        h = self.state()[0]
        if not np.all(np.isfinite(h)) or h.min() < 0:
            raise RuntimeError(f"invalid depth at t={self.t}")
        return self

    def profile(self, nsteps=20):
        """Advance ``nsteps`` steps timing the MRA kernels (encode, prediction, traversal)
        and the FV1 kernels (update, projection, clock) with CUDA events; returns
        ``(mra_seconds, fv_seconds)`` per step."""
        if self.eps is None:
            return 0.0, None
        tm = tf = 0.0
        for _ in range(nsteps):
            e0, e1, e2 = cuda.event(), cuda.event(), cuda.event()
            e0.record()
            self._mra_launch()
            e1.record()
            self._fv_launch(np.inf)
            e2.record()
            e2.synchronize()
            tm += e0.elapsed_time(e1) * 1e-3
            tf += e1.elapsed_time(e2) * 1e-3
        self._sync()
        return tm / nsteps, tf / nsteps

    def state(self):
        if self.eps is None:
            q, z = self.q.copy_to_host(), self.z.copy_to_host()
            return q[0], q[1], q[2], z
        s = self.s.copy_to_host()
        f = mra.from_zorder(np.ascontiguousarray(s[:, mra.offset(self.L):]))
        return f[0], f[1], f[2], f[3]

