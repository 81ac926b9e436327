"""HWFV1 on the GPU: the same MRA, traversal and FV1 update as the CPU path, as
Numba-CUDA kernels with the pointwise flux/friction code shared through
:func:`forestpy.cuda_device.cuda_device`.  Arrays are Numba device arrays (NumPy-backed
in the CUDA simulator, ``NUMBA_ENABLE_CUDASIM=1``).

**Work O(tree nodes), not O(4^L).**  The finest data under a leaf is the leaf's
projection (flat free surface eta, constant discharges), so in exact arithmetic its
details vanish and the scale coefficient of any node x below a leaf a is known in
closed form: ``h_x = h_a + z_a - z_x`` (wet, no cell of the block drier than the
surface) or ``h_a`` (dry), ``q_x = q_a``.  A step therefore keeps scale coefficients only
for the nodes of the current tree T (leaves and their ancestors) and the leaves' new
values in ``newv``; nodes below a leaf are derived when a finer neighbour reads them
(:func:`_value`).  Where the projection is not flat (a wet leaf whose block has cells
above its surface, or a dry leaf over a bed with details above eps) the next step falls
back to the full algorithm (project onto all finest cells, encode every node): the
result is the same as the full-finest algorithm to round-off in both cases.

One adaptive step, kernels in order (``ctl`` holds the mode, the parity of the two tree
buffers ``sigs``, the history slot and the leaf count on the device):

* ``k_project`` (grid-stride over finest cells; only in full mode, otherwise every
  thread returns after reading the mode): projection of the leaves onto the finest
  grid and the field maxima that normalise the details;
* ``k_encode`` (one launch per 5 levels, one thread per node of those levels; a thread
  whose node is not an internal node of T reads one byte and writes two: its flag and
  the next tree buffer's byte): Haar analysis of the internal nodes (children: encoded
  nodes or leaves whose new value is copied in), significance flags;
* ``k_predict`` (one thread per node; flagged nodes only): Harten prediction as a
  scatter (the node, its 8 same-level neighbours and its children become significant,
  with their ancestors) into the new tree;
* ``k_traverse`` (one thread per internal-level node): the children of significant
  nodes that are not significant themselves are the new leaves; appended to a leaf
  list (block-aggregated atomics), CFL limit and leaf count reduced;
* ``k_update`` (grid-stride over the leaf list): FV1 on the leaf from its neighbours at
  its own level (derived where they lie below a leaf of T), dt on the device, leaf value
  to ``newv``, field maxima for the next step and the full-mode test;
* ``k_finish`` (one thread): t += dt, step count, histories, parity and mode.

``run`` launches many steps before it reads the clock back (the number is bounded by the
steps left at the last dt; steps after ``t_final`` do nothing).  On a GPU the launches of
one step (adaptive) or two steps (uniform) are captured once into a CUDA graph (CuPy
stream capture of the Numba launches) and replayed; the CUDA simulator and any capture
failure use plain launches.
"""

import time

import numpy as np
from numba import cuda

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import capture_graph, cuda_device

from . import fv1, mra
from .solver import (
    HWFV1,
    _encode_node,
    _leaf_update,
    _node_value,
    _projection_check,
    bed_stats,
)

__all__ = ["HWFV1GPU"]

SIM = cuda_simulator_enabled()
TPB = 64 if SIM else 256  # a power of 4
LEVELS_PER_LAUNCH = (TPB.bit_length() - 1) // 2 + 1
HIST = 4096  # history slots per flush
GRID_CAP = 4 if SIM else 2048  # blocks of the grid-stride kernels
# control words (int64 device array ``ctl``) and modes
MODE, COMPLEX, PAR, SLOT, NLEAF, NSPARSE, NFULL = range(7)
SPARSE, FULL, FULL_READY = 0, 1, 2

_morton = cuda_device(mra.morton)
_demorton = cuda_device(mra.demorton)
_wave = cuda_device(fv1.wave_speed)
_value = cuda_device(_node_value)  # (s, sig_old, sparse, x, n, out)
_leaf = cuda_device(_leaf_update)  # the CPU's FV1 update of one leaf
_check = cuda_device(_projection_check)
_encode = cuda_device(_encode_node)  # the CPU's Haar analysis of one node
_uniform_cell = cuda_device(fv1.uniform_cell)


@cuda.jit(device=True, inline=True)
def _off(n):
    return ((1 << (2 * n)) - 1) // 3


@cuda.jit(device=True, inline=True)
def _level(p):
    n = 0
    while _off(n + 1) <= p:
        n += 1
    return n


@cuda.jit(device=True, inline=True)
def _dt(cfl, rmin, t, t_end):
    return min(cfl * rmin[0], t_end[0] - t[0])


@cuda.jit(device=True, inline=True)
def _block_max(sh, nf, tid):
    """``sh[f, 0]`` = the block's maximum of ``sh[f, :]`` for ``f < nf`` (a tree over
    the TPB threads; every thread of the block calls it)."""
    cuda.syncthreads()
    stride = TPB // 2
    while stride > 0:
        if tid < stride:
            for f in range(nf):
                sh[f, tid] = max(sh[f, tid], sh[f, tid + stride])
        cuda.syncthreads()
        stride //= 2


@cuda.jit
def k_project(s, newv, sigs, ctl, normf, L, force):
    tid = cuda.threadIdx.x
    sh = cuda.shared.array((3, TPB), np.float64)
    if not (force or ctl[MODE] == FULL):
        return  # the same for every thread: no barrier is skipped by only some
    v0 = 0.0
    v1 = 0.0
    v2 = 0.0
    par = ctl[PAR]
    oL = _off(L)
    m = cuda.grid(1)
    while m < (1 << (2 * L)):
        n = 0
        while n < L and sigs[par, _off(n) + (m >> (2 * (L - n)))]:
            n += 1
        w = 2 * (L - n)
        p = _off(n) + (m >> w)
        q = oL + m
        hn = newv[0, p]
        s[0, q] = max(0.0, hn + s[3, p] - s[3, q]) if w > 0 and hn > 0.0 else hn
        s[1, q] = newv[1, p]
        s[2, q] = newv[2, p]
        v0 = max(v0, abs(s[0, q] + s[3, q]))
        v1 = max(v1, abs(s[1, q]))
        v2 = max(v2, abs(s[2, q]))
        m += cuda.gridsize(1)
    sh[0, tid] = v0
    sh[1, tid] = v1
    sh[2, tid] = v2
    _block_max(sh, 3, tid)
    if tid < 3 and sh[tid, 0] > 1.0:  # the maxima start at 1
        cuda.atomic.max(normf, tid, sh[tid, 0])


@cuda.jit
def k_encode(s, newv, sigs, ctl, raw, norm, normf, n_start, nlev, L, eps):
    t = cuda.threadIdx.x
    base = cuda.blockIdx.x * TPB
    width = TPB
    mode = ctl[MODE]
    par = ctl[PAR]
    first = n_start == L - 1 and base == 0
    if first and t == 0:
        ctl[NLEAF] = 0
    if first and t < 3:
        norm[1 - par, t] = 1.0  # reset the maxima that k_update of this step fills
    n = n_start
    for _ in range(nlev):
        m = base + t
        if t < width and m < (1 << (2 * n)):
            p = _off(n) + m
            sigs[1 - par, p] = 0
            raw[p] = _encode(s, newv, sigs[par], mode == SPARSE, p, _off(n + 1) + 4 * m, n, L,
                             eps, normf if mode == FULL else norm[par])
        cuda.syncthreads()
        base >>= 2
        width >>= 2
        n -= 1


@cuda.jit(device=True)
def _mark(sigs, w, n, m):
    """Make node (n, m) significant in tree buffer ``w``, with its ancestors (stops at
    one already marked: whoever marked it walks on)."""
    while True:
        q = _off(n) + m
        if sigs[w, q]:
            return
        sigs[w, q] = 1
        if n == 0:
            return
        n -= 1
        m >>= 2


@cuda.jit
def k_predict(raw, sigs, ctl, L):
    p = cuda.grid(1)
    if p >= _off(L) or not raw[p]:
        return
    w = 1 - ctl[PAR]
    n = _level(p)
    m = p - _off(n)
    size = 1 << n
    i, j = _demorton(m)
    for dj in range(-1, 2):
        for di in range(-1, 2):
            ii = i + di
            jj = j + dj
            if 0 <= ii < size and 0 <= jj < size:
                _mark(sigs, w, n, _morton(ii, jj))
    if n + 1 < L:
        for k in range(4):
            _mark(sigs, w, n + 1, 4 * m + k)


@cuda.jit
def k_traverse(s, sigs, ctl, L, dx, dy, g, rmin, count, leaves):
    p = cuda.grid(1)
    tid = cuda.threadIdx.x
    sh_r = cuda.shared.array(TPB, np.float64)
    sh_n = cuda.shared.array(1, np.int32)
    sh_b = cuda.shared.array(1, np.int64)
    mine = cuda.local.array(4, np.int64)
    pos = cuda.local.array(4, np.int32)
    val = cuda.local.array(4, np.float64)
    if tid == 0:
        sh_n[0] = 0
    cuda.syncthreads()
    par = ctl[PAR]
    mode = ctl[MODE]
    r = 1e300
    k_n = 0
    nc = 0
    if p < _off(L):
        if sigs[1 - par, p]:
            n = _level(p)
            nc = n + 1
            c = _off(nc) + 4 * (p - _off(n))
            for k in range(4):
                if nc == L or not sigs[1 - par, c + k]:
                    mine[k_n] = c + k
                    k_n += 1
        elif p == 0:
            mine[0] = 0
            k_n = 1
    for k in range(k_n):
        x = mine[k]
        _value(s, sigs[par], mode == SPARSE, x, nc, val)
        v = _wave(val[0], val[1], val[2], g)
        size = min(dx, dy) * 2.0 ** (L - nc)
        r = min(r, size / v if v > 0.0 else 1e300)
        pos[k] = cuda.atomic.add(sh_n, 0, 1)
    sh_r[tid] = r
    cuda.syncthreads()
    if tid == 0 and sh_n[0] > 0:  # blocks without leaves skip the global atomics
        sh_b[0] = cuda.atomic.add(ctl, NLEAF, sh_n[0])
        cuda.atomic.add(count, ctl[SLOT], sh_n[0])
    stride = TPB // 2
    while stride > 0:
        if tid < stride:
            sh_r[tid] = min(sh_r[tid], sh_r[tid + stride])
        cuda.syncthreads()
        stride //= 2
    if tid == 0 and sh_r[0] < 1e300:
        cuda.atomic.min(rmin, 0, sh_r[0])
    for k in range(k_n):
        leaves[sh_b[0] + pos[k]] = mine[k]


@cuda.jit
def k_update(s, sigs, ctl, leaves, L, dx, dy, cfl, rmin, t, t_end, g, nm, bc, newv,
             norm, zmax, zsub, zabs, eps):
    tid = cuda.threadIdx.x
    sh = cuda.shared.array((4, TPB), np.float64)
    c = cuda.local.array(4, np.float64)
    e = cuda.local.array(4, np.float64)
    w = cuda.local.array(4, np.float64)
    no = cuda.local.array(4, np.float64)
    so = cuda.local.array(4, np.float64)
    out = cuda.local.array(3, np.float64)
    par = ctl[PAR]
    mode = ctl[MODE]
    v0 = 0.0
    v1 = 0.0
    v2 = 0.0
    cx = 0.0
    dt = _dt(cfl, rmin, t, t_end)
    if dt > 0.0:
        k = cuda.grid(1)
        while k < ctl[NLEAF]:
            x = leaves[k]
            n = _level(x)
            _leaf(s, sigs[par], mode == SPARSE, x, n, L, dx, dy, dt, g, nm, bc, 0.0, c, e, w,
                  no, so, out)
            newv[0, x] = out[0]
            newv[1, x] = out[1]
            newv[2, x] = out[2]
            # maxima of the projected finest data, and whether the projection is flat
            v, not_flat = _check(out, c[3], x, n, L, zmax, zabs, zsub, eps)
            v0 = max(v0, v)
            if not_flat:
                cx = 1.0
            v1 = max(v1, abs(out[1]))
            v2 = max(v2, abs(out[2]))
            k += cuda.gridsize(1)
    sh[0, tid] = v0
    sh[1, tid] = v1
    sh[2, tid] = v2
    sh[3, tid] = cx
    _block_max(sh, 4, tid)
    if tid < 3 and sh[tid, 0] > 1.0:  # the maxima start at 1
        cuda.atomic.max(norm, (1 - par, tid), sh[tid, 0])
    if tid == 3 and sh[3, 0] > 0.0:
        ctl[COMPLEX] = 1


@cuda.jit
def k_finish(cfl, rmin, t, t_end, clock, dthist, thist, ctl, normf):
    if cuda.grid(1) != 0:
        return
    dt = _dt(cfl, rmin, t, t_end)
    slot = ctl[SLOT]
    thist[slot] = t[0]
    if dt > 0.0:
        t[0] += dt
        clock[1] += 1.0
        dthist[slot] = dt
        if ctl[MODE] == SPARSE:
            ctl[NSPARSE] += 1
        else:
            ctl[NFULL] += 1
        ctl[PAR] = 1 - ctl[PAR]
        ctl[MODE] = FULL if ctl[COMPLEX] else SPARSE
        ctl[COMPLEX] = 0
    else:
        dthist[slot] = 0.0
    ctl[SLOT] = slot + 1
    clock[0] = dt
    rmin[0] = 1e300
    for f in range(3):
        normf[f] = 1.0


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
    return min(cfl * hmin / max(umax[0], 1e-300), t_end[0] - t[0])


@cuda.jit
def k_uniform(q, z, qn, dx, dy, cfl, umax, t, t_end, g, nm, bc):
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
    _uniform_cell(q, z, j, i, dx, dy, dt, g, nm, bc, 0.0, cc, e, w, no, so, out)
    qn[0, j, i] = out[0]
    qn[1, j, i] = out[1]
    qn[2, j, i] = out[2]


@cuda.jit
def k_finish_uniform(cfl, hmin, umax, t, t_end, clock, dthist, thist, ctl):
    if cuda.grid(1) != 0:
        return
    dt = _dt_uniform(cfl, hmin, umax, t, t_end)
    slot = ctl[SLOT]
    thist[slot] = t[0]
    if dt > 0.0:
        t[0] += dt
        clock[1] += 1.0
        dthist[slot] = dt
    else:
        dthist[slot] = 0.0
    ctl[SLOT] = slot + 1
    clock[0] = dt
    umax[0] = 0.0


def _blocks(n):
    return (n + TPB - 1) // TPB


class _Launch:
    """One kernel launch with a fixed grid and fixed arguments (everything that changes
    between steps lives in device memory, so a step can be captured into a graph)."""

    def __init__(self, disp, grid, block, args):
        self.disp, self.grid, self.block, self.args = disp, grid, block, tuple(args)
        self.kernel = disp[grid, block]

    def __call__(self, stream=None):
        if stream is None and not SIM:  # the simulator's kernel[...] returns one shared object
            self.kernel(*self.args)
        elif stream is None:
            self.disp[self.grid, self.block](*self.args)
        else:
            self.disp[self.grid, self.block, stream](*self.args)


class HWFV1GPU(HWFV1):
    """:class:`~solvers.hwfv1.solver.HWFV1` with every kernel on the GPU (adaptive, or
    the uniform FV1 baseline for ``eps=None``).  The state, dt and the clock stay on the
    device; ``step`` reads dt back, ``run`` reads the clock only every few steps.

    ``use_graph`` (default: on a real GPU) replays the launches of a step from a CUDA
    graph; ``graph_error`` says why capture failed, if it did.  ``sparse_steps`` and
    ``full_steps`` count the adaptive steps that ran O(tree nodes) and those that fell
    back to the full-finest MRA (read back by ``_sync``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.inflow is not None:
            raise ValueError("HWFV1GPU has no 'inflow' boundary (CPU HWFV1 only)")
        dev = cuda.to_device
        L = self.L
        self.bc_d = dev(self.bc)  # WALL or OPEN: the GPU has no inflow side
        self.t_d = dev(np.zeros(1))
        self.tend_d = dev(np.full(1, np.inf))
        self._tend = np.inf
        self.clock = dev(np.zeros(2))  # last dt, steps taken
        self.dthist = dev(np.zeros(HIST))
        self.thist = dev(np.zeros(HIST))
        self.count = dev(np.zeros(HIST, dtype=np.int32))
        self.ctl = dev(np.array([FULL_READY, 0, 0, 0, 0, 0, 0], dtype=np.int64))
        self._slot = 0
        self._launched = 0
        self._hist_host = []
        self.sparse_steps = self.full_steps = 0
        self.use_graph = not SIM
        self.graph_error = None
        if self.use_graph:
            try:  # CuPy's stream capture records the graphs; import it outside timed runs
                import cupy  # noqa: F401
            except ImportError as exc:
                self.use_graph, self.graph_error = False, repr(exc)
        self._graph = None
        cfl, g, nm, dx, dy = self.cfl, self.g, self.n_manning, self.dx, self.dy
        nb = _blocks(4**L)
        if self.eps is None:
            self.q, self.z, self._qn = (dev(a) for a in (self.q, self.z, self._qn))
            self.umax = dev(np.zeros(1))
            hmin = min(dx, dy)
            self._plans = []
            for a, b in ((self.q, self._qn), (self._qn, self.q)):
                self._plans.append([
                    _Launch(k_speed_uniform, nb, TPB, (a, g, self.umax)),
                    _Launch(k_uniform, nb, TPB, (a, self.z, b, dx, dy, cfl, self.umax,
                                                 self.t_d, self.tend_d, g, nm, self.bc_d)),
                    _Launch(k_finish_uniform, 1, 1, (cfl, hmin, self.umax, self.t_d,
                                                     self.tend_d, self.clock, self.dthist,
                                                     self.thist, self.ctl))])
            self._nmra = 0
        else:
            mra.encode(self.s, self.d, L)  # every level from the initial data
            zmax, zabs, zsub = bed_stats(self.s, self.d, L)
            fine = self.s[:, mra.offset(L):]
            norm = np.ones((2, 3))
            norm[0] = np.maximum(1.0, [np.abs(fine[0] + fine[3]).max(),
                                       np.abs(fine[1]).max(), np.abs(fine[2]).max()])
            self.norm = dev(norm)
            self.normf = dev(np.ones(3))
            self.zmax, self.zabs, self.zsub = dev(zmax), dev(zabs), dev(zsub)
            self.s = dev(self.s)
            self.d = None  # details are not stored on the GPU
            self.raw = cuda.device_array(mra.offset(L), dtype=np.uint8)
            self.sigs = dev(np.zeros((2, mra.offset(L)), dtype=np.uint8))
            self.newv = dev(np.zeros((3, mra.ntotal(L))))
            self.leaves = cuda.device_array(4**L, dtype=np.int64)
            self.rmin = dev(np.full(1, 1e300))
            eps = float(self.eps)
            gs = min(nb, GRID_CAP)
            plan = [_Launch(k_project, gs, TPB, (self.s, self.newv, self.sigs, self.ctl,
                                                 self.normf, L, 0))]
            n = L - 1
            while n >= 0:
                nlev = min(LEVELS_PER_LAUNCH, n + 1)
                plan.append(_Launch(k_encode, _blocks(4**n), TPB,
                                    (self.s, self.newv, self.sigs, self.ctl, self.raw,
                                     self.norm, self.normf, n, nlev, L, eps)))
                n -= nlev
            ni = _blocks(mra.offset(L))
            plan += [_Launch(k_predict, ni, TPB, (self.raw, self.sigs, self.ctl, L)),
                     _Launch(k_traverse, ni, TPB, (self.s, self.sigs, self.ctl, L, dx, dy, g,
                                                   self.rmin, self.count, self.leaves))]
            self._nmra = len(plan)
            plan += [_Launch(k_update, gs, TPB, (self.s, self.sigs, self.ctl, self.leaves, L,
                                                 dx, dy, cfl, self.rmin, self.t_d,
                                                 self.tend_d, g, nm, self.bc_d, self.newv,
                                                 self.norm, self.zmax, self.zsub, self.zabs,
                                                 eps)),
                     _Launch(k_finish, 1, 1, (cfl, self.rmin, self.t_d, self.tend_d,
                                              self.clock, self.dthist, self.thist, self.ctl,
                                              self.normf))]
            self._plans = [plan]
            self._project_all = _Launch(k_project, gs, TPB, (self.s, self.newv, self.sigs,
                                                             self.ctl, self.normf, L, 1))

    # -- launching ----------------------------------------------------------------
    def _set_tend(self, t_end):
        t_end = float(t_end)
        if t_end != self._tend:
            self.tend_d.copy_to_device(np.full(1, t_end))
            self._tend = t_end

    def _launch(self, t_end, stream=None):
        """Launch one step (plain launches)."""
        if stream is None:
            self._set_tend(t_end)
        for k in self._plans[self._launched % len(self._plans)]:
            k(stream)
        if self.eps is None:
            self.q, self._qn = self._qn, self.q
        self._launched += 1
        self._slot += 1

    def _capture(self):
        """Capture the launches of ``len(self._plans)`` steps into a CUDA graph
        (:func:`forestpy.cuda_device.capture_graph`); ``None`` on any failure (then
        plain launches, and why is kept in ``graph_error``)."""
        try:
            return capture_graph(lambda st: [k(st) for plan in self._plans for k in plan])
        except Exception as exc:  # noqa: BLE001 - any capture failure: plain launches
            self.graph_error = repr(exc)
            self.use_graph = False
            return None

    def _launch_many(self, nsteps, t_end):
        """Launch ``nsteps`` steps: graph replays where possible, else plain launches."""
        self._set_tend(t_end)
        unit = len(self._plans)
        if self.use_graph and self._launched >= unit and self._launched % unit == 0:
            if self._graph is None:
                self._graph = self._capture()
            if self._graph is not None:
                graph, stream = self._graph
                for _ in range(nsteps // unit):
                    graph.launch(stream)
                self._launched += nsteps - nsteps % unit
                self._slot += nsteps - nsteps % unit
                stream.synchronize()
                nsteps %= unit
        for _ in range(nsteps):
            self._launch(t_end)

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
        ctl = self.ctl.copy_to_host()
        self.sparse_steps, self.full_steps = int(ctl[NSPARSE]), int(ctl[NFULL])
        if ctl[SLOT]:
            ctl[SLOT] = 0
            self.ctl.copy_to_device(ctl)
        if self.eps is not None:
            self.leaf_history = [(t, n) for t, n, _ in self._hist_host]
            if self.leaf_history:
                self.nleaves = self.leaf_history[-1][1]
        return float(dt)

    def mode(self):
        """How the next adaptive step runs its MRA: "sparse" (O(tree nodes)), "full"
        (projection onto all finest cells first) or "initial"."""
        return {SPARSE: "sparse", FULL: "full", FULL_READY: "initial"}[
            int(self.ctl.copy_to_host()[MODE])]

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
            self._launch_many(nsteps, t_final)
            dt = self._sync()
        self.time_fv += time.perf_counter() - t0
        h = self.state()[0]
        if not np.all(np.isfinite(h)) or h.min() < 0:
            raise RuntimeError(f"invalid depth at t={self.t}")
        return self

    def profile(self, nsteps=20):
        """Advance ``nsteps`` steps timing the MRA kernels (projection, encode, prediction,
        traversal) and the FV1 kernels (update, clock) with CUDA events (plain launches);
        returns ``(mra_seconds, fv_seconds)`` per step."""
        if self.eps is None:
            return 0.0, None
        self._set_tend(np.inf)
        plan = self._plans[0]
        tm = tf = 0.0
        for _ in range(nsteps):
            e0, e1, e2 = cuda.event(), cuda.event(), cuda.event()
            e0.record()
            for k in plan[:self._nmra]:
                k()
            e1.record()
            for k in plan[self._nmra:]:
                k()
            e2.record()
            e2.synchronize()
            self._launched += 1
            self._slot += 1
            tm += e0.elapsed_time(e1) * 1e-3
            tf += e1.elapsed_time(e2) * 1e-3
        self._sync()
        return tm / nsteps, tf / nsteps

    def state(self):
        if self.eps is None:
            q, z = self.q.copy_to_host(), self.z.copy_to_host()
            return q[0], q[1], q[2], z
        if int(self.ctl.copy_to_host()[MODE]) != FULL_READY:
            self._project_all()  # the finest grid is only kept up to date in full mode
        s = self.s.copy_to_host()
        f = mra.from_zorder(np.ascontiguousarray(s[:, mra.offset(self.L):]))
        return f[0], f[1], f[2], f[3]
