"""RRB-PCG on the GPU (Numba-CUDA): the arithmetic of the CPU's pointwise bodies
(:mod:`.kernels`), term by term, written out on flat arrays.

One thread per quarter index ``(J, I)`` of a level (1D blocks of 256 threads over the
row-major quarter rectangle), so consecutive threads touch consecutive addresses of
every quarter array.  The preconditioner's level kernels, the setup and the finish
index the quarter arrays flat, with unsigned indices, and have no branch around a load:
a neighbour past the edge of the level is loaded at the edge and its value replaced by
0 (see ``node`` in :func:`gpu_kernels`; the Schur matvec keeps its bounds checks, see
there).
Compiled from the 3-D bodies with their bounds-checked loads, the level kernels were
bound by their instructions and branches (a branch and a signed 64-bit index chain per
load), not by memory (docs/rrb.md, "Layout"); the tests hold every kernel to the CPU
bodies.

Inner products are fused into the kernel that produces their second factor (``p.Sp``
into the Schur matvec, ``r.z`` into the last preconditioner kernel): grid-stride loops
over at most ``RED_BLOCKS`` blocks, a block reduction (warp shuffles, then the warps'
sums) and one atomic add per block into a small device array of CG scalars (so a few
hundred atomics on one address, not one per 256 nodes). ``alpha`` and ``beta`` are
computed on the device from those scalars, and the stopping rule is evaluated on the
device too, by the block of ``r2_backward_dot`` that finishes last (once it passes,
every kernel of later iterations is gated off), so a CUDA graph of several iterations
needs one wait of the host per launch (``check_every``; the kernels that change the
stopping state also write it into mapped host memory). The update ``r -= alpha q`` is
fused into the first preconditioner kernel (``r2_forward_xr``) and ``x += alpha p`` into
the next iteration's ``update_p`` (or ``finish``), so an iteration is ``update_p``, the
matvec and the preconditioner's kernels.

The iteration predicted to be a solve's last runs only the forward sweep of the
preconditioner: with ``M = L D L^T``, ``r.z = y^T D^-1 y`` for ``y = L^-1 r``, so the
``_sum`` kernels add it up on the way (each r2 kernel its r2 nodes and the next level's
black nodes, the dense product the last level) and the dense product's last block
runs the stopping rule.  When the prediction holds, the back-substitution of that
iteration (about a third of one) is never launched; when it does not, it runs
afterwards (``GPUSolverState._resume``).

The last level (the stopping level ``k``) is solved exactly: its black step, the dense
inverse of its red Schur complement by one kernel over the whole device (eight rows a
block), its black back-substitution.  On the GPU the default ``k`` is the first level
with at most ``solver.COARSE_NODES['gpu']`` nodes: one read of a dense inverse of
~3000 red nodes (int16 fixed point) costs less than the four dependent launches of each level it
replaces (a small level's step costs its latency whatever its size), and the exact
coarse solve saves CG iterations.

A whole solve is three kinds of CUDA graph: ``setup`` (natural -> quarter order, the
black elimination, the first preconditioner application, the device stopping state),
chunks of iterations, and ``finish`` (one kernel: black back-substitution written
straight into natural order); on the host only the copies of ``rhs`` in and ``x`` out,
the launches and one wait for the stopping state per chunk.  When a chunk is predicted
to end the solve, ``finish`` and the copy out are queued behind it before that read.

On a real GPU the graphs' kernel-to-kernel edges are programmatic (PDL, compute
capability 9.0): each kernel lets the next be scheduled at once, starts loading its
(never written) factors into L1, then waits for its predecessors before it touches
anything else; a launch and that prefetch overlap the previous kernel's tail
(docs/rrb.md, "Layout").

All arrays live on the device for the life of the solver; on a machine without a GPU
the same kernels run in Numba's CUDA simulator (tests, tiny grids).
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import cuda, float64, uint64

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import (
    blocks_per_wave,
    capture_graph,
    cuda_device,
    grid_dependency,
    prefetch,
    programmatic_graph,
    words_as_float64,
)

from . import kernels as K
from .ordering import from_quarters, quarter_shape, to_quarters

__all__ = ["GPUSolverState", "fixed_point_words", "gpu_kernels"]

TPB = 256
WARPS = TPB // 32  # warps of a TPB block (a constant: shared-array shapes)
MV_TILE = (32, 8)  # threads (I, J) of a matvec block; MV_TILE[0] * MV_TILE[1] == TPB
# Blocks of the reducing kernels (grid-stride loops) before their register count is
# known (first launch, simulator); then exactly one wave: as many blocks as fit on
# the device at once (from the compiled kernel's register count): a partial last
# wave leaves multiprocessors idle while it runs.
RED_BLOCKS = 1024
THEN_CHECK, THEN_START = 1, 2  # what r2_backward_dot's last block does after the sum
# Slots of the CG scalars ``sc`` (the others: 0 r.z, 1 p.q, 2 the new r.z, 3 normb^2 of
# a warm start, 5 beta): ALPHA, the last iteration's alpha (its ``x += alpha p`` is done
# by the next ``update_p``, or by ``finish``); FSUM, r.z summed in the forward sweep of
# an iteration predicted to be the last (``GPUSolverState.precondition``, ``final``)
ALPHA, FSUM = 4, 6
DENSE_ROWS = 8  # rows of the dense last-level product per block (dense_last*)
# unsigned index constants: unsigned indices carry no negative-index wrap-around code
# (the flat level kernels, the dense product's loop)
U0, U1, U2, U3, U4, U5, U6, U7, U8, U9, U16 = (np.uint64(v) for v in (*range(10), 16))
# Levels of at most this many nodes a plane prefetch their factors into L1 before the
# PDL wait (latency-bound small levels gain; on larger, bandwidth-bound ones the
# prefetches only add requests and slow the kernel down)
PREFETCH_NODES = 1 << 17
KEYED_MAX = 8  # caller's array addresses with graphs of their own (GPUSolverState._direct)

_KERNELS: dict = {}


def gpu_kernels():
    """The compiled kernels (a dict, built once per process)."""
    if _KERNELS:
        return _KERNELS
    at = cuda_device(K.at)
    # Every kernel lets the next one launch at once and waits for its predecessors
    # before touching memory: a graph's kernel edges may then be programmatic ones
    # (GPUSolverState.pdl), so each launch overlaps the tail of the kernel before it.
    pdl_wait, pdl_trigger = grid_dependency()
    fetch_l1 = prefetch()

    @cuda.jit(device=True)
    def fetch_planes(F, k, n, first):
        # Before pdl_wait: the lines of the factor planes F[first:, ..., J, I] of
        # quarter node k (n nodes a plane, at most PREFETCH_NODES) into L1, one
        # prefetch per 16 nodes (a line holds 16 float64 or 32 float32 factors).
        # Factors are never written by a graph's kernels, so their lines cannot go
        # stale in L1; their DRAM latency then overlaps the kernel before this one.
        if k % 16 == 0 and n <= PREFETCH_NODES:
            for c in range(first, F.size // n):
                fetch_l1(F, c * n + k)

    if not cuda_simulator_enabled():

        @cuda.jit(device=True)
        def warp_sum(v):
            # the sum of ``v`` over the 32 lanes of the warp, in lane 0 (shuffles);
            # every thread of the block must call it
            off = 16
            while off > 0:
                v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
                off //= 2
            return v

    else:  # the simulator has no shuffles: the same sums through shared memory

        @cuda.jit(device=True)
        def warp_sum(v):
            t = cuda.threadIdx.x + cuda.threadIdx.y * cuda.blockDim.x
            sh = cuda.shared.array(TPB, float64)
            sh[t] = v
            cuda.syncthreads()
            total = 0.0
            if t & 31 == 0:
                for k in range(t, min(t + 32, cuda.blockDim.x * cuda.blockDim.y)):
                    total += sh[k]
            cuda.syncthreads()
            return total

    @cuda.jit(device=True)
    def block_add(v, sc, slot):
        # adds the sum of ``v`` over the block's TPB threads into sc[slot]: warp sums
        # by shuffles, their sum by thread 0, one atomic a block; every thread of the
        # block must call it
        t = cuda.threadIdx.x + cuda.threadIdx.y * cuda.blockDim.x
        sh = cuda.shared.array(WARPS, float64)
        v = warp_sum(v)
        if t & 31 == 0:
            sh[t >> 5] = v
        cuda.syncthreads()
        if t == 0:
            total = 0.0
            for k in range((cuda.blockDim.x * cuda.blockDim.y + 31) >> 5):
                total += sh[k]
            cuda.atomic.add(sc, slot, total)

    @cuda.jit(device=True)
    def last_block_done(count):
        # True in thread 0 of the block that finishes last (count[0]: blocks done,
        # back to 0 for the next kernel), once the sums the blocks added before are
        # visible to it
        if cuda.threadIdx.x != 0:
            return False
        cuda.threadfence()  # this block's sum reaches memory before its count
        if cuda.atomic.add(count, 0, 1) != cuda.gridDim.x - 1:
            return False
        count[0] = 0
        cuda.threadfence()
        return True

    @cuda.jit(device=True)
    def store_rows(s, i0, m, d, w, Xlast):
        # The end of a dense_last* block: the sums of its DENSE_ROWS rows' partial
        # products ``s`` (a local array per thread) over the block -- within each warp
        # by shuffles, then across the warps in shared memory (one barrier; a tree in
        # shared memory per row was slower) --
        # scaled by d and stored into the last level's quarters (rows past m: computed,
        # not stored); every thread of the block must call it.  Returns the thread's
        # part of w . Xlast over the block's rows (the last level's share of r.z).
        sh = cuda.shared.array((WARPS, DENSE_ROWS), float64)
        t0 = cuda.threadIdx.x
        wx = 0.0
        for r in range(DENSE_ROWS):
            v = warp_sum(s[r])
            if t0 & 31 == 0:
                sh[t0 >> 5, r] = v
        cuda.syncthreads()
        r = t0
        while r < DENSE_ROWS:  # one row a thread (blocks of fewer threads: the simulator)
            i = i0 + r
            if i < m:
                total = 0.0
                for k in range((cuda.blockDim.x + 31) >> 5):
                    total += sh[k, r]
                wl = Xlast.shape[2]
                hwl = Xlast.shape[1] * wl
                q = i // hwl
                J = (i - q * hwl) // wl
                xi = d[i] * total
                Xlast[q, J, i - q * hwl - J * wl] = xi
                wx += w[i] * xi
            r += cuda.blockDim.x
        return wx

    @cuda.jit(device=True)
    def dense_end(wx, sc, fs, st, hist, count, sth):
        # After the dense product of an iteration predicted to be the last (fs != 0):
        # the last level's share of r.z into sc[FSUM], then, in the block that
        # finishes last, the stopping rule on the r.z summed over the forward sweep
        if fs == 0:
            return
        block_add(wx, sc, FSUM)
        if last_block_done(count):
            check_state(sc, st, hist, cuda.atomic.add(sc, FSUM, 0.0), sth)

    as_float64 = words_as_float64()

    @cuda.jit(device=True)
    def fixed(u, k):
        # The k-th of the four int16 fields of the int64 u (little endian; stored in
        # offset binary, x ^ 0x8000, in [0, 65535]) as float64, without an
        # integer-to-float conversion (a slow instruction; it made the 3042-row
        # product compute-bound): the field put in the mantissa of 2^52 is the float64
        # 2^52 + x exactly (built from 32-bit words: no 64-bit integer arithmetic).
        return as_float64((u >> (16 * k)) & 0xFFFF, 0x43300000) - 4503599627403264.0

    @cuda.jit
    def matvec_dot(S, x, y, sc, slot, rows, g):
        pdl_trigger()
        pdl_wait()
        # y = S x (+ x.y into sc[slot]) with the same arithmetic, term by term, as
        # kernels.body_schur_matvec.  Each thread walks ``rows`` rows of one column I
        # (a warp: 32 adjacent columns, so every load is coalesced) and carries the
        # values of rows J - 1 and J + 1 over in registers: per node 12 first loads
        # (the minimum: S and x) and 8 side neighbours (I - 1, I + 1: L1 hits), against
        # 29 bounds-checked loads when every node reads its whole stencil.  Blocks of
        # MV_TILE threads, grid-stride over the row segments.  (Not branch-free like the
        # level kernels: loading the side neighbours clamped was slower, the kernel is
        # bound by memory and its side loads hit L1; docs/rrb.md, "Tried and not kept".)
        if g[0] != 0.0:
            return
        h, w = x.shape[1], x.shape[2]
        I = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        seg = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        nseg = cuda.gridDim.y * cuda.blockDim.y
        v = 0.0
        if I < w:
            J0 = seg * rows
            while J0 < h:
                J = J0
                # row J - 1 (only what row J reads of it)
                x0m = at(x, 0, J - 1, I, h, w)
                x1m = at(x, 1, J - 1, I, h, w)
                x1m_l = at(x, 1, J - 1, I - 1, h, w)
                s7m = at(S, 7, J - 1, I, h, w)
                s9m = at(S, 9, J - 1, I, h, w)
                # row J: what row J - 1 would have carried
                x0c = x[0, J, I]
                x1c = x[1, J, I]
                x0_r = at(x, 0, J, I + 1, h, w)
                s4 = S[4, J, I]
                J1 = min(J0 + rows, h)
                while J < J1:
                    x0_l = at(x, 0, J, I - 1, h, w)
                    x1_l = at(x, 1, J, I - 1, h, w)
                    x1_r = at(x, 1, J, I + 1, h, w)
                    s6 = S[6, J, I]
                    s7 = S[7, J, I]
                    s9 = S[9, J, I]
                    x0p = at(x, 0, J + 1, I, h, w)
                    x1p = at(x, 1, J + 1, I, h, w)
                    x0p_r = at(x, 0, J + 1, I + 1, h, w)
                    s4p = at(S, 4, J + 1, I, h, w)
                    y1 = (
                        S[0, J, I] * x0c
                        + S[2, J, I] * x1c
                        + S[3, J, I] * x1_l
                        + s4 * x1m
                        + S[5, J, I] * x1m_l
                        + s6 * x0_r
                        + at(S, 6, J, I - 1, h, w) * x0_l
                        + s7 * x0p
                        + s7m * x0m
                    )
                    y2 = (
                        S[1, J, I] * x1c
                        + S[2, J, I] * x0c
                        + at(S, 3, J, I + 1, h, w) * x0_r
                        + s4p * x0p
                        + at(S, 5, J + 1, I + 1, h, w) * x0p_r
                        + S[8, J, I] * x1_r
                        + at(S, 8, J, I - 1, h, w) * x1_l
                        + s9 * x1p
                        + s9m * x1m
                    )
                    y[0, J, I] = y1
                    y[1, J, I] = y2
                    v += x0c * y1 + x1c * y2
                    x0m, x1m, x1m_l, s7m, s9m = x0c, x1c, x1_l, s7, s9
                    x0c, x1c, x0_r, s4 = x0p, x1p, x0p_r, s4p
                    J += 1
                J0 += nseg * rows
        block_add(v, sc, slot)

    @cuda.jit(device=True)
    def quarter_u(J, I):
        # kernels.next_level_quarter without branches, unsigned: (I, J) parities
        # (0, 0) -> 0, (0, 1) -> 3, (1, 0) -> 2, (1, 1) -> 1
        a = I & U1
        b = J & U1
        return U2 * a + U3 * b - U4 * a * b

    # The level kernels below index flat arrays (a level's planes of n = h w nodes,
    # node k = J w + I; factors BL (2, 5) and P (5) planes), unsigned (no wrap-around
    # code), each neighbour's index from the node's own, and have no branch: a
    # neighbour past the edge is loaded at the edge and its value replaced by 0.
    # The arithmetic is that of the pointwise bodies in kernels.py, term by term.
    # (3-D indexing with bounds-checked loads made them bound by their instructions
    # and branches; docs/rrb.md, "Layout".)  Every kernel loads before it stores.

    @cuda.jit(device=True)
    def node(k, hh, ww):
        # the unsigned flat index, row, column, row length, rows and plane size
        ku = uint64(k)
        w = uint64(ww)
        J = ku // w
        return ku, J, ku - J * w, w, uint64(hh), uint64(hh * ww)

    @cuda.jit(device=True)
    def around(k, J, I, h, w):
        # whether the west, south, east and north neighbours of node k exist, and
        # their flat indices (the node's own where they do not)
        iw = I > U0
        js = J > U0
        ie = I + U1 < w
        jn = J + U1 < h
        return (iw, js, ie, jn, k - (U1 if iw else U0), k - (w if js else U0),
                k + (U1 if ie else U0), k + (w if jn else U0))

    @cuda.jit
    def black_forward(BL, y, g, hh, ww):
        # kernels.body_black_forward
        pdl_trigger()
        k = cuda.grid(1)
        if k < hh * ww:
            fetch_planes(BL, k, hh * ww, 0)
        pdl_wait()
        if g[0] != 0.0:
            return
        if k < hh * ww:
            k, J, I, w, h, n = node(k, hh, ww)
            iw, js, ie, jn, kw, ks, ke, kn = around(k, J, I, h, w)
            y2 = y[U2 * n + k]
            y3 = y[U3 * n + k]
            tw = BL[U2 * n + kw] * y[U2 * n + kw]
            ts = BL[U9 * n + ks] * y[U3 * n + ks]
            tn = BL[U3 * n + kn] * y[U2 * n + kn]
            te = BL[U6 * n + ke] * y[U3 * n + ke]
            v0 = y[k] - (BL[n + k] * y2 + (tw if iw else 0.0) + BL[U8 * n + k] * y3
                         + (ts if js else 0.0))
            v1 = y[n + k] - (BL[U4 * n + k] * y2 + (tn if jn else 0.0) + BL[U7 * n + k] * y3
                             + (te if ie else 0.0))
            y[k] = v0
            y[n + k] = v1

    @cuda.jit(device=True)
    def black_share(BLn, q, jq, I, qn, xv):
        # xv^2 / c when the r1 node (J, I) of a level becomes a black node of the next
        # (its quarters q = 2, 3, whose factors are BLn: (2, 5) planes of qn nodes,
        # row J >> 1 at jq); else 0
        c = BLn[(q - U2 if q >= U2 else U0) * U5 * qn + jq + (I >> U1)]
        return xv * xv * c if q >= U2 else 0.0

    @cuda.jit
    def residual_update(rs, q, sc, rd, g):
        # r = r_old - alpha q, alpha = sc[ALPHA] (as r2_forward_xr, after an iteration
        # predicted to be the last that did not end the solve: see ``_resume``)
        pdl_trigger()
        pdl_wait()
        if g[0] != 0.0:
            return
        k = cuda.grid(1)
        if k < rs.size:
            rd[k] = rs[k] - sc[ALPHA] * q[k]

    def sweep_kernels(fs):
        # The kernels of the forward sweep and the dense product, compiled twice:
        # fs = 0 (plain) and fs = 1 (an iteration predicted to be the last: r.z summed
        # on the way; the ``_sum`` kernels).  fs is a compile-time constant, so the
        # plain kernels carry no code of the sums.
        @cuda.jit
        def dense_last(Minv, d, w, Xlast, g, sc, st, hist, count, sth):
            pdl_trigger()
            pdl_wait()
            # Xlast[0:2] = D Minv D w[:m] (D = diag(d)); w: the last level's quarters
            # flattened (a read-only view: the red quarters come first); Minv float32 or
            # float64 (int16 fixed point: dense_last_fixed), sums in float64.  DENSE_ROWS
            # rows a block, the threads over the columns (coalesced reads of Minv; each w
            # value loaded once for all the rows: DENSE_ROWS + 2 independent loads in
            # flight a thread and column); blockDim.x a multiple of 32, at most TPB.
            if g[0] != 0.0:
                return
            m = Minv.shape[0]
            i0 = cuda.blockIdx.x * DENSE_ROWS
            s = cuda.local.array(DENSE_ROWS, float64)
            for r in range(DENSE_ROWS):
                s[r] = 0.0
            j = cuda.threadIdx.x
            while j < m:
                wj = d[j] * w[j]
                for r in range(DENSE_ROWS):
                    s[r] += Minv[min(i0 + r, m - 1), j] * wj
                j += cuda.blockDim.x
            dense_end(store_rows(s, i0, m, d, w, Xlast), sc, fs, st, hist, count, sth)

        @cuda.jit
        def dense_last_fixed(M, d, w, Xlast, g, sc, st, hist, count, sth):
            # As dense_last for an int16 fixed-point Minv in offset binary, read as int64
            # words of four entries (M: shape (m, ceil(m / 4)), each thread loads 8 bytes
            # a row and step, 256 bytes a warp), one word of each of the block's rows a
            # step; d padded with zeros to 4 columns a word.  Before pdl_wait, the block's
            # rows start coming into L1 (M is never written by a graph's kernels), so after
            # it the loop is bound by its instructions: unsigned indices (no negative-index
            # wrap-around code), the offset binary stored (no xor), fields made float64
            # from 32-bit words (``fixed``) and one fused multiply-add an entry (64-bit
            # shifts and masks, or an int -> float conversion, made it compute-bound).
            pdl_trigger()
            m = M.shape[0]
            ng = uint64(M.shape[1])
            i0 = cuda.blockIdx.x * DENSE_ROWS
            row = cuda.local.array(DENSE_ROWS, uint64)
            for r in range(DENSE_ROWS):
                row[r] = uint64(min(i0 + r, m - 1))
            step = uint64(cuda.blockDim.x)
            c = uint64(cuda.threadIdx.x)
            while c < ng:
                if c % U16 == U0:  # a line: 16 words
                    for r in range(DENSE_ROWS):
                        fetch_l1(M, row[r] * ng + c)
                c += step
            pdl_wait()
            if g[0] != 0.0:
                return
            s = cuda.local.array(DENSE_ROWS, float64)
            for r in range(DENSE_ROWS):
                s[r] = 0.0
            c = uint64(cuda.threadIdx.x)
            while c < ng:
                j = c * U4
                w0 = d[j] * w[j]
                w1 = d[j + U1] * w[j + U1]
                w2 = d[j + U2] * w[j + U2]
                w3 = d[j + U3] * w[j + U3]
                for r in range(DENSE_ROWS):
                    u = M[row[r], c]
                    s[r] = fixed(u, 3) * w3 + (
                        fixed(u, 2) * w2 + (fixed(u, 1) * w1 + (fixed(u, 0) * w0 + s[r])))
                c += step
            dense_end(store_rows(s, i0, m, d, w, Xlast), sc, fs, st, hist, count, sth)

        # The level's r2 kernels with fs != 0 (an iteration predicted to be the last)
        # also add their nodes' share of r.z = y^T D^-1 y into sc[FSUM] (y = L^-1 r:
        # z = L^-T D^-1 y, so r.z needs no back-substitution): y_r2^2 / d of their r2
        # nodes and y_black^2 / c of the next level's black nodes, which they write
        # (``black_share``; the black steps change only red values); the last level's
        # w . D Minv D w in ``dense_end``.  Padding nodes hold y = 0 and 1/c = 1/d = 1.

        @cuda.jit(device=True)
        def r2_eliminate(P, X, BLn, k, J, I, n, hq, wq, iw, js, r1, r2, rw, rs, rsw):
            # kernels.body_r2_forward on the values of node k's r1 and r2 entries and
            # of its west, south and south-west r2 neighbours (loaded, not yet zeroed
            # past the edge): the next level's value into X; returns the r.z share of
            # an iteration predicted to be the last (fs != 0), else 0
            xv = r1 - (
                P[n + k] * r2
                + P[U2 * n + k] * (rw if iw else 0.0)
                + P[U3 * n + k] * (rs if js else 0.0)
                + P[U4 * n + k] * (rsw if iw and js else 0.0)
            )
            q = quarter_u(J, I)
            jq = (J >> U1) * uint64(wq)
            qn = uint64(hq * wq)
            X[q * qn + jq + (I >> U1)] = xv
            if fs != 0:
                return r2 * r2 * P[k] + black_share(BLn, q, jq, I, qn, xv)
            return 0.0

        @cuda.jit
        def r2_forward(P, y, X, g, sc, BLn, hh, ww, hq, wq):
            # kernels.body_r2_forward
            pdl_trigger()
            k = cuda.grid(1)
            if k < hh * ww:
                fetch_planes(P, k, hh * ww, 0 if fs != 0 else 1)
            pdl_wait()
            if g[0] != 0.0:
                return
            v = 0.0
            if k < hh * ww:
                k, J, I, w, h, n = node(k, hh, ww)
                iw, js, ie, jn, kw, ks, ke, kn = around(k, J, I, h, w)
                v = r2_eliminate(P, X, BLn, k, J, I, n, hq, wq, iw, js, y[k], y[n + k],
                                 y[n + kw], y[n + ks], y[n + ks - (U1 if iw else U0)])
            if fs != 0:
                block_add(v, sc, FSUM)

        @cuda.jit
        def r2_forward_xr(P, rs, rd, q, sc, X, g, BLn, hh, ww, hq, wq):
            # The level-1 r2 step of the preconditioner with the CG update of r fused in:
            # r = r_old - alpha q (alpha = sc[0] / sc[1]) into rd (another buffer than rs:
            # neighbouring threads still read the old r), then the r2 elimination of
            # kernels.body_r2_forward on the updated values.  ``x += alpha p`` waits for
            # the next ``update_p`` (or ``finish``), which reads p anyway.  With fs != 0
            # r is not written: an iteration that ends the solve needs it no more, and
            # one that does not gets it from ``residual_update`` (``_resume``).
            pdl_trigger()
            if cuda.grid(1) < hh * ww:
                fetch_planes(P, cuda.grid(1), hh * ww, 0 if fs != 0 else 1)
            pdl_wait()
            if g[0] != 0.0:
                return
            k = cuda.grid(1)
            v = 0.0
            if k < hh * ww:
                k, J, I, w, h, n = node(k, hh, ww)
                iw, js, ie, jn, kw, ks, ke, kn = around(k, J, I, h, w)
                ksw = ks - (U1 if iw else U0)
                alpha = sc[0] / sc[1]
                r1 = rs[k] - alpha * q[k]
                r2 = rs[n + k] - alpha * q[n + k]
                rw = rs[n + kw] - alpha * q[n + kw]
                rS = rs[n + ks] - alpha * q[n + ks]
                rsw = rs[n + ksw] - alpha * q[n + ksw]
                v = r2_eliminate(P, X, BLn, k, J, I, n, hq, wq, iw, js, r1, r2, rw, rS, rsw)
                if fs == 0:
                    rd[k] = r1
                    rd[n + k] = r2
            if fs != 0:
                block_add(v, sc, FSUM)

        return {"dense_last": dense_last, "dense_last_fixed": dense_last_fixed,
                "r2_forward": r2_forward,
                "r2_forward_xr": r2_forward_xr}

    @cuda.jit(device=True)
    def r2_back(P, y, X, o, k, J, I, h, w, n, qn, wq):
        # kernels.body_r2_backward (flat arrays: see ``node``), X the next level's four
        # quarters of qn nodes in rows of wq; returns y . o over the two entries
        iw, js, ie, jn, kw, ks, ke, kn = around(k, J, I, h, w)
        I1 = I + U1 if ie else I
        J1 = J + U1 if jn else J
        jq = (J >> U1) * wq
        jq1 = (J1 >> U1) * wq
        x1 = X[quarter_u(J, I) * qn + jq + (I >> U1)]
        te = X[quarter_u(J, I1) * qn + jq + (I1 >> U1)]
        tn = X[quarter_u(J1, I) * qn + jq1 + (I >> U1)]
        tne = X[quarter_u(J1, I1) * qn + jq1 + (I1 >> U1)]
        xe = te if ie else 0.0
        xn = tn if jn else 0.0
        xne = tne if ie and jn else 0.0
        kne = kn + (U1 if ie else U0)
        y0 = y[k]
        y1 = y[n + k]
        x2 = y1 * P[k] - (
            P[n + k] * x1 + P[U2 * n + ke] * xe + P[U3 * n + kn] * xn + P[U4 * n + kne] * xne
        )
        s = y0 * x1 + y1 * x2
        o[k] = x1
        o[n + k] = x2
        return s

    @cuda.jit
    def r2_backward(P, y, X, o, g, hh, ww, hq, wq):
        # the r2 back-substitution of a level >= 2
        pdl_trigger()
        k = cuda.grid(1)
        if k < hh * ww:
            fetch_planes(P, k, hh * ww, 0)
        pdl_wait()
        if g[0] != 0.0:
            return
        if k < hh * ww:
            k, J, I, w, h, n = node(k, hh, ww)
            r2_back(P, y, X, o, k, J, I, h, w, n, uint64(hq * wq), uint64(wq))

    @cuda.jit
    def r2_backward_dot(P, y, X, o, sc, slot, g, then, nbslot, st, hist, par, count, sth,
                        hh, ww, hq, wq):
        pdl_trigger()
        if cuda.grid(1) < hh * ww:  # the first node of the thread's loop
            fetch_planes(P, cuda.grid(1), hh * ww, 0)
        pdl_wait()
        # The level-1 r2 back-substitution (flat arrays: see r2_back), r.z into
        # sc[slot]; then the block that finishes last (counted in count[0]) runs the
        # stopping rule (then == THEN_CHECK, after an iteration) or sets up the
        # stopping state (THEN_START, after the first preconditioner application;
        # normb^2 in sc[nbslot]), so the scalars need no kernel of their own.
        # (A column walk in 2D blocks as the matvec's, or one node a thread with the
        # block sums added into 256 addresses, were slower; not kept.)
        if g[0] != 0.0:
            return
        h = uint64(hh)
        w = uint64(ww)
        n = h * w
        qn = uint64(hq * wq)
        wqu = uint64(wq)
        k = uint64(cuda.grid(1))
        stride = uint64(cuda.gridsize(1))
        # (J, I) of node k, stepped by the stride without a division a node
        J = k // w
        I = k - J * w
        dJ = stride // w
        dI = stride - dJ * w
        v = 0.0
        while k < n:
            v += r2_back(P, y, X, o, k, J, I, h, w, n, qn, wqu)
            k += stride
            I += dI
            J += dJ
            if I >= w:
                I -= w
                J += U1
        block_add(v, sc, slot)
        if then == 0 or not last_block_done(count):
            return
        if then == THEN_CHECK:
            check_state(sc, st, hist, cuda.atomic.add(sc, 2, 0.0), sth)
        else:
            start_state(sc, st, cuda.atomic.add(sc, nbslot, 0.0),
                        cuda.atomic.add(sc, 2, 0.0), par, sth)

    @cuda.jit(device=True)
    def black_values(BL, y, k, n, x0, x0e, x1s, x1, x1w, x0n):
        # kernels.black_values_from on flat arrays
        b1 = y[U2 * n + k] * BL[k] - (
            BL[n + k] * x0 + BL[U2 * n + k] * x0e + BL[U3 * n + k] * x1s + BL[U4 * n + k] * x1
        )
        b2 = y[U3 * n + k] * BL[U5 * n + k] - (
            BL[U6 * n + k] * x1w + BL[U7 * n + k] * x1 + BL[U8 * n + k] * x0
            + BL[U9 * n + k] * x0n
        )
        return b1, b2

    @cuda.jit
    def black_backward(BL, y, x, g, hh, ww):
        # kernels.body_black_backward (black_values_from): x[2:4] from x[0:2] and y
        pdl_trigger()
        k = cuda.grid(1)
        if k < hh * ww:
            fetch_planes(BL, k, hh * ww, 0)
        pdl_wait()
        if g[0] != 0.0:
            return
        if k < hh * ww:
            k, J, I, w, h, n = node(k, hh, ww)
            iw, js, ie, jn, kw, ks, ke, kn = around(k, J, I, h, w)
            x0 = x[k]
            x1 = x[n + k]
            t0e = x[ke]
            t1s = x[n + ks]
            t1w = x[n + kw]
            t0n = x[kn]
            b1, b2 = black_values(BL, y, k, n, x0, t0e if ie else 0.0, t1s if js else 0.0,
                                  x1, t1w if iw else 0.0, t0n if jn else 0.0)
            x[U2 * n + k] = b1
            x[U3 * n + k] = b2

    @cuda.jit
    def update_p(p, z, x, sc, g):
        # x += alpha p (the last iteration's, deferred: p is read here anyway), then
        # p = z + beta p
        pdl_trigger()
        pdl_wait()
        if g[0] != 0.0:
            return
        k = cuda.grid(1)
        if k < p.size:
            pk = p[k]
            x[k] += sc[ALPHA] * pk
            p[k] = z[k] + sc[5] * pk

    @cuda.jit(device=True)
    def mirror(st, sth):
        # st into its host mirror (sth: mapped host memory, see GPUSolverState._stat)
        for i in range(8):
            sth[i] = st[i]

    @cuda.jit(device=True)
    def start_state(sc, st, nb2, rz, par, sth):
        # The stopping state before the first iteration (no host read of r.z):
        # normb = sqrt(nb2), res = sqrt(rz) / normb (0 when normb = 0), and the scalar
        # roll: sc[0] = r.z, sc[2] = 0 (the setup's sum) and sc[ALPHA] = 0 (a warm
        # setup's scratch slot; no x += alpha p before the first iteration), the other
        # scalars still 0 from ``split_schur_rhs``; par = [tol, maxiter] (a device
        # array, so a captured graph serves every tolerance).  st[7] != 0
        # (``split_schur_rhs`` found a non-finite input): done at once, not converged.
        tol = par[0]
        maxiter = par[1]
        nb = math.sqrt(max(nb2, 0.0))
        res = 0.0
        if nb > 0.0:
            res = math.sqrt(max(rz, 0.0)) / nb
        else:
            nb = 1.0
        conv = res <= tol and st[7] == 0.0
        st[0] = 1.0 if (conv or maxiter <= 0 or st[7] != 0.0) else 0.0
        st[1] = 0.0
        st[2] = nb
        st[3] = tol
        st[4] = maxiter
        st[5] = 1.0 if conv else 0.0
        st[6] = res
        sc[0] = rz
        sc[2] = 0.0
        sc[ALPHA] = 0.0
        mirror(st, sth)

    @cuda.jit(device=True)
    def check_state(sc, st, hist, rz, sth):
        # The stopping rule on the device, after an iteration's r.z:
        # st = [done, iterations, normb, tol, maxiter, converged, res, -].  Once done,
        # every gated kernel of later (captured) iterations returns at once, so the
        # iterate is exactly the one where the test first passed (x + alpha p: the
        # iteration's alpha is kept in sc[ALPHA] for ``finish``).  Otherwise the
        # scalars roll for the next iteration: beta = r.z / r.z_old into sc[5],
        # sc[0] = r.z, sc[1] = sc[2] = sc[FSUM] = 0.  The state and the history entry
        # also go into the host mirror sth = [st, hist].
        if st[0] != 0.0:
            return
        sc[ALPHA] = sc[0] / sc[1]
        c = st[1] + 1.0
        st[1] = c
        res = math.sqrt(max(rz, 0.0)) / st[2]
        i = int(c) - 1
        if i < hist.size:
            hist[i] = res
            sth[8 + i] = res
        st[6] = res
        if res <= st[3]:
            st[0] = 1.0
            st[5] = 1.0
        elif c >= st[4]:
            st[0] = 1.0
        else:
            sc[5] = rz / sc[0]
            sc[0] = rz
            sc[1] = 0.0
            sc[2] = 0.0
            sc[FSUM] = 0.0
        mirror(st, sth)

    @cuda.jit
    def dot(a, b, sc, slot):
        pdl_trigger()
        pdl_wait()
        k = cuda.grid(1)
        stride = cuda.gridsize(1)
        v = 0.0
        while k < a.size:
            v += a[k] * b[k]
            k += stride
        block_add(v, sc, slot)

    @cuda.jit
    def sub(a, b, o):
        pdl_trigger()
        pdl_wait()
        k = cuda.grid(1)
        if k < a.size:
            o[k] = a[k] - b[k]

    @cuda.jit(device=True)
    def nat(a, j, i):
        # a[j, i] of a natural-order (ny, nx) array for unsigned j, i, 0 past its last
        # row or column (the pads of quarters); loaded at the edge, then zeroed
        ny, nx = uint64(a.shape[0]), uint64(a.shape[1])
        t = a[min(j, ny - U1), min(i, nx - U1)]
        return t if j < ny and i < nx else 0.0

    @cuda.jit(device=True)
    def finite(a, b, c, e):
        return math.isfinite(a) and math.isfinite(b) and math.isfinite(c) and math.isfinite(e)

    @cuda.jit
    def split_schur_rhs(BL, a, x0, warm, y, o, x, st, sth, sc, hh, ww):
        pdl_trigger()
        pdl_wait()
        # The rhs ``a`` (ny, nx, natural order) in quarters and its black elimination
        # in one pass (each thread reads its four values and the four black
        # neighbours of its red nodes where they lie in ``a``; the same arithmetic, term
        # by term, as kernels.black_forward_values on the quarters; flat quarter arrays
        # as the level kernels', see ``node``): the black rhs into
        # y[2:4] (for ``finish``), the Schur rhs into o[0:2] (the first residual, or z
        # of a warm start) and, warm, into y[0:2] too; the first iterate x = 0 (cold) or
        # the red values of x0 (warm, natural order).  A NaN or inf in a (or x0) sets
        # the flag st[7] and its host mirror sth[7] (the same value from any thread: no
        # race that matters; the host sets them back to 0 when it raises).  Thread 0
        # also starts the solve's state: the CG scalars to 0, and st[0] (done) to 1
        # until ``start_state`` has set the stopping state (which a non-finite input
        # skips: its iterations then stay gated off).
        k = cuda.grid(1)
        if k == 0:
            for i in range(sc.size):
                sc[i] = 0.0
            st[0] = 1.0
            sth[0] = 1.0
        if k < hh * ww:
            k, J, I, w, h, n = node(k, hh, ww)
            iw, js, ie, jn, kw, ks, ke, kn = around(k, J, I, h, w)
            j0 = U2 * J
            i0 = U2 * I
            r1 = a[j0, i0]
            r2 = nat(a, j0 + U1, i0 + U1)
            b1 = nat(a, j0, i0 + U1)
            b2 = nat(a, j0 + U1, i0)
            ok = finite(r1, r2, b1, b2)
            tw = BL[U2 * n + kw] * a[j0, i0 - (U1 if iw else U0)]
            ts = BL[U9 * n + ks] * a[j0 - (U1 if js else U0), i0]
            tn = BL[U3 * n + kn] * nat(a, j0 + U2, i0 + U1)
            te = BL[U6 * n + ke] * nat(a, j0 + U1, i0 + U2)
            v0 = r1 - (BL[n + k] * b1 + (tw if iw else 0.0) + BL[U8 * n + k] * b2
                       + (ts if js else 0.0))
            v1 = r2 - (BL[U4 * n + k] * b1 + (tn if jn else 0.0) + BL[U7 * n + k] * b2
                       + (te if ie else 0.0))
            if warm:
                x1 = x0[j0, i0]
                x2 = nat(x0, j0 + U1, i0 + U1)
                ok = ok and finite(x1, x2, nat(x0, j0, i0 + U1), nat(x0, j0 + U1, i0))
            else:
                x1 = 0.0
                x2 = 0.0
            y[U2 * n + k] = b1
            y[U3 * n + k] = b2
            o[k] = v0
            o[n + k] = v1
            if warm:
                y[k] = v0
                y[n + k] = v1
            x[k] = x1
            x[n + k] = x2
            if not ok:
                st[7] = 1.0
                sth[7] = 1.0

    @cuda.jit
    def finish(BL, y, x, p, sc, a, g, hh, ww):
        pdl_trigger()
        pdl_wait()
        # The black back-substitution from the red iterate x[0:2] + sc[ALPHA] p[0:2]
        # and the black rhs y[2:4], every quarter written straight into natural order
        # a (ny, nx) (x itself is left as it is: a speculative finish changes nothing
        # the iterations use); nothing when g[0] != 0 (a non-finite input: ``a`` may
        # be the caller's array).  Flat quarter arrays as the level kernels'.
        if g[0] != 0.0:
            return
        k = cuda.grid(1)
        if k < hh * ww:
            k, J, I, w, h, n = node(k, hh, ww)
            iw, js, ie, jn, kw, ks, ke, kn = around(k, J, I, h, w)
            al = sc[ALPHA]
            x0 = x[k] + al * p[k]
            x1 = x[n + k] + al * p[n + k]
            t0e = x[ke] + al * p[ke]
            t1s = x[n + ks] + al * p[n + ks]
            t1w = x[n + kw] + al * p[n + kw]
            t0n = x[kn] + al * p[kn]
            b1, b2 = black_values(BL, y, k, n, x0, t0e if ie else 0.0, t1s if js else 0.0,
                                  x1, t1w if iw else 0.0, t0n if jn else 0.0)
            ny, nx = uint64(a.shape[0]), uint64(a.shape[1])
            i0, j0 = U2 * I, U2 * J
            a[j0, i0] = x0
            if i0 + U1 < nx and j0 + U1 < ny:
                a[j0 + U1, i0 + U1] = x1
            if i0 + U1 < nx:
                a[j0, i0 + U1] = b1
            if j0 + U1 < ny:
                a[j0 + U1, i0] = b2

    _KERNELS.update(sweep_kernels(0))
    _KERNELS.update({name + "_sum": kern for name, kern in sweep_kernels(1).items()})
    _KERNELS.update(
        matvec_dot=matvec_dot,
        black_forward=black_forward,
        residual_update=residual_update,
        r2_backward=r2_backward,
        update_p=update_p,
        r2_backward_dot=r2_backward_dot,
        black_backward=black_backward,
        dot=dot,
        sub=sub,
        split_schur_rhs=split_schur_rhs,
        finish=finish,
    )
    return _KERNELS


def fixed_point_words(inv):
    """The int16 matrix ``inv`` as ``dense_last_fixed`` reads it: int64 words of four
    entries in offset binary (``x ^ 0x8000``, see ``fixed``), each row padded with zero
    entries to a multiple of 4 (d must be padded with zeros likewise)."""
    m4 = -(-inv.shape[1] // 4) * 4
    pad = np.zeros((inv.shape[0], m4), dtype=np.int16)
    pad[:, : inv.shape[1]] = inv
    return (pad.view(np.uint16) ^ np.uint16(0x8000)).view(np.int64)


def _blocks(n):
    return max(1, -(-n // TPB))


def _mv_grid(h, w, cap=RED_BLOCKS, rows=None):
    """Blocks of the column-walking matvec and the rows each thread walks: every
    column tile, as many row tiles as fit in ``cap`` blocks (at least one), the rows
    split evenly among them; ``rows`` given: that many rows a thread (tests)."""
    gx = -(-w // MV_TILE[0])
    if rows is None:
        gy = max(1, min(-(-h // MV_TILE[1]), cap // gx))
        rows = -(-h // (MV_TILE[1] * gy))
    gy = max(1, min(-(-h // (MV_TILE[1] * rows)), max(1, cap // gx)))
    return (gx, gy), rows


def _red_blocks(n, cap=RED_BLOCKS):
    """Blocks of a reducing (grid-stride) kernel over ``n`` items."""
    return min(_blocks(n), cap)


def one_wave(kernel) -> int:
    """Blocks of ``TPB`` threads of a compiled ``kernel`` resident on the device at
    once; ``RED_BLOCKS`` while not compiled yet."""
    return blocks_per_wave(kernel, TPB) or RED_BLOCKS


def _next_chunk(hist, tol, kmax):
    """Iterations in the next graph launch: the largest power of two <= ``kmax`` not
    past the iterations still needed as predicted from the mean convergence rate so far
    (a prediction only: a wrong one costs a no-op iteration or an extra host read), and
    whether the solve is predicted to stop within them."""
    n = len(hist)
    if kmax <= 1 or n < 2 or not (0.0 < hist[-1] < hist[0]):
        return kmax, False
    rate = (hist[-1] / hist[0]) ** (1.0 / (n - 1))
    if not 0.0 < rate < 1.0 or tol <= 0.0:
        return kmax, False
    need = max(1, math.ceil(math.log(tol / hist[-1]) / math.log(rate)))
    m = 1
    while 2 * m <= min(need, kmax):
        m *= 2
    return m, m >= need


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

        self._put = put
        self._data = data
        self.S9 = put(data["schur9"])
        self.P = [put(p) for p in data["rot"]]
        self.BL = [put(b) for b in data["black"]]
        self.BLlast = put(data["last_black"])
        # level quarters W[lev] (lev >= 1; W[0] is the CG vector being preconditioned)
        self.W = [None] + [
            xp.zeros((4, *quarter_shape(nx, ny))) for nx, ny in data["shapes"][1:-1]
        ]
        hk, wk = quarter_shape(*data["shapes"][-1])
        self.Wlast = xp.zeros((4, hk, wk))
        self.Xlast = xp.zeros((4, hk, wk))
        inv, scale = data["last_inv"], data["last_scale"]
        self.fixed = inv.dtype == np.int16
        if self.fixed:
            inv = fixed_point_words(inv)
            scale = np.concatenate([scale, np.zeros(4 * inv.shape[1] - scale.size)])
        self.Minv = put(inv)
        self.Dlast = put(scale)
        self.Wlast_flat = self.Wlast.reshape(-1)  # read-only view for dense_last
        # threads of a dense_last block: TPB (faster than 64 or 128 for the last
        # levels of the default stopping rule); 4 in the simulator, where each thread is
        # a Python thread
        self.dense_tpb = 4 if self.sim else TPB
        # CG vectors (red quarters); r has two buffers, used in turn: iteration i reads
        # buffer i % 2 and writes the other (its first preconditioner kernel updates r
        # while neighbouring threads still read the old values)
        self.vec = {k: xp.zeros((2, h, w)) for k in ("x", "r", "z", "p", "q", "r_")}
        self.rbuf = (self.vec["r"], self.vec["r_"])
        self.count = xp.zeros(1, dtype=np.int32)  # blocks done (r2_backward_dot)
        self.full = xp.zeros((4, h, w))
        self.rhs_nat = xp.zeros((self.ny, self.nx))
        self.x0_nat = xp.zeros((self.ny, self.nx))
        self.out_nat = xp.zeros((self.ny, self.nx))
        self.par = xp.zeros(2)  # [tol, maxiter] of the solve, read by ``start_state``
        self._par = None
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
        nf = 2 * h * w
        self.flat = {k: a.reshape(nf) for k, a in self.vec.items()}
        # flat views made once (``v`` caches device views by object)
        self.bS_flat = self.full[:2].reshape(nf)
        self._views: dict = {}
        self._flats: dict = {}
        self._st = 0  # Numba stream of the launches (0: the default stream)
        self._read_on = 0  # the stream of the work queued last (``_replay``)
        # The setup, chunks of CG iterations (~5 + 4 x levels kernels each) and the
        # finish are captured once into CUDA graphs and replayed on one stream: a
        # graph launch instead of ~30 Python dispatches (each costs more than most of
        # the kernels it launches).  Off in
        # the simulator; ``use_graph = False`` turns it off.
        self.use_graph = not self.sim
        # Kernel-to-kernel edges of the graphs made programmatic (every kernel here
        # waits for its predecessors before touching memory): each launch overlaps the
        # tail of the kernel before it.  Off where the driver or device lacks it
        # (``_pdl_error``); ``pdl = False`` before the first solve turns it off.
        self.pdl = not self.sim
        self._pdl_error = None
        # a solve predicted to end in its first chunk: one graph (see ``solve``)
        self.one_graph = True
        self._graphs: dict = {}
        self._graph_error = None
        self._stream = None
        self._wave: dict = {}
        self.mv_rows = None  # rows a matvec thread walks (None: from the grid)
        self._last_its = 0  # iterations of the last solve: the first chunk's length
        self._seen: set = set()  # addresses of caller's arrays seen (``_direct``)
        self._keyed: set = set()  # ... and those read / written in place

    def _stat(self, maxiter):
        """One device array ``[st (8), hist (maxiter)]``, and its mirror in host memory
        that the device writes (``stat_host``, see the device function ``mirror``)."""
        self.stat = self.xp.zeros(8 + max(int(maxiter), 1))
        # page-locked host memory mapped into the device's address space: the kernels
        # that change the state also write it there, so the host only waits for the
        # stream (a copy of the state after each chunk, as a host read or as a node of
        # the graph, costs a copy's latency per chunk)
        n = self.stat.size
        self.stat_host = np.zeros(n) if self.sim else cuda.mapped_array(n, dtype=np.float64)
        self.st = self.stat[:8]
        # st[7]: a non-finite rhs or x0 (set by ``split_schur_rhs``); also the gate of the
        # setup's preconditioner and matvec, so that NaN never reaches the level
        # buffers (their padded entries would keep it for every later solve)
        self.flag = self.stat[7:8]
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

    def wave(self, name):
        """Blocks of one wave of the reducing kernel ``name`` (see :func:`one_wave`)."""
        got = self._wave.get(name)
        if got is None:
            got = RED_BLOCKS if self.sim else one_wave(self.k[name])
            if got != RED_BLOCKS or self.sim:
                self._wave[name] = got
        return got

    # ------------------------------------------------------------------ routines
    def matvec_dot(self, x, y, slot=1, gate=None):
        g = self.nogate if gate is None else gate
        grid, rows = _mv_grid(self.h, self.w, self.wave("matvec_dot"), self.mv_rows)
        self.k["matvec_dot"][grid, MV_TILE, self._st](
            self.v(self.S9), self.v(x), self.v(y), self.v(self.sc), slot, rows, self.v(g)
        )

    def precondition(self, r, z, slot=2, gate=None, xr=None, then=0, nbslot=0, final=False):
        """``z = M^-1 r`` (red level-1 vectors); adds ``r . z`` into ``sc[slot]``.
        Every kernel returns at once when ``gate[0] != 0``.  ``xr = (r_old, q)``: the
        CG update ``r = r_old - alpha q`` is fused into the first kernel (``r``
        written); ``then``: THEN_CHECK or THEN_START after the sum (see the kernel
        ``r2_backward_dot``).

        ``final`` (an iteration predicted to be the last of its solve): only the
        forward sweep, with ``r . z = y^T D^-1 y`` summed on the way into
        ``sc[FSUM]`` and the stopping rule run on it by the dense product's last
        block; ``z`` is not computed (if the solve goes on, :meth:`backward` does it).
        Saves the back-substitution of the last iteration (about a third of an
        iteration)."""
        v = self.v
        g = v(self.nogate if gate is None else gate)
        nl = len(self.P)
        src = r
        for lev in range(nl):
            dst = self.W[lev + 1] if lev + 1 < nl else self.Wlast
            bln = self.BL[lev + 1] if lev + 1 < nl else self.BLlast  # dst's black factors
            if lev == 0 and xr is not None:
                self.level1_forward_xr(xr[0], r, xr[1], dst, bln, g, final)
            else:
                self.level_forward(lev, src, dst, bln, g, final)
            if lev + 1 < nl:
                self.black_step(self.BL[lev + 1], dst, dst, g)
            src = dst
        # the last level exactly: black step, dense inverse of the red Schur complement,
        # black back-substitution
        self.black_step(self.BLlast, self.Wlast, self.Wlast, g)
        self.dense(g, final)
        if not final:
            self.backward(r, z, g, slot, then, nbslot)

    def backward(self, r, z, g, slot=2, then=0, nbslot=0):
        """The back-substitution half of :meth:`precondition` (from the last level's
        dense solve up to ``z``; ``g``: a Numba view)."""
        nl = len(self.P)
        self.black_step(self.BLlast, self.Wlast, self.Xlast, g, back=True)
        X = self.Xlast
        for lev in range(nl - 1, 0, -1):
            y = self.W[lev]
            self.level_backward(lev, y, X, g)
            self.black_step(self.BL[lev], y, y, g, back=True)
            X = y
        self.level1_backward(r, X, z, g, slot, then, nbslot)

    # The level kernels (flat arrays, the shapes as arguments), gated by the Numba
    # view ``g``; each also used alone by benchmarks/rrb.py.
    def level_forward(self, lev, y, X, bln, g, final=False):
        """The r2 step of level ``lev + 1``: its quarters ``y`` into the next level's
        ``X`` (``bln``: the next level's black factors; ``final``: r.z summed, see
        :meth:`precondition`)."""
        f = self._flat
        self.k["r2_forward_sum" if final else "r2_forward"][
            _blocks(y.shape[1] * y.shape[2]), TPB, self._st](
            f(self.P[lev]), f(y), f(X), g, self.v(self.sc), f(bln), y.shape[1], y.shape[2],
            X.shape[1], X.shape[2])

    def level1_forward_xr(self, r_old, r, q, X, bln, g, final=False):
        """``r = r_old - alpha q`` fused into the level-1 r2 step (see the kernel)."""
        f = self._flat
        self.k["r2_forward_xr_sum" if final else "r2_forward_xr"][
            _blocks(self.h * self.w), TPB, self._st](
            f(self.P[0]), f(r_old), f(r), f(q), self.v(self.sc), f(X), g, f(bln), self.h,
            self.w, X.shape[1], X.shape[2])

    def black_step(self, BL, y, x, g, back=False):
        """The black step of a level's forward sweep in its quarters ``y`` (``x`` is
        ``y``), or with ``back`` its black back-substitution into ``x``."""
        f = self._flat
        n = y.shape[1] * y.shape[2]
        if back:
            self.k["black_backward"][_blocks(n), TPB, self._st](
                f(BL), f(y), f(x), g, y.shape[1], y.shape[2])
        else:
            self.k["black_forward"][_blocks(n), TPB, self._st](
                f(BL), f(y), g, y.shape[1], y.shape[2])

    def _flat(self, a):
        """Numba view of the C-contiguous array ``a`` flattened (cached as :meth:`v`):
        the r2 back-substitution kernels index flat arrays."""
        got = self._flats.get(id(a))
        if got is None or got[0] is not a:
            got = self._flats[id(a)] = (a, a.reshape(-1))
        return self.v(got[1])

    def level_backward(self, lev, y, X, g):
        """The r2 back-substitution of level ``lev + 1 >= 2`` in place in its quarters
        ``y``, from the next level's solution ``X``; ``g``: a Numba view."""
        f = self._flat
        n = y.shape[1] * y.shape[2]
        self.k["r2_backward"][_blocks(n), TPB, self._st](
            f(self.P[lev]), f(y), f(X), f(y), g, y.shape[1], y.shape[2], X.shape[1],
            X.shape[2])

    def level1_backward(self, r, X, z, g, slot=2, then=0, nbslot=0):
        """The level-1 r2 back-substitution ``z`` from level 2's solution ``X``, ``r . z``
        into ``sc[slot]`` and what follows it (``then``); ``g``: a Numba view."""
        v, f = self.v, self._flat
        n = self.h * self.w
        self.k["r2_backward_dot"][_red_blocks(n, self.wave("r2_backward_dot")), TPB, self._st](
            f(self.P[0]), f(r), f(X), f(z), v(self.sc), slot, g, then, nbslot, v(self.st),
            v(self.hist), v(self.par), v(self.count), self.stat_host, self.h, self.w,
            X.shape[1], X.shape[2],
        )

    def dense(self, g, final=False):
        """``Xlast[0:2] = Minv Wlast[0:2]`` (the last level's red Schur solve), gated by
        the Numba view ``g``; ``final``: see :meth:`precondition`."""
        m = self.Minv.shape[0]
        v = self.v
        name = ("dense_last_fixed" if self.fixed else "dense_last") + ("_sum" if final else "")
        self.k[name][-(-m // DENSE_ROWS), self.dense_tpb, self._st](
            v(self.Minv), v(self.Dlast), v(self.Wlast_flat), v(self.Xlast), g, v(self.sc),
            v(self.st), v(self.hist), v(self.count), self.stat_host,
        )

    def precondition_full(self, b, nx, ny):
        xp = self.xp
        y = xp.ascontiguousarray(to_quarters(xp.asarray(b), xp=xp))
        ng = self.v(self.nogate)
        self.black_step(self.BL[0], y, y, ng)
        r = xp.ascontiguousarray(y[:2])
        z = xp.zeros_like(r)
        self.precondition(r, z, slot=7)
        y[:2] = z
        self.black_step(self.BL[0], y, y, ng, back=True)
        out = from_quarters(y, nx, ny, xp=xp)
        return out if self.sim else out.get()

    def scalar(self, i):
        return float(self.sc[i])

    def _setup(self, warm, rhs, x0):
        """Before the iterations, all on the device: quarters of ``rhs`` (and ``x0``),
        the black elimination (Schur right-hand side ``bS`` in ``full[:2]``), the
        initial residual (``r``, the first of its two buffers) and its preconditioned
        form (in ``p``), the stopping state (in the last kernel of the preconditioner).
        ``rhs``, ``x0``: the solver's buffers or the caller's arrays (``_direct``)."""
        k, v, st = self.k, self.v, self._st
        n = self.h * self.w
        bad = self.flag
        sth = self.stat_host
        # rhs in quarters and its black elimination: ``full[2:4]`` keeps the black rhs
        # for the back-substitution in ``finish``, ``full[:2]`` (warm) the Schur rhs
        r, z = self.rbuf[0], self.vec["z"]
        f = self._flat
        k["split_schur_rhs"][_blocks(n), TPB, st](
            f(self.BL[0]), self._view(rhs), self._view(x0 if warm else rhs), warm,
            f(self.full), f(z if warm else r), f(self.vec["x"]), v(self.st), sth, v(self.sc),
            self.h, self.w,
        )
        # The first preconditioned residual z = M^-1 r goes straight into p: it is the
        # first search direction (the solve's first iteration has no ``update_p``), and
        # nothing reads z itself before the first iteration writes it again.
        p = self.vec["p"]
        if not warm:
            # normb = sqrt(r.z)
            self.precondition(r, p, slot=2, gate=bad, then=THEN_START, nbslot=2)
        else:
            # normb = sqrt(b M^-1 b) (p as scratch)
            fl = self.flat
            self.precondition(z, p, slot=3, gate=bad)
            self.matvec_dot(self.vec["x"], self.vec["q"], slot=4, gate=bad)
            k["sub"][_blocks(fl["r"].size), TPB, st](v(self.bS_flat), v(fl["q"]), v(fl["r"]))
            self.precondition(r, p, slot=2, gate=bad, then=THEN_START, nbslot=3)

    def _finish(self, out):
        """Black back-substitution from the red iterate, in natural order into ``out``
        (the solver's buffer or the caller's array; one kernel)."""
        n = self.h * self.w
        f = self._flat
        self.k["finish"][_blocks(n), TPB, self._st](
            f(self.BL[0]), f(self.full), f(self.vec["x"]), f(self.vec["p"]),
            self.v(self.sc), self._view(out), self.v(self.flag), self.h, self.w,
        )

    def _view(self, a):
        """Numba view of the solver's own array (cached) or of a caller's (not cached:
        the cache would keep it alive)."""
        if self.sim:
            return a
        if a is self.rhs_nat or a is self.x0_nat or a is self.out_nat:
            return self.v(a)
        return cuda.as_cuda_array(a)

    def _direct(self, a):
        """The device address of the caller's array ``a`` when the solve's graphs may
        read or write it in place: a C-contiguous float64 CuPy array of the grid's shape
        whose address an earlier solve has seen (the first time it goes through the
        solver's own buffer, so that arrays used once cost no graph capture), while at
        most ``KEYED_MAX`` addresses have graphs of their own; else None."""
        if a is None or self.sim or not self.use_graph:
            return None
        if a.dtype != np.float64 or a.shape != (self.ny, self.nx) or not a.flags.c_contiguous:
            return None
        ptr = a.data.ptr
        if ptr in self._keyed:
            return ptr
        if ptr in self._seen and len(self._keyed) < KEYED_MAX:
            self._keyed.add(ptr)
            return ptr
        if len(self._seen) >= 64:
            self._seen.clear()
        self._seen.add(ptr)
        return None

    def _iteration(self, parity, first=False, final=False):
        """One CG iteration reading the r buffer ``parity`` and writing the other:
        the last iteration's ``x += alpha p`` and ``p = z + beta p`` (not in the
        ``first``: the setup wrote its z into p), ``q = S p`` (+ p.q); ``r -= alpha q``
        fused into the first preconditioner kernel; ``z = M^-1 r`` (+ r.z), then the
        stopping rule and the scalar roll in its last kernel (``final``: see
        :meth:`precondition`)."""
        k, v, st = self.k, self.v, self._st
        g = self.st
        nf = 2 * self.h * self.w
        if not first:
            fl = self.flat
            k["update_p"][_blocks(nf), TPB, st](
                v(fl["p"]), v(fl["z"]), v(fl["x"]), v(self.sc), v(g)
            )
        q, z, p = self.vec["q"], self.vec["z"], self.vec["p"]
        self.matvec_dot(p, q, slot=1, gate=g)
        self.precondition(self.rbuf[1 - parity], z, slot=2, gate=g,
                          xr=(self.rbuf[parity], q), then=THEN_CHECK, final=final)

    def _chunk(self, parity, nit, first=False, final=False):
        """``nit`` iterations, the first reading the buffers ``parity`` (and, ``first``,
        the solve's first iteration); ``final``: the last is predicted to end the solve
        (its back-substitution left to :meth:`_resume` if it does not)."""
        for i in range(nit):
            self._iteration((parity + i) % 2, first and i == 0, final and i == nit - 1)

    def _resume(self, parity):
        """After a ``final`` iteration that did not end the solve, what it left out: its
        residual ``r`` (into the buffer ``parity``) and its back-substitution, ``z``
        from the forward sweep's levels (the r.z into the unused ``sc[7]``: the
        stopping rule already ran on the forward sum)."""
        v, g, r = self.v, self.v(self.st), self.rbuf[parity]
        nf = 2 * self.h * self.w
        self.k["residual_update"][_blocks(nf), TPB, self._st](
            v(self.rbuf[1 - parity].reshape(nf)), v(self.flat["q"]), v(self.sc),
            v(r.reshape(nf)), g)
        self.backward(r, self.vec["z"], g, slot=7)

    def _state(self):
        """The stopping state ``[st (8), hist]`` after the last chunk launched (its host
        mirror), once the stream of the work queued last (``_read_on``: the graphs'
        blocking stream or the legacy default stream, each of which waits for the
        other's earlier work) is done."""
        if self.sim:
            return self.stat_host
        import cupy

        if self._read_on == 0:
            cupy.cuda.Stream.null.synchronize()
        else:
            self._graph_stream().synchronize()
        return self.stat_host

    def _capture(self, fn):
        """Capture the launches of ``fn`` into a CUDA graph on the solver's stream
        (:func:`forestpy.cuda_device.capture_graph`; the routines launch on ``_st``);
        ``None`` on any failure (then plain launches, and why is kept in
        ``_graph_error``)."""

        def launch(st):
            self._st = st
            try:
                fn()
            finally:
                self._st = 0

        try:
            graph = capture_graph(launch, self._graph_stream())[0]
        except Exception as exc:  # noqa: BLE001 - any capture failure: plain launches
            self._graph_error = repr(exc)
            self.use_graph = False
            return None
        if self.pdl:
            try:
                return programmatic_graph(graph)
            except Exception as exc:  # noqa: BLE001 - no PDL here: the plain graph
                self._pdl_error = repr(exc)
                self.pdl = False
        return graph

    def _graph_stream(self):
        # One blocking stream for every graph: graphs run in launch order, and the
        # host's copies and reads on the legacy default stream wait for them.
        if self._stream is None:
            import cupy

            self._stream = cupy.cuda.Stream(non_blocking=False)
        return self._stream

    def _replay(self, key, fn, compiled=False):
        """Run ``fn`` (kernel launches on the solver's own arrays, or caller's arrays
        whose addresses are part of ``key``): plainly the first time (compilation; not
        when ``compiled``), then as a CUDA graph captured once and replayed.  Returns
        whether a graph ran."""
        self._read_on = 0  # plain launches: the legacy default stream
        if self.sim or not self.use_graph:
            fn()
            return False
        g = self._graphs.get(key)
        if g is None:
            if key not in self._graphs and not compiled:
                self._graphs[key] = None  # warm-up done
                fn()
                return False
            g = self._graphs[key] = self._capture(fn)
            if g is None:
                fn()
                return False
        stream = self._graph_stream()
        g.launch(stream)
        self._read_on = stream.ptr
        return True

    # ------------------------------------------------------------------ PCG
    def solve(self, rhs, x0, tol, maxiter, nx, ny, out=None, t0=None):
        t0 = time.perf_counter() if t0 is None else t0  # the caller's start, if given
        xp = self.xp
        # The caller's arrays are read / written in place by graphs of their own once
        # their address comes back (``_direct``); otherwise copied through the solver's
        # buffers (a device copy each way).
        rp, x0p, op = self._direct(rhs), self._direct(x0), self._direct(out)
        if rp is None:
            self.rhs_nat[...] = rhs
            rhs = self.rhs_nat
        if x0 is not None and x0p is None:
            self.x0_nat[...] = x0
            x0 = self.x0_nat
        dst = out if op is not None else self.out_nat
        if len(self.hist) < maxiter:
            self._stat(maxiter)
            self._graphs.clear()  # captured with the old state array
        if self._par != (tol, maxiter):  # a host-to-device copy only when they change
            self.par[...] = xp.asarray(np.array([tol, maxiter], dtype=np.float64))
            self._par = (tol, maxiter)
        warm = x0 is not None
        # chunks of ``check_every`` iterations with one host read of the state after each
        # the first chunk as long as the last solve took (no gated no-op iterations,
        # each of which still pays its launches, when the solves of a run are alike)
        kk = max(1, int(self.check_every))
        nit = min(kk, self._last_its) if self._last_its > 0 else kk
        ends = 0 < self._last_its <= kk  # this chunk is predicted to end the solve
        done = 0  # iterations launched (all of them ran: the solve had not stopped)

        def result():
            # the array the caller gets (``dst`` holds x once ``finish`` has run)
            return dst.copy() if out is None else out

        def finish():
            # the black back-substitution into ``dst``
            nonlocal graph
            graph |= self._replay(("finish", op), lambda: self._finish(dst),
                                  compiled=("finish", None) in self._graphs)
            return result()

        # A solve predicted to end after its first chunk, once each piece has been
        # captured on its own: setup, chunk and finish as one graph (one launch, and
        # programmatic edges across what were the graphs' boundaries); in plain
        # launches the same three in a row.
        captured = self._graphs.get(("chunk", nit, 0, True, True)) is not None
        queued = self.one_graph and ends and (captured or self.sim or not self.use_graph)
        if queued:  # the first chunk and the finish are queued with the setup
            graph = self._replay(
                ("solve", warm, rp, x0p, nit, op),
                lambda: (self._setup(warm, rhs, x0), self._chunk(0, nit, True, True),
                         self._finish(dst)),
                compiled=True,
            )
            done = nit
            x = result()
        else:
            graph = self._replay(("setup", warm, rp, x0p), lambda: self._setup(warm, rhs, x0),
                                 compiled=("setup", warm, None, None) in self._graphs)
        while True:
            if not queued:
                key = ("chunk", nit, done % 2, done == 0, ends)
                graph |= self._replay(
                    key, lambda a=done % 2, m=nit, f=done == 0, e=ends: self._chunk(a, m, f, e))
                done += nit
                if ends:
                    # Speculative: the finish (it changes nothing the iterations use)
                    # and the copy out queue up behind the chunk, so that the host's
                    # read of the stopping state does not leave the device idle.
                    x = finish()
            queued = False
            stv = self._state()
            if stv[7] != 0.0:
                self.flag[...] = 0.0  # for the next solve (the device is idle here)
                stv[7] = 0.0
                what = "rhs" if x0 is None else "rhs or x0"
                raise ValueError(f"RRB solve: {what} has non-finite values (NaN or inf)")
            if stv[0] != 0.0:
                break
            if ends:
                # the chunk's last iteration skipped its back-substitution (``final``)
                graph |= self._replay(("resume", done % 2),
                                      lambda a=done % 2: self._resume(a))
            nit, ends = _next_chunk(stv[8 : 8 + int(stv[1])], tol, kk)
        if not ends:
            x = finish()
        copy_out = out is not None and dst is not out
        if copy_out:
            out[...] = dst  # only now: an input error above leaves ``out`` as it was
        if not self.sim and (copy_out or not ends):
            # work queued after the last read of the state (which waited for all before
            # it): the solve returns when x is there
            cuda.synchronize()
        it = int(stv[1])
        self._last_its = it
        return x, {
            "iterations": it,
            "converged": bool(stv[5] != 0.0),
            "residual": float(stv[6]),
            "history": [float(h) for h in stv[8 : 8 + it]],
            "time_s": time.perf_counter() - t0,
            "cuda_graph": graph,
            "pdl": bool(graph and self.pdl),
        }
