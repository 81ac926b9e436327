"""HWFV1 on the GPU: the same MRA, traversal and FV1 update as the CPU path, as
Numba-CUDA kernels (one thread per cell of a level, per finest cell for the traversal,
per leaf for the update), with the pointwise flux/friction code shared through
:func:`forestpy.cuda_device.cuda_device`.  Arrays are CuPy on a GPU, NumPy in the CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``)."""

import numpy as np
from numba import cuda

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import cuda_device

from . import fv1, mra
from .solver import HWFV1

__all__ = ["HWFV1GPU"]

TPB = 256

_morton = cuda_device(mra.morton)
_demorton = cuda_device(mra.demorton)
_cell_update = cuda_device(fv1.cell_update)
_ghost = cuda_device(fv1.ghost)
_wave = cuda_device(fv1.wave_speed)


@cuda.jit
def k_encode(s, d, n):
    m = cuda.grid(1)
    if m >= 4**n:
        return
    op = (4**n - 1) // 3
    c = (4 ** (n + 1) - 1) // 3 + 4 * m
    for f in range(s.shape[0]):
        c0 = s[f, c]
        c1 = s[f, c + 1]
        c2 = s[f, c + 2]
        c3 = s[f, c + 3]
        s[f, op + m] = 0.25 * ((c0 + c1) + (c2 + c3))
        d[f, 0, op + m] = 0.25 * ((c1 + c3) - (c0 + c2))
        d[f, 1, op + m] = 0.25 * ((c2 + c3) - (c0 + c1))
        d[f, 2, op + m] = 0.25 * ((c0 + c3) - (c1 + c2))


@cuda.jit
def k_sig(d, norm, eps, n, L, raw):
    m = cuda.grid(1)
    if m >= 4**n:
        return
    p = (4**n - 1) // 3 + m
    thr = eps * 2.0 ** (n - L)
    flag = eps == 0.0
    for k in range(3):
        if (abs(d[0, k, p] + d[3, k, p]) > thr * norm[0] or abs(d[1, k, p]) > thr * norm[1]
                or abs(d[2, k, p]) > thr * norm[2]):
            flag = True
    raw[p] = flag


@cuda.jit
def k_predict(raw, n, sig):
    m = cuda.grid(1)
    if m >= 4**n:
        return
    op = (4**n - 1) // 3
    size = 1 << n
    i, j = _demorton(m)
    flag = False
    for dj in range(-1, 2):
        for di in range(-1, 2):
            ii = i + di
            jj = j + dj
            if 0 <= ii < size and 0 <= jj < size and raw[op + _morton(ii, jj)]:
                flag = True
    if n > 0 and raw[(4 ** (n - 1) - 1) // 3 + (m >> 2)]:
        flag = True
    sig[op + m] = flag


@cuda.jit
def k_ancestors(sig, n):
    m = cuda.grid(1)
    if m >= 4 ** (n - 1):
        return
    c = (4**n - 1) // 3 + 4 * m
    if sig[c] or sig[c + 1] or sig[c + 2] or sig[c + 3]:
        sig[(4 ** (n - 1) - 1) // 3 + m] = True


@cuda.jit
def k_walk(sig, L, is_leaf, level):
    m = cuda.grid(1)
    if m >= 4**L:
        return
    n = 0
    while n < L and sig[(4**n - 1) // 3 + (m >> (2 * (L - n)))]:
        n += 1
    level[m] = n
    is_leaf[m] = (m & ((1 << (2 * (L - n))) - 1)) == 0


@cuda.jit
def k_speed_leaves(s, lev, code, L, dx, dy, g, out):
    k = cuda.grid(1)
    if k >= lev.size:
        return
    p = (4 ** lev[k] - 1) // 3 + code[k]
    w = _wave(s[0, p], s[1, p], s[2, p], g)
    size = min(dx, dy) * 2.0 ** (L - lev[k])
    out[k] = size / w if w > 0.0 else 1e300


@cuda.jit
def k_update(s, lev, code, L, dx, dy, dt, g, nm, walls, new):
    k = cuda.grid(1)
    if k >= lev.size:
        return
    c = cuda.local.array(4, np.float64)
    e = cuda.local.array(4, np.float64)
    w = cuda.local.array(4, np.float64)
    no = cuda.local.array(4, np.float64)
    so = cuda.local.array(4, np.float64)
    out = cuda.local.array(3, np.float64)
    n = lev[k]
    off = (4**n - 1) // 3
    size = 1 << n
    i, j = _demorton(code[k])
    p = off + code[k]
    for f in range(4):
        c[f] = s[f, p]
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
    new[0, k] = out[0]
    new[1, k] = out[1]
    new[2, k] = out[2]


@cuda.jit
def k_project(new, lev, code, L, s):
    k = cuda.grid(1)
    if k >= lev.size:
        return
    oL = (4**L - 1) // 3
    w = 2 * (L - lev[k])
    first = oL + (code[k] << w)
    eta = new[0, k] + s[3, (4 ** lev[k] - 1) // 3 + code[k]]
    for m in range(first, first + (1 << w)):
        s[0, m] = max(0.0, eta - s[3, m]) if w > 0 and new[0, k] > 0.0 else new[0, k]
        s[1, m] = new[1, k]
        s[2, m] = new[2, k]


@cuda.jit
def k_speed_uniform(q, g, out):
    c = cuda.grid(1)
    ny, nx = q.shape[1], q.shape[2]
    if c >= nx * ny:
        return
    j = c // nx
    i = c - j * nx
    out[c] = _wave(q[0, j, i], q[1, j, i], q[2, j, i], g)


@cuda.jit
def k_uniform(q, z, qn, dx, dy, dt, g, nm, walls):
    c = cuda.grid(1)
    ny, nx = z.shape
    if c >= nx * ny:
        return
    j = c // nx
    i = c - j * nx
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


def _blocks(n):
    return (n + TPB - 1) // TPB


class HWFV1GPU(HWFV1):
    """:class:`~solvers.hwfv1.solver.HWFV1` with every kernel on the GPU (adaptive, or
    the uniform FV1 baseline for ``eps=None``); the state stays on the device, only dt
    and the leaf count come back per step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if cuda_simulator_enabled():
            self.xp = np
        else:
            import cupy

            self.xp = cupy
        xp = self.xp
        self.walls_d = xp.asarray(self.walls)
        if self.eps is None:
            self.q, self.z, self._qn = (xp.asarray(a) for a in (self.q, self.z, self._qn))
            self._speed = xp.empty(self.z.size)
            return
        self.s = xp.asarray(self.s)
        self.d = xp.asarray(self.d)
        self.raw = xp.asarray(self.raw)
        self.sig = xp.asarray(self.sig)
        self.is_leaf = xp.zeros(4**self.L, dtype=np.bool_)
        self.level = xp.zeros(4**self.L, dtype=np.int64)

    def _mra(self):
        xp, L = self.xp, self.L
        for n in range(L - 1, -1, -1):
            k_encode[_blocks(4**n), TPB](self.s, self.d, n)
        fin = self.s[:, mra.offset(L):]
        norm = xp.maximum(1.0, xp.stack([xp.abs(fin[0] + fin[3]).max(), xp.abs(fin[1]).max(),
                                         xp.abs(fin[2]).max()]))
        for n in range(L):
            k_sig[_blocks(4**n), TPB](self.d, norm, float(self.eps), n, L, self.raw)
        for n in range(L):
            k_predict[_blocks(4**n), TPB](self.raw, n, self.sig)
        for n in range(L - 1, 0, -1):
            k_ancestors[_blocks(4 ** (n - 1)), TPB](self.sig, n)
        k_walk[_blocks(4**L), TPB](self.sig, L, self.is_leaf, self.level)
        m = xp.nonzero(self.is_leaf)[0]  # stream compaction
        lev = self.level[m]
        return lev, m >> (2 * (L - lev))

    def step(self, t_end=np.inf):
        import time

        xp = self.xp
        if self.eps is None:
            t0 = time.perf_counter()
            k_speed_uniform[_blocks(self.z.size), TPB](self.q, self.g, self._speed)
            dt = min(self.cfl * min(self.dx, self.dy) / max(float(self._speed.max()), 1e-300),
                     t_end - self.t)
            k_uniform[_blocks(self.z.size), TPB](self.q, self.z, self._qn, self.dx, self.dy, dt,
                                                 self.g, self.n_manning, self.walls_d)
            self.q, self._qn = self._qn, self.q
            if xp is not np:
                cuda.synchronize()
            self.time_fv += time.perf_counter() - t0
            self.t += dt
            self.steps += 1
            return dt
        t0 = time.perf_counter()
        lev, code = self._mra()
        t1 = time.perf_counter()
        nl = int(lev.size)
        speed = xp.empty(nl)
        k_speed_leaves[_blocks(nl), TPB](self.s, lev, code, self.L, self.dx, self.dy, self.g,
                                         speed)
        dt = min(self.cfl * float(speed.min()), t_end - self.t)
        new = xp.empty((3, nl))
        k_update[_blocks(nl), TPB](self.s, lev, code, self.L, self.dx, self.dy, dt, self.g,
                                   self.n_manning, self.walls_d, new)
        k_project[_blocks(nl), TPB](new, lev, code, self.L, self.s)
        if xp is not np:
            cuda.synchronize()
        self.time_mra += t1 - t0
        self.time_fv += time.perf_counter() - t1
        self.nleaves = nl
        self.leaf_history.append((self.t, nl))
        self.t += dt
        self.steps += 1
        return dt

    def state(self):
        if self.eps is None:
            get = (lambda a: a) if self.xp is np else self.xp.asnumpy
            return get(self.q[0]), get(self.q[1]), get(self.q[2]), get(self.z)
        s = self.s if self.xp is np else self.xp.asnumpy(self.s)
        f = mra.from_zorder(np.ascontiguousarray(s[:, mra.offset(self.L):]))
        return f[0], f[1], f[2], f[3]
