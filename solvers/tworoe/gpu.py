"""The two-layer step on the GPU: the bodies of :mod:`~forestpy.solvers.tworoe.kernels`
as Numba-CUDA kernels (one source with the CPU, compiled per scheme and precision).

Four kernels per step, all on one stream, with the clock on the device so that many
steps run without the host:

Once ``t_end`` is reached the edge and cell kernels return at once (the surplus
steps of the last batch cost a launch each, no work).

* ``k_edges`` (a thread per edge): :func:`~forestpy.solvers.tworoe.kernels.edge_row`;
* ``k_cells`` (a thread per cell): :func:`~forestpy.solvers.tworoe.kernels.cell_row`,
  then the block's minimum local step (shared memory tree) and one ``atomic.min`` per
  block into ``ctl[DTMIN]`` (a minimum is exact in any order: deterministic);
* ``k_advance`` (one thread): ``dt = min(dtmin, t_end - t)`` (zero once ``t_end`` is
  reached, so surplus steps change nothing), ``t += dt``, step count;
* ``k_update`` (a thread per cell): :func:`~forestpy.solvers.tworoe.kernels.update_row`
  with the device's dt, and the block's smallest depth into ``ctl[HMIN]``;
* with gauges (:mod:`~forestpy.solvers.tworoe.gauges`), ``k_sample``: the gauges'
  cells into row ``steps`` of a device buffer (no host copy per step).

The host reads ``ctl`` back every ``sync_every`` steps.  On a GPU the launches of
``sync_every`` steps are captured once into a CUDA graph
(:func:`forestpy.cuda_device.capture_graph`) and replayed; in the CUDA simulator, or if
capture fails, they are plain launches.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import capture_graph

from . import kernels as K
from .physics import constants, retyped

__all__ = ["GPUStepper", "gpu_kernels"]

SIM = cuda_simulator_enabled()
TPB = 32 if SIM else 256
# ctl (float64): the clock and the reductions
T, DT, DTMIN, TEND, STEPS, HMIN = range(6)


def _k_edges(W, H, el, er, ebc, nx, ny, ln, g, r, out, ctl, e0, e1):
    e = e0 + cuda.grid(1)
    if ctl[T] >= ctl[TEND]:  # a surplus step of the last batch: nothing to do
        return
    if e < e1:
        edge_row(e, W, H, el, er, ebc, nx, ny, ln, g, r, out)


def _k_cells(out, ce, cs, area, gamma, M, ctl):
    sm = cuda.shared.array(TPB, numba.float64)
    c = cuda.grid(1)
    tid = cuda.threadIdx.x
    v = math.inf
    if ctl[T] >= ctl[TEND]:  # the whole grid agrees: no thread reaches syncthreads
        return
    if c < ce.shape[0]:
        v = cell_row(c, out, ce, cs, area, gamma, M)
    sm[tid] = v
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if tid < s:
            sm[tid] = min(sm[tid], sm[tid + s])
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        cuda.atomic.min(ctl, DTMIN, sm[0])


def _k_advance(ctl):
    """The clock, as :func:`~forestpy.solvers.tworoe.solver.advance_clock` (the same
    comparisons: bitwise the CPU's times); ``dt = 0`` once ``t_end`` is reached."""
    if cuda.grid(1) == 0:
        t = ctl[T]
        tend = ctl[TEND]
        dt = ctl[DTMIN]
        if t >= tend:
            dt = 0.0
        elif t + dt >= tend:
            dt = tend - t
            ctl[T] = tend
        else:
            ctl[T] = t + dt
        if dt > 0.0:
            ctl[STEPS] += 1.0
        ctl[DT] = dt
        ctl[DTMIN] = math.inf


def _k_update(W, M, area, ctl):
    sm = cuda.shared.array(TPB, numba.float64)
    c = cuda.grid(1)
    tid = cuda.threadIdx.x
    v = math.inf
    dt = ctl[DT]
    if c < M.shape[1]:  # the owned cells (a rank's come first)
        if dt > 0.0:
            v = update_row(c, W, M, area, dt)
        else:
            v = min(W[0, c], W[3, c])
    sm[tid] = v
    cuda.syncthreads()
    s = TPB // 2
    while s > 0:
        if tid < s:
            sm[tid] = min(sm[tid], sm[tid + s])
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        cuda.atomic.min(ctl, HMIN, sm[0])


def _k_pack(W, idx, buf):
    """``buf[:, i] = W[:, idx[i]]``: the cells a neighbour rank needs."""
    i = cuda.grid(1)
    if i < idx.shape[0]:
        for k in range(6):
            buf[k, i] = W[k, idx[i]]


def _k_unpack(W, start, buf):
    """``W[:, start + i] = buf[:, i]``: a halo group received."""
    i = cuda.grid(1)
    if i < buf.shape[1]:
        for k in range(6):
            W[k, start + i] = buf[k, i]


def _k_sample(W, cells, buf, times, ctl, base):
    """Gauges: ``buf[row, :, i] = W[:, cells[i]]``, ``times[row] = t`` with ``row`` the
    device's step count less ``base``, after a step that advanced the clock (surplus
    steps of the last batch sample nothing)."""
    i = cuda.grid(1)
    if ctl[DT] > 0.0:
        row = int(ctl[STEPS]) - base
        if row < buf.shape[0]:
            if i < cells.shape[0]:
                for k in range(6):
                    buf[row, k, i] = W[k, cells[i]]
            if i == 0:
                times[row] = ctl[T]


_SAMPLE: list = []


def sample_kernel():
    """The gauges' sampling kernel (:func:`_k_sample`; any dtype)."""
    if not _SAMPLE:
        _SAMPLE.append(cuda.jit(_k_sample))
    return _SAMPLE[0]


# placeholders the specialisation replaces
edge_row = K.edge_row
cell_row = K.cell_row
update_row = K.update_row

_GPU: dict = {}


def gpu_kernels(scheme: str = "irroe", dtype=np.float64):
    """``(k_edges, k_cells, k_advance, k_update, k_pack, k_unpack)`` of one scheme and
    precision."""
    if scheme not in K.SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(K.SCHEMES)}, not {scheme!r}")
    key = (scheme, np.dtype(dtype).char)
    got = _GPU.get(key)
    if got is None:
        subs = dict(constants(dtype), flux=K.SCHEMES[scheme])
        cache: dict = {}

        def compile(py, top):
            return cuda.jit(py) if top else cuda.jit(device=True)(py)

        got = _GPU[key] = tuple(retyped(f, subs, compile, cache)
                                for f in (_k_edges, _k_cells, _k_advance, _k_update,
                                          _k_pack, _k_unpack))
    return got


class GPUStepper:
    """The device arrays and launches of one solver (see the module)."""

    def __init__(self, solver, sync_every: int = 16):
        self.solver = solver
        s = solver
        dev = cuda.to_device
        self.W = dev(s.W)
        self.H = dev(s.H)
        self.el, self.er, self.ebc = dev(s._el), dev(s._er), dev(s._ebc)
        self.nx, self.ny, self.ln = dev(s._nx), dev(s._ny), dev(s._ln)
        self.ce, self.cs, self.area = dev(s._ce), dev(s._cs), dev(s._area)
        self.out = cuda.device_array((K.NOUT, len(s._el)), dtype=s.dtype)
        self.M = cuda.device_array((6, s.mesh.num_cells), dtype=s.dtype)
        self.ctl = dev(np.array([s.t, 0.0, np.inf, s.t, 0.0, np.inf]))
        self.kernels = gpu_kernels(s.scheme, s.dtype)
        self.sync_every = int(sync_every)
        self.use_graph = not SIM
        self.graph_error = None
        self._graph = None
        self._batches = 0
        ne = len(s._el)
        nc = s.mesh.num_cells
        self._gauges = None  # (values, times, cells, base) on the device
        self._gcells = None
        self._ge = (ne + TPB - 1) // TPB
        self._gc = (nc + TPB - 1) // TPB

    def _launch(self, stream=0):
        ke, kc, ka, ku = self.kernels[:4]
        s = self.solver
        ke[self._ge, TPB, stream](self.W, self.H, self.el, self.er, self.ebc, self.nx,
                                  self.ny, self.ln, s._g, s._r, self.out, self.ctl, 0,
                                  len(s._el))
        kc[self._gc, TPB, stream](self.out, self.ce, self.cs, self.area, s._gamma, self.M,
                                  self.ctl)
        ka[1, 1, stream](self.ctl)
        ku[self._gc, TPB, stream](self.W, self.M, self.area, self.ctl)
        if self._gauges is not None:
            buf, times, cells, base = self._gauges
            sample_kernel()[self._gg, TPB, stream](self.W, cells, buf, times, self.ctl, base)

    def _capture(self):
        try:
            return capture_graph(lambda st: [self._launch(st) for _ in range(self.sync_every)])
        except Exception as exc:  # noqa: BLE001 - any capture failure: plain launches
            self.graph_error = repr(exc)
            self.use_graph = False
            return None

    def advance(self, t_end: float):
        """Run until ``t_end`` (or a depth below the minimum); returns ``(t, steps,
        hmin)`` read back at the last synchronisation."""
        ctl = self.ctl.copy_to_host()
        ctl[TEND] = t_end
        ctl[HMIN] = np.inf
        self.ctl.copy_to_device(ctl)
        s = self.solver
        steps = int(ctl[STEPS])
        while True:
            if s.gauges is not None:  # room for this batch's samples
                g = s.gauges
                if self._gcells is None:
                    self._gcells = cuda.to_device(g.local)
                    self._gg = (len(g.local) + TPB - 1) // TPB
                buf, times, grown = g.device_buffers(steps - g.base + 1 + self.sync_every)
                if grown:  # new arrays: a captured graph must be captured again
                    self._gauges = (buf, times, self._gcells, g.base)
                    self._graph = None
            # the first batch runs plain launches (they compile and load the kernels,
            # which a stream capture may not do); later batches replay the graph
            if self.use_graph and self._graph is None and self._batches > 0:
                self._graph = self._capture()
            if self._graph is not None:
                graph, stream = self._graph
                graph.launch(stream)
                stream.synchronize()
            else:
                for _ in range(self.sync_every):
                    self._launch()
            self._batches += 1
            ctl = self.ctl.copy_to_host()
            steps = int(ctl[STEPS])
            if s.gauges is not None:
                s.gauges.device_rows(steps - s.gauges.base + 1)
            if ctl[HMIN] < s.h_min or ctl[T] >= t_end:
                return float(ctl[T]), int(ctl[STEPS]), float(ctl[HMIN])

    def to_host(self):
        return self.W.copy_to_host()
