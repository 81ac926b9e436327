"""RRB-PCG on the GPU (Numba-CUDA), compiled from the same pointwise bodies as the CPU.

One thread per quarter index ``(J, I)`` of a level (1D blocks of 256 threads over the
row-major quarter rectangle), so consecutive threads touch consecutive addresses of
every quarter array.  Inner products are fused into the kernel that produces their
second factor (``p.Sp`` into the Schur matvec, ``r.z`` into the last preconditioner
kernel): a block reduction in shared memory and one atomic add per block into a small
device array of CG scalars.  ``alpha`` and ``beta`` are computed on the device from those
scalars, and the stopping rule is evaluated on the device too (kernel ``check``; once
it passes, every kernel of later iterations is gated off), so a CUDA graph of several
iterations needs one small host read per launch (``check_every``).

All arrays live on the device for the life of the solver; on a machine without a GPU
the same kernels run in Numba's CUDA simulator (tests, tiny grids).
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import cuda, float64

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import cuda_device

from . import kernels as K
from .ordering import from_quarters, quarter_shape, to_quarters

__all__ = ["GPUSolverState", "gpu_kernels"]

TPB = 256
_KERNELS: dict = {}


def gpu_kernels():
    """The compiled kernels (a dict, built once per process)."""
    if _KERNELS:
        return _KERNELS
    mv = cuda_device(K.body_schur_matvec)
    bf = cuda_device(K.body_black_forward)
    rf = cuda_device(K.body_r2_forward)
    rb = cuda_device(K.body_r2_backward)
    bb = cuda_device(K.body_black_backward)

    @cuda.jit(device=True)
    def block_add(v, sc, slot):
        sh = cuda.shared.array(TPB, float64)
        t = cuda.threadIdx.x
        sh[t] = v
        cuda.syncthreads()
        s = TPB // 2
        while s > 0:
            if t < s:
                sh[t] += sh[t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0:
            cuda.atomic.add(sc, slot, sh[0])

    @cuda.jit
    def matvec_dot(S, x, y, sc, slot, g):
        if g[0] != 0.0:
            return
        h, w = x.shape[1], x.shape[2]
        k = cuda.grid(1)
        v = 0.0
        if k < h * w:
            J = k // w
            v = mv(S, x, y, J, k - J * w, h, w)
        block_add(v, sc, slot)

    @cuda.jit
    def black_forward(BL, y, g):
        if g[0] != 0.0:
            return
        h, w = y.shape[1], y.shape[2]
        k = cuda.grid(1)
        if k < h * w:
            J = k // w
            bf(BL, y, J, k - J * w, h, w)

    @cuda.jit
    def r2_forward(P, y, X, g):
        if g[0] != 0.0:
            return
        h, w = y.shape[1], y.shape[2]
        k = cuda.grid(1)
        if k < h * w:
            J = k // w
            rf(P, y, X, J, k - J * w, h, w)

    @cuda.jit
    def r2_backward(P, y, X, o, g):
        if g[0] != 0.0:
            return
        h, w = y.shape[1], y.shape[2]
        k = cuda.grid(1)
        if k < h * w:
            J = k // w
            rb(P, y, X, o, J, k - J * w, h, w)

    @cuda.jit
    def r2_backward_dot(P, y, X, o, sc, slot, g):
        if g[0] != 0.0:
            return
        h, w = y.shape[1], y.shape[2]
        k = cuda.grid(1)
        v = 0.0
        if k < h * w:
            J = k // w
            v = rb(P, y, X, o, J, k - J * w, h, w)
        block_add(v, sc, slot)

    @cuda.jit
    def black_backward(BL, y, x, g):
        if g[0] != 0.0:
            return
        h, w = y.shape[1], y.shape[2]
        k = cuda.grid(1)
        if k < h * w:
            J = k // w
            bb(BL, y, x, J, k - J * w, h, w)

    @cuda.jit
    def dense_apply(Minv, y, o, g):
        if g[0] != 0.0:
            return
        m = Minv.shape[0]
        i = cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x
        if i < m:
            s = 0.0
            for j in range(m):
                s += Minv[i, j] * y[j]
            o[i] = s

    @cuda.jit
    def update_xr(x, r, p, q, sc, g):
        if g[0] != 0.0:
            return
        k = cuda.grid(1)
        if k < x.size:
            alpha = sc[0] / sc[1]
            x[k] += alpha * p[k]
            r[k] -= alpha * q[k]

    @cuda.jit
    def update_p(p, z, sc, g):
        if g[0] != 0.0:
            return
        k = cuda.grid(1)
        if k < p.size:
            p[k] = z[k] + (sc[2] / sc[0]) * p[k]

    @cuda.jit
    def roll(sc, g):
        if cuda.grid(1) == 0 and g[0] == 0.0:
            sc[0] = sc[2]
            sc[1] = 0.0
            sc[2] = 0.0

    @cuda.jit
    def start(sc, st, slot, tol, maxiter):
        # The stopping state before the first iteration (no host read of r.z):
        # normb = sqrt(sc[slot]), res = sqrt(r.z) / normb (0 when normb = 0), and the
        # scalar roll (sc[0] = r.z, sc[1] = sc[2] = 0).
        if cuda.grid(1) == 0:
            nb = sc[slot]
            if nb < 0.0:
                nb = 0.0
            nb = math.sqrt(nb)
            rz = sc[2]
            if rz < 0.0:
                rz = 0.0
            res = 0.0
            if nb > 0.0:
                res = math.sqrt(rz) / nb
            else:
                nb = 1.0
            conv = res <= tol
            st[0] = 1.0 if (conv or maxiter <= 0) else 0.0
            st[1] = 0.0
            st[2] = nb
            st[3] = tol
            st[4] = maxiter
            st[5] = 1.0 if conv else 0.0
            st[6] = res
            st[7] = 0.0
            sc[0] = sc[2]
            sc[1] = 0.0
            sc[2] = 0.0

    @cuda.jit
    def check(sc, st, hist):
        # The stopping rule on the device, after an iteration's r.z (sc[2]):
        # st = [done, iterations, normb, tol, maxiter, converged, res, -].  Once done,
        # every gated kernel of later (captured) iterations returns at once, so the
        # iterate is exactly the one where the test first passed.
        if cuda.grid(1) == 0 and st[0] == 0.0:
            c = st[1] + 1.0
            st[1] = c
            rz = sc[2]
            if rz < 0.0:
                rz = 0.0
            res = math.sqrt(rz) / st[2]
            i = int(c) - 1
            if i < hist.size:
                hist[i] = res
            st[6] = res
            if res <= st[3]:
                st[0] = 1.0
                st[5] = 1.0
            elif c >= st[4]:
                st[0] = 1.0

    @cuda.jit
    def dot(a, b, sc, slot):
        k = cuda.grid(1)
        v = 0.0
        if k < a.size:
            v = a[k] * b[k]
        block_add(v, sc, slot)

    @cuda.jit
    def copy(a, b):
        k = cuda.grid(1)
        if k < a.size:
            b[k] = a[k]

    _KERNELS.update(
        matvec_dot=matvec_dot,
        black_forward=black_forward,
        r2_forward=r2_forward,
        r2_backward=r2_backward,
        r2_backward_dot=r2_backward_dot,
        black_backward=black_backward,
        dense_apply=dense_apply,
        update_xr=update_xr,
        update_p=update_p,
        roll=roll,
        check=check,
        start=start,
        dot=dot,
        copy=copy,
    )
    return _KERNELS


def _blocks(n):
    return max(1, -(-n // TPB))


def _next_chunk(hist, tol, kmax):
    """Iterations in the next graph launch: the largest power of two <= ``kmax`` not
    past the iterations still needed as predicted from the mean convergence rate so far
    (a prediction only: a wrong one costs a no-op iteration or an extra host read)."""
    n = len(hist)
    if kmax <= 1 or n < 2 or not (0.0 < hist[-1] < hist[0]):
        return kmax
    rate = (hist[-1] / hist[0]) ** (1.0 / (n - 1))
    if not 0.0 < rate < 1.0 or tol <= 0.0:
        return kmax
    need = max(1, math.ceil(math.log(tol / hist[-1]) / math.log(rate)))
    m = 1
    while 2 * m <= min(need, kmax):
        m *= 2
    return m


class GPUSolverState:
    """Device-resident factorisation and CG workspace; see :class:`.solver.RRBSolver`."""

    def __init__(self, data):
        self.sim = cuda_simulator_enabled()
        if self.sim:
            self.xp = np
        else:
            import cupy

            self.xp = cupy
        xp = self.xp
        self.k = gpu_kernels()
        self.nx, self.ny = data["shape"]
        h, w = quarter_shape(self.nx, self.ny)
        self.h, self.w = h, w

        def put(a):
            return xp.ascontiguousarray(xp.asarray(np.ascontiguousarray(a)))

        self.S9 = put(data["schur9"])
        self.P = [put(p) for p in data["rot"]]
        self.BL = [put(b) for b in data["black"]]
        self.W = [None] + [
            xp.zeros((4,) + quarter_shape(nx, ny)) for nx, ny in data["shapes"][1:-1]
        ]
        hk, wk = quarter_shape(*data["shapes"][-1])
        self.Wlast = xp.zeros((4, hk, wk))
        self.Xlast = xp.zeros((4, hk, wk))
        self.Minv = put(data["last_inv"])
        self.vec = {k: xp.zeros((2, h, w)) for k in ("x", "r", "z", "p", "q")}
        self.full = xp.zeros((4, h, w))
        self.sc = xp.zeros(8)
        # Device stopping rule: st = [done, iterations, normb, tol, maxiter, converged,
        # res, -]; hist holds the relative residual of every iteration.  ``st`` is also
        # the gate of the iteration's kernels; ``nogate`` (always 0) the gate elsewhere.
        self.nogate = xp.zeros(1)
        self._stat(1)
        # At most this many iterations per graph launch (and per host read of the
        # stopping state); after the first launch a power of two predicted from the
        # convergence rate (``_next_chunk``).  Iterations past the stopping point are
        # no-ops (gated kernels), so the iterate and the iteration count are those of
        # checking after every iteration (``check_every = 1``).
        self.check_every = 8
        m = self.Minv.shape[0]
        self.Wlast_flat = self.Wlast.reshape(m)
        self.Xlast_flat = self.Xlast.reshape(m)
        nf = 2 * h * w
        self.flat = {k: a.reshape(nf) for k, a in self.vec.items()}
        self._views: dict = {}
        self._st = 0  # Numba stream of the launches (0: the default stream)
        # A CG iteration (update_p, roll, matvec + dot, update_xr, the whole
        # preconditioner + r.z: ~5 + 4 * levels kernels) and the start-up
        # preconditioner applications are captured once into CUDA graphs and replayed:
        # one graph launch instead of ~35 Python dispatches of ~30-40 us each.  Off in
        # the simulator; ``use_graph = False`` turns it off.
        self.use_graph = not self.sim
        self._graphs: dict = {}
        self._graph_error = None

    def _stat(self, maxiter):
        """One device array ``[st (8), hist (maxiter)]``: a single read gives both."""
        self.stat = self.xp.zeros(8 + max(int(maxiter), 1))
        self.st = self.stat[:8]
        self.hist = self.stat[8:]

    def v(self, a):
        """Numba view of an array (CuPy -> device array, cached for the solver's own
        arrays; NumPy as is in the simulator)."""
        if self.sim:
            return a
        got = self._views.get(id(a))
        if got is not None and got[0] is a:
            return got[1]
        view = cuda.as_cuda_array(a)
        self._views[id(a)] = (a, view)
        return view

    # ------------------------------------------------------------------ routines
    def matvec_dot(self, x, y, slot=1, gate=None):
        n = x.shape[1] * x.shape[2]
        g = self.nogate if gate is None else gate
        self.k["matvec_dot"][_blocks(n), TPB, self._st](
            self.v(self.S9), self.v(x), self.v(y), self.v(self.sc), slot, self.v(g)
        )

    def precondition(self, r, z, slot=2, gate=None):
        """``z = M^-1 r`` (red level-1 vectors); adds ``r . z`` into ``sc[slot]``.
        Every kernel returns at once when ``gate[0] != 0``."""
        k, v, st = self.k, self.v, self._st
        g = v(self.nogate if gate is None else gate)
        nl = len(self.P)
        src = r
        for lev in range(nl):
            dst = self.W[lev + 1] if lev + 1 < nl else self.Wlast
            n = src.shape[1] * src.shape[2]
            k["r2_forward"][_blocks(n), TPB, st](v(self.P[lev]), v(src), v(dst), g)
            if lev + 1 < nl:
                k["black_forward"][_blocks(dst.shape[1] * dst.shape[2]), TPB, st](
                    v(self.BL[lev + 1]), v(dst), g
                )
            src = dst
        m = self.Minv.shape[0]
        k["dense_apply"][_blocks(m), TPB, st](
            v(self.Minv), v(self.Wlast_flat), v(self.Xlast_flat), g
        )
        X = self.Xlast
        for lev in range(nl - 1, 0, -1):
            y = self.W[lev]
            n = y.shape[1] * y.shape[2]
            k["r2_backward"][_blocks(n), TPB, st](v(self.P[lev]), v(y), v(X), v(y), g)
            k["black_backward"][_blocks(n), TPB, st](v(self.BL[lev]), v(y), v(y), g)
            X = y
        n = r.shape[1] * r.shape[2]
        k["r2_backward_dot"][_blocks(n), TPB, st](
            v(self.P[0]), v(r), v(X), v(z), v(self.sc), slot, g
        )

    def precondition_full(self, b, nx, ny):
        xp = self.xp
        y = xp.ascontiguousarray(to_quarters(xp.asarray(b), xp=xp))
        n = self.h * self.w
        ng = self.v(self.nogate)
        self.k["black_forward"][_blocks(n), TPB](self.v(self.BL[0]), self.v(y), ng)
        r = xp.ascontiguousarray(y[:2])
        z = xp.zeros_like(r)
        self.precondition(r, z, slot=7)
        y[:2] = z
        self.k["black_backward"][_blocks(n), TPB](self.v(self.BL[0]), self.v(y), self.v(y), ng)
        out = from_quarters(y, nx, ny, xp=xp)
        return out if self.sim else out.get()

    def scalar(self, i):
        return float(self.sc[i])

    def _head(self):
        """Iteration part after the convergence test: ``p = z + beta p`` and the scalar
        roll (sc[0] = r.z, sc[1] = sc[2] = 0)."""
        k, v, st = self.k, self.v, self._st
        nf = 2 * self.h * self.w
        g = v(self.st)
        k["update_p"][_blocks(nf), TPB, st](v(self.flat["p"]), v(self.flat["z"]), v(self.sc), g)
        k["roll"][1, 1, st](v(self.sc), g)

    def _body(self):
        """``q = S p`` (+ p.q), ``x += alpha p``, ``r -= alpha q``, ``z = M^-1 r`` (+ r.z),
        then the stopping rule on the device (``check``)."""
        k, v, st = self.k, self.v, self._st
        nf = 2 * self.h * self.w
        fl = self.flat
        g = self.st
        self.matvec_dot(self.vec["p"], self.vec["q"], slot=1, gate=g)
        k["update_xr"][_blocks(nf), TPB, st](
            v(fl["x"]), v(fl["r"]), v(fl["p"]), v(fl["q"]), v(self.sc), v(g)
        )
        self.precondition(self.vec["r"], self.vec["z"], slot=2, gate=g)
        k["check"][1, 1, st](v(self.sc), v(g), v(self.hist))

    def _iteration(self):
        self._head()
        self._body()

    def _chunk(self, first, nit):
        """``nit`` iterations (the first one without the head when ``first``)."""
        for i in range(nit):
            if i == 0 and first:
                self._body()
            else:
                self._iteration()

    def _capture(self, fn):
        """Capture the launches of ``fn`` into a CUDA graph (CuPy stream capture of the
        Numba launches); ``None`` on any failure (then plain launches, and why is kept
        in ``_graph_error``)."""
        import cupy

        stream = cupy.cuda.Stream(non_blocking=False)
        cuda.synchronize()
        graph = None
        try:
            stream.begin_capture()
            try:
                self._st = cuda.external_stream(stream.ptr)
                fn()
            finally:
                self._st = 0
                graph = stream.end_capture()
        except Exception as exc:  # noqa: BLE001 - any capture failure: plain launches
            self._graph_error = repr(exc)
            self.use_graph = False
            return None
        return graph, stream

    def _replay(self, key, fn):
        """Run ``fn`` (kernel launches on the solver's own arrays only): plainly the first
        time (compilation), then as a CUDA graph captured once and replayed.  Returns
        whether a graph ran."""
        if self.sim or not self.use_graph:
            fn()
            return False
        g = self._graphs.get(key)
        if g is None:
            if key not in self._graphs:
                self._graphs[key] = None  # warm-up done
                fn()
                return False
            g = self._graphs[key] = self._capture(fn)
            if g is None:
                fn()
                return False
        graph, stream = g
        graph.launch(stream)
        stream.synchronize()
        return True

    # ------------------------------------------------------------------ PCG
    def solve(self, rhs, x0, tol, maxiter, nx, ny):
        t0 = time.perf_counter()
        xp, k, v = self.xp, self.k, self.v
        x, r, z, p, q = (self.vec[n] for n in ("x", "r", "z", "p", "q"))
        n = self.h * self.w
        full = self.full
        full[...] = to_quarters(rhs, xp=xp)
        rhs_q = full.copy()
        k["black_forward"][_blocks(n), TPB](v(self.BL[0]), v(full), v(self.nogate))
        bS = full[:2]
        self.sc[:] = 0.0
        graph = False
        if x0 is None:
            x[...] = 0.0
            r[...] = bS
            graph |= self._replay("prec_rz", lambda: self.precondition(r, z, slot=2))
            slot = 2  # normb = sqrt(r.z)
        else:
            x[...] = to_quarters(x0, xp=xp)[:2]
            z[...] = bS
            graph |= self._replay("prec_zp", lambda: self.precondition(z, p, slot=3))
            graph |= self._replay("matvec_xq", lambda: self.matvec_dot(x, q, slot=4))
            r[...] = bS - q
            graph |= self._replay("prec_rz", lambda: self.precondition(r, z, slot=2))
            slot = 3  # normb = sqrt(b M^-1 b)
        p[...] = z
        if len(self.hist) < maxiter:
            self._stat(maxiter)
            self._graphs.clear()  # captured with the old state array
        # the stopping state and the scalar roll on the device, then chunks of
        # ``check_every`` iterations with one host read of the state after each
        k["start"][1, 1](v(self.sc), v(self.st), slot, float(tol), float(maxiter))
        kk = max(1, int(self.check_every))
        first, nit = True, kk
        while True:
            key = ("chunk0" if first else "chunk", nit)
            graph |= self._replay(key, lambda f=first, m=nit: self._chunk(f, m))
            first = False
            stv = self.stat if self.sim else self.stat.get()
            if stv[0] != 0.0:
                break
            nit = _next_chunk(stv[8 : 8 + int(stv[1])], tol, kk)
        it = int(stv[1])
        converged = bool(stv[5] != 0.0)
        res = float(stv[6])
        hist = [float(h) for h in stv[8 : 8 + it]]
        full[:2] = x
        k["black_backward"][_blocks(n), TPB](v(self.BL[0]), v(rhs_q), v(full), v(self.nogate))
        out = from_quarters(full, nx, ny, xp=xp)
        if not self.sim:
            cuda.synchronize()
        return out, {
            "iterations": it,
            "converged": converged,
            "residual": res,
            "history": hist,
            "time_s": time.perf_counter() - t0,
            "cuda_graph": graph,
        }
