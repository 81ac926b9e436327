"""The wave-propagation step on the GPU: one thread block per patch, or per row tile
of a patch for forests too small to fill the device (Numba-CUDA).

Same algorithm and conventions as the CPU kernel (:mod:`.step_kernel`, Clawpack 4.x
``step2``/``flux2``), reorganised for a block of threads that share one patch:

* The patch is processed in **row tiles** of ``R`` interior rows, so that the per-face
  temporaries of a tile fit in 48 KB of shared memory.  A tile needs the x-faces of
  rows ``j0-1 .. j0+R`` (the transverse terms of the rows just outside reach the
  tile's cells) and the y-faces ``j0-1 .. j0+R+1`` (the limiter looks one face
  further).  Whole patches of ``mx = 16`` take two tiles.
* Each pass (x, then y) runs in phases separated by ``syncthreads``, **one face per
  thread**: (a) normal Riemann problem, waves and speeds to shared memory; (b) wave
  limiter from the neighbouring faces' waves, Courant number, second-order correction;
  (c) the normal fluctuation fluxes and the transverse splittings (``rpt2`` of the
  left- and right-going fluctuations) to the face's own shared slot; (d) **one cell
  per thread** gathers the contributions of its faces and of the neighbouring faces'
  transverse terms.  Every shared value has exactly one writer per phase, so the
  transverse corrections are race-free without atomics, and the sum order is fixed
  (runs are reproducible).
* The two passes are one device function (``make_pass``) with the direction a
  compile-time constant; it is force-inlined, so each pass compiles to the code of a
  pass written out for its direction.
* The cell's increment and the four edge fluxes of the time sync stay in registers
  across both passes; the interior of ``qnew`` is written once.

Physics comes from the pointwise ``rpn2``/``rpt2`` of the Riemann solver, compiled as
CUDA device functions from the same Python source as on the CPU
(:func:`forestpy.cuda_device.cuda_device`).  Kernels are specialised on the patch
shape, the solver's sizes and the options (compile-time constants), and cached per
process.  Field arrays may be float64 or float32 (storage); arithmetic is float64, or
with ``precision`` (:mod:`forestpy.precision`):

* ``"float32"``: every operation in FP32 (the solver's and limiter's sources compiled
  with FP32 literals, the parameters converted once per thread, the shared scratch in
  FP32: half the bytes, so taller row tiles);
* ``"mixed"``: the normal solve, the fluctuations and the update in FP64 (so the
  conserved totals change by FP64 round-off only), the limiter, the second-order
  correction and the transverse splittings in FP32.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64

from forestpy.cuda_device import cuda_device, fast_kernel
from forestpy.precision import check_precision, in_precision
from forestpy.step_params import device_scalar, dt_argument

from .limiters import limiter_apply

__all__ = [
    "plan_tiles",
    "register_cap",
    "tiles_per_patch",
    "make_gpu_step_kernel",
    "make_gpu_fluctuation_kernel",
    "make_gpu_time_sync",
    "GPUTimeSync",
]

SHARED_BYTES = 46 * 1024
MAX_THREADS = 512
_KERNELS: dict = {}


def plan_tiles(mx: int, my: int, meqn: int, mwaves: int, transverse: bool = True,
               shared_bytes: int = SHARED_BYTES, max_threads: int = MAX_THREADS,
               rows: int | None = None, word: int = 8):
    """Rows per tile ``R``, threads per block and shared slots for a patch shape.

    Chooses the ``R`` that needs the fewest thread-slots per patch (threads per block
    times tiles) while the per-face scratch (``word`` bytes per value) fits
    ``shared_bytes`` and one face or cell per thread fits ``max_threads``; ``rows``
    forces ``R`` (if it fits).  Returns ``(R, nthreads, nslot, slot)``.
    """
    slot = max(meqn * mwaves + mwaves, (6 if transverse else 2) * meqn)
    best = None
    for R in range(1, my + 1):
        nfx = (R + 2) * (mx + 3)
        nfy = (R + 3) * (mx + 2)
        need = max(nfx, nfy, R * mx)
        nthreads = -(-need // 32) * 32
        nslot = max(nfx, nfy)
        if nthreads > max_threads or nslot * slot * word > shared_bytes:
            break
        cost = nthreads * (-(-my // R))
        if rows is not None:
            cost = abs(R - rows)
        if best is None or cost < best[0]:
            best = (cost, R, nthreads, nslot)
    if best is None:
        raise ValueError(
            f"patch {mx}x{my} with {meqn} equations and {mwaves} waves does not fit one "
            f"tile row in {shared_bytes} bytes of shared memory"
        )
    return best[1], best[2], best[3], slot


def tiles_per_patch(riemann, mx: int, my: int, *, transverse_waves: int = 2,
                    shared_bytes: int = SHARED_BYTES, rows_per_tile: int | None = None,
                    precision: str = "float64") -> int:
    """Row tiles of the step kernel for this patch shape (blocks per patch with
    ``block_per_tile``)."""
    R = plan_tiles(mx, my, int(riemann.num_eqn), int(riemann.num_waves), transverse_waves > 0,
                   shared_bytes, rows=rows_per_tile, word=_word(precision))[0]
    return -(-my // R)


def make_gpu_step_kernel(riemann, mx: int, my: int, mbc: int, *, order: int = 2,
                         transverse_waves: int = 2, capacity_index: int = -1,
                         max_registers: int | None = None, shared_bytes: int = SHARED_BYTES,
                         rows_per_tile: int | None = None, block_per_tile: bool = False,
                         precision: str = "float64"):
    """Compiled CUDA step for one Riemann solver, patch shape and option set.

    Returns ``(kernel, nthreads)``; launch with one block per patch to step::

        kernel[len(rows), nthreads](rows, q, aux, qnew, dx, dy, dt, params,
                                    limiter_codes, cfl_out, edge_out)

    with the array conventions of :func:`.step_kernel.make_step_kernel` (``cfl_out``
    receives each patch's Courant number, ``edge_out`` the edge fluctuation fluxes).
    ``rows`` (int64, on the device) lists the patches to step, as indices into every
    per-patch array; the other patches' entries of ``qnew``, ``cfl_out`` and
    ``edge_out`` are left as they are.  Blocks start roughly in list order, so patches
    listed first start first (the distributed step lists its late patches first).
    ``shared_bytes`` bounds the shared memory per block (smaller values give more,
    thinner row tiles; tests use it to exercise tiling on small patches).

    ``block_per_tile``: one block per row tile of a patch instead of one per patch, for
    forests too small to fill the device; launch ``len(rows) * tiles`` blocks
    (``tiles`` from :func:`tiles_per_patch`) with two more arguments::

        kernel[len(rows) * tiles, nthreads](..., cfl_out, edge_out, cfl_tiles, tickets)

    ``cfl_tiles`` (float64, ``(npatch, tiles)``) receives each tile's Courant number and
    ``tickets`` (int32, ``(npatch,)``, zero before the first launch, zero again after
    each) counts the finished tiles of a patch: the last one writes ``cfl_out``.  The
    same arithmetic per cell as one block per patch, so the same results.

    ``precision``: ``"float64"`` (default), ``"float32"`` or ``"mixed"`` (see the module
    docstring); the arrays and the launch are the same in every mode.
    """
    precision = check_precision(precision)
    if mx < 2 or my < 2:
        raise ValueError("the GPU kernel needs mx, my >= 2")
    if mbc < 2:
        raise ValueError("mbc must be >= 2")
    if order not in (1, 2) or transverse_waves not in (0, 1, 2):
        raise ValueError("order must be 1 or 2 and transverse_waves 0, 1 or 2")
    if transverse_waves and riemann.rpt2 is None:
        raise ValueError(f"Riemann solver {riemann.name!r} has no rpt2; use transverse_waves=0")
    key = (riemann.rpn2, riemann.rpt2 if transverse_waves else None, bool(riemann.fwave),
           int(riemann.num_eqn), int(riemann.num_waves), int(riemann.num_aux), mx, my, mbc,
           order, transverse_waves, max(capacity_index, -1), max_registers, shared_bytes,
           rows_per_tile, bool(block_per_tile), precision)
    hit = _KERNELS.get(key)
    if hit is None:
        hit = _build(riemann, mx, my, mbc, order, transverse_waves, max(capacity_index, -1),
                     max_registers, shared_bytes, rows_per_tile, bool(block_per_tile),
                     precision)
        _KERNELS[key] = hit
    return hit


def register_cap(nthreads: int, precision: str = "float64") -> int:
    """Registers per thread the step kernel of ``nthreads`` threads is compiled with."""
    # 128 registers fit two blocks of NT threads on a multiprocessor, where the
    # compiler's own choice fits one (docs/performance.md, register cap)
    cap = min(128, 65536 // nthreads // 8 * 8)
    two_blocks = 65536 // (2 * nthreads) // 8 * 8
    if precision == "float32" and 80 <= two_blocks < cap:
        # FP32 at mx 16 (one tile of 352 threads): the compiler's 90 registers fit one
        # block per multiprocessor, a cap of 88 two (3.4 -> 5.4 G cell updates/s on an
        # H100 at a cap of 80); below 80 the spills cost more than the blocks give
        # (mx 32: 4.7 G/s uncapped, 2.9 at 64)
        cap = two_blocks
    return cap


def _word(precision: str) -> int:
    """Bytes per value of the step kernel's shared scratch."""
    return 4 if precision == "float32" else 8


def _build(riemann, MX, MY, MBC, ORDER, TRANS, CAPA, max_registers, shared_bytes, rows,
           TILED, precision="float64"):
    MEQN = int(riemann.num_eqn)
    MWAVES = int(riemann.num_waves)
    MAUX = int(riemann.num_aux)
    MAUXL = max(MAUX, 1)
    FWAVE = bool(riemann.fwave)
    R, NT, NSLOT, SLOT = plan_tiles(MX, MY, MEQN, MWAVES, TRANS > 0, shared_bytes,
                                    rows=rows, word=_word(precision))
    # RN: the normal solve, the fluxes, the update and the shared scratch; RT: the
    # limiter, the second-order correction and the transverse splittings
    RN = float32 if precision == "float32" else float64
    RT = float64 if precision == "float64" else float32
    nRN = np.float32 if precision == "float32" else np.float64
    nRT = np.float64 if precision == "float64" else np.float32
    ZERO_N, HALF_N, ONE_N = nRN(0.0), nRN(0.5), nRN(1.0)
    ZERO_T, ONE_T = nRT(0.0), nRT(1.0)
    NPAR = max(len(riemann.params_array()), 1)
    NTILES = -(-MY // R)
    SOFF = MEQN * MWAVES  # offset of the speeds in a slot
    CORR = TRANS == 2 and ORDER == 2
    WX = MX + 3  # x-faces per row of a tile
    WY = MX + 2  # columns of y-faces
    MAXM = max(MX, MY)
    rpn2 = in_precision(riemann.rpn2, nRN, "cuda")
    rpt2 = in_precision(riemann.rpt2, nRT, "cuda") if TRANS else None
    limiter = in_precision(limiter_apply, nRT, "cuda")
    as_n = _converter(RN, precision == "float32", NPAR)  # the parameters in RN
    as_t = _converter(RT, precision != "float64", NPAR)  # in RT
    qt = _converter(RT, precision == "mixed", MEQN)  # states, fluctuations in RT
    if max_registers is None:
        max_registers = register_cap(NT, precision)
    from forestpy.backend import cuda_simulator_enabled

    opts = {} if cuda_simulator_enabled() else {"max_registers": max_registers}

    def make_pass(IXY):
        """The pass in direction ``IXY`` (1: x, 2: y) over one row tile.

        The direction and the index steps it implies are compile-time constants of the
        device function, as the options are, and the function is force-inlined: each
        of the two passes compiles to the code of a pass written out for its direction.
        The faces of a tile form a grid of ``(rt + EXTRA)`` lines of ``W`` faces
        (thread ``t`` has face ``t``); the face's cells are ``(j - DJ, i - DI)`` (left
        or below) and ``(j, i)``; ``FN`` and ``FT`` step to the next face of the grid
        along the normal and along the face.
        """
        if IXY == 1:  # rows j0-1 .. j0+rt, faces MBC-1 .. MBC+MX+1 of each
            W, EXTRA, FN, FT, DJ, DI = WX, 2, 1, WX, 0, 1
        else:  # columns MBC-1 .. MBC+MX, faces j0-1 .. j0+rt+1 of each
            W, EXTRA, FN, FT, DJ, DI = WY, 3, WY, 1, 1, 0

        @cuda.jit(device=True, inline=True)
        def transverse(imp, jc, ic, c, asdq, p, t, aux, params, S, ql, qr, a1, a2, a3, bm,
                       bp, abuf):
            # rpt2 of the fluctuation asdq going into cell (jc, ic), with the aux of
            # that cell and of its two neighbours along the face; c bm, c bp to the
            # face's slots 2 imp and 2 imp + 1
            for a in range(MAUX):
                a1[a] = aux[p, a, jc - DI, ic - DJ]
                a2[a] = aux[p, a, jc, ic]
                a3[a] = aux[p, a, jc + DI, ic + DJ]
            rpt2(IXY, imp, ql, qr, a1, a2, a3, params, qt(asdq, abuf), bm, bp)
            for m in range(MEQN):
                S[2 * imp * MEQN + m, t] = c * bm[m]
                S[(2 * imp + 1) * MEQN + m, t] = c * bp[m]

        @cuda.jit(device=True, inline=True)
        def face_pass(p, t, j0, rt, q, aux, qnew, edge_out, params, lim, dtdn, dtdt, S,
                      own, jr, ci, cj, kc, cfl, regs, fxl, fxr, gyl, gyu, params_t):
            ql, qr, al, ar, a1, a2, a3, wave, s, amdq, apdq, cq, bm, bp, qlt, qrt, abuf = regs
            act = t < (rt + EXTRA) * W
            j = j0 - 1 + t // W
            i = MBC - 1 + t % W
            jl = j - DJ
            il = i - DI
            if IXY == 1:
                kn = t % W  # the face's place along the normal, 1 .. nlast in the patch
                nlast = MX + 1
                tile_line = j >= j0 and j < j0 + rt  # in a row of the tile's cells
            else:
                kn = t // W
                nlast = rt + 1
                tile_line = i >= MBC and i < MBC + MX
            # (a) normal Riemann problem; waves and speeds to the face's shared slot
            if act:
                for m in range(MEQN):
                    ql[m] = q[p, m, jl, il]
                    qr[m] = q[p, m, j, i]
                for a in range(MAUX):
                    al[a] = aux[p, a, jl, il]
                    ar[a] = aux[p, a, j, i]
                rpn2(IXY, ql, qr, al, ar, params, wave, s, amdq, apdq)
                for m in range(MEQN):
                    for w in range(MWAVES):
                        S[m * MWAVES + w, t] = wave[m, w]
                for w in range(MWAVES):
                    S[SOFF + w, t] = s[w]
            cuda.syncthreads()
            # (b) Courant number; limited second-order correction from the neighbours
            inb = act and kn >= 1 and kn <= nlast
            dl = dtdn
            dr = dtdn
            if inb:
                if CAPA >= 0:  # as the CPU kernel: dt/dx times the inverse capacity
                    dl = dtdn * (ONE_N / RN(aux[p, CAPA, jl, il]))
                    dr = dtdn * (ONE_N / RN(aux[p, CAPA, j, i]))
                if tile_line:
                    for w in range(MWAVES):
                        sp = S[SOFF + w, t]
                        c = max(dr * sp, -dl * sp)
                        if c > cfl:
                            cfl = c
                for m in range(MEQN):
                    cq[m] = ZERO_T
                if ORDER == 2:
                    dtdxave = RT(HALF_N * (dl + dr))
                    for w in range(MWAVES):
                        wn = ZERO_T
                        for m in range(MEQN):
                            wt = RT(S[m * MWAVES + w, t])
                            wn += wt * wt
                        if wn == 0.0:
                            continue
                        sp = RT(S[SOFF + w, t])
                        tu = t - FN if sp > 0.0 else t + FN
                        dot = ZERO_T
                        for m in range(MEQN):
                            dot += RT(S[m * MWAVES + w, tu]) * RT(S[m * MWAVES + w, t])
                        phi = limiter(lim[w], dot / wn)
                        asp = abs(sp)
                        if FWAVE:
                            c = phi * math.copysign(ONE_T, sp) * (ONE_T - asp * dtdxave)
                        else:
                            c = phi * asp * (ONE_T - asp * dtdxave)
                        for m in range(MEQN):
                            cq[m] += c * RT(S[m * MWAVES + w, t])
            cuda.syncthreads()  # neighbours' waves read: slots may be overwritten
            # (c) fluctuation fluxes and transverse splittings to the face's slot
            if inb:
                for m in range(MEQN):
                    S[m, t] = amdq[m] + HALF_N * cq[m]
                    S[MEQN + m, t] = HALF_N * cq[m] - apdq[m]
                if TRANS:
                    if CORR:
                        for m in range(MEQN):
                            amdq[m] += cq[m]
                            apdq[m] -= cq[m]
                    # the left-going part enters the left / lower cell, slots 2 and 3;
                    # the right-going part the right / upper cell, slots 4 and 5
                    qlr = qt(ql, qlt)
                    qrr = qt(qr, qrt)
                    transverse(1, jl, il, -HALF_N * dl, amdq, p, t, aux, params_t, S, qlr,
                               qrr, a1, a2, a3, bm, bp, abuf)
                    transverse(2, j, i, -HALF_N * dr, apdq, p, t, aux, params_t, S, qlr,
                               qrr, a1, a2, a3, bm, bp, abuf)
            cuda.syncthreads()
            # (d) the cell gathers its two faces and their neighbours' transverse terms,
            # summed in the CPU kernel's order (run_chunk: each face's normal flux, then
            # the other sweep's transverse terms; x faces normal first, y edges last) so
            # that both backends round alike and agree bit for bit
            if own:
                f0 = (jr + 1) * W + (ci - MBC + 1)  # the cell's left / lower face
                f1 = f0 + FN
                for m in range(MEQN):
                    lo_face = S[MEQN + m, f0]  # plus flux of the left / lower face
                    hi_face = S[m, f1]  # minus flux of the right / upper face
                    tlo = ZERO_N
                    thi = ZERO_N
                    thim = ZERO_N
                    tlop = ZERO_N
                    if TRANS:
                        tlo = S[4 * MEQN + m, f0] + S[2 * MEQN + m, f1]
                        thi = S[5 * MEQN + m, f0] + S[3 * MEQN + m, f1]
                        thim = S[5 * MEQN + m, f0 - FT] + S[3 * MEQN + m, f1 - FT]
                        tlop = S[4 * MEQN + m, f0 + FT] + S[2 * MEQN + m, f1 + FT]
                    if IXY == 1:  # kept in registers for the y pass
                        fxl[m] = lo_face
                        fxr[m] = hi_face
                        gyl[m] = tlo + thim
                        gyu[m] = thi + tlop
                    else:  # the cell's update and edge fluxes, both passes summed
                        fm_r = (fxr[m] + thi) + tlop
                        fp_l = (fxl[m] + thim) + tlo
                        gm_u = gyu[m] + hi_face
                        gp_l = gyl[m] + lo_face
                        qnew[p, m, cj, ci] = (RN(q[p, m, cj, ci]) - (dtdt * kc) * (fm_r - fp_l)
                                              - (dtdn * kc) * (gm_u - gp_l))
                        if ci == MBC:
                            edge_out[p, 0, m, cj - MBC] = fp_l
                        if ci == MBC + MX - 1:
                            edge_out[p, 1, m, cj - MBC] = fm_r
                        if cj == MBC:
                            edge_out[p, 2, m, ci - MBC] = gp_l
                        if cj == MBC + MY - 1:
                            edge_out[p, 3, m, ci - MBC] = gm_u
            cuda.syncthreads()
            return cfl

        return face_pass

    x_pass = make_pass(1)
    y_pass = make_pass(2)

    @cuda.jit(device=True, inline=True)
    def run_tiles(p, first, last, q, aux, qnew, dx, dy, dt, params, lim, edge_out):
        """Row tiles ``first .. last - 1`` of patch ``p`` by this block; returns the
        block's largest Courant number (every thread)."""
        t = cuda.threadIdx.x
        S = cuda.shared.array((SLOT, NSLOT), RN)
        red = cuda.shared.array(NT, RN)
        regs = (cuda.local.array(MEQN, RN),  # ql
                cuda.local.array(MEQN, RN),  # qr
                cuda.local.array(MAUXL, RN),  # auxl
                cuda.local.array(MAUXL, RN),  # auxr
                cuda.local.array(MAUXL, RT),  # transverse aux1, aux2, aux3
                cuda.local.array(MAUXL, RT),
                cuda.local.array(MAUXL, RT),
                cuda.local.array((MEQN, MWAVES), RN),  # wave
                cuda.local.array(MWAVES, RN),  # s
                cuda.local.array(MEQN, RN),  # amdq
                cuda.local.array(MEQN, RN),  # apdq
                cuda.local.array(MEQN, RT),  # second-order correction
                cuda.local.array(MEQN, RT),  # bmasdq
                cuda.local.array(MEQN, RT),  # bpasdq
                cuda.local.array(MEQN, RT),  # ql, qr, asdq in RT (mixed precision)
                cuda.local.array(MEQN, RT),
                cuda.local.array(MEQN, RT))
        fxl = cuda.local.array(MEQN, RN)  # x pass: normal fluxes of the x faces,
        fxr = cuda.local.array(MEQN, RN)
        gyl = cuda.local.array(MEQN, RN)  # and transverse parts of the y edges
        gyu = cuda.local.array(MEQN, RN)
        params_t = as_t(params, cuda.local.array(NPAR, RT))
        params = as_n(params, cuda.local.array(NPAR, RN))
        dtdx = RN(dt / dx[p])
        dtdy = RN(dt / dy[p])
        cfl = ZERO_N
        if first == 0:
            # unused edge entries (mx != my) are zero, as on the CPU
            for e in range(t, 4 * MEQN * MAXM, NT):
                side = e // (MEQN * MAXM)
                k = e % MAXM
                if k >= (MY if side < 2 else MX):
                    edge_out[p, side, (e // MAXM) % MEQN, k] = 0.0

        for tile in range(first, last):
            j0 = MBC + tile * R
            rt = min(R, MY - tile * R)
            # cell owned by this thread in phase (d) of both passes
            own = t < rt * MX
            jr = t // MX
            ci = MBC + t % MX
            cj = j0 + jr
            kc = ONE_N
            if own and CAPA >= 0:
                kc = ONE_N / RN(aux[p, CAPA, cj, ci])
            cfl = x_pass(p, t, j0, rt, q, aux, qnew, edge_out, params, lim, dtdx, dtdy, S,
                         own, jr, ci, cj, kc, cfl, regs, fxl, fxr, gyl, gyu, params_t)
            cfl = y_pass(p, t, j0, rt, q, aux, qnew, edge_out, params, lim, dtdy, dtdx, S,
                         own, jr, ci, cj, kc, cfl, regs, fxl, fxr, gyl, gyu, params_t)

        # block maximum of the Courant number
        red[t] = cfl
        cuda.syncthreads()
        stride = 1
        while stride < NT:
            if t % (2 * stride) == 0 and t + stride < NT:
                if red[t + stride] > red[t]:
                    red[t] = red[t + stride]
            cuda.syncthreads()
            stride *= 2
        return red[0]

    if not TILED:

        @cuda.jit(**opts)
        def step(rows, q, aux, qnew, dx, dy, dtv, params, lim, cfl_out, edge_out):
            dt = device_scalar(dtv)
            p = rows[cuda.blockIdx.x]
            c = run_tiles(p, 0, NTILES, q, aux, qnew, dx, dy, dt, params, lim, edge_out)
            if cuda.threadIdx.x == 0:
                cfl_out[p] = c

    else:

        @cuda.jit(**opts)
        def step(rows, q, aux, qnew, dx, dy, dtv, params, lim, cfl_out, edge_out, cfl_tiles,
                 tickets):
            dt = device_scalar(dtv)
            b = cuda.blockIdx.x
            p = rows[b // NTILES]
            tile = b % NTILES
            c = run_tiles(p, tile, tile + 1, q, aux, qnew, dx, dy, dt, params, lim, edge_out)
            if cuda.threadIdx.x == 0:
                # the patch's Courant number from its tiles' by the last of its blocks
                # (a ticket per patch, back to 0 for the next launch), in tile order
                cfl_tiles[p, tile] = c
                cuda.threadfence()
                if cuda.atomic.add(tickets, p, 1) == NTILES - 1:
                    m = cfl_tiles[p, 0]
                    for k in range(1, NTILES):
                        if cfl_tiles[p, k] > m:
                            m = cfl_tiles[p, k]
                    cfl_out[p] = m
                    tickets[p] = 0

    return fast_kernel(step), NT


def _converter(real, convert: bool, n: int):
    """Device function ``(src, buf) -> values``: ``src`` itself when ``convert`` is
    false (no copy: the FP64 kernel is unchanged), else ``buf`` holding its first ``n``
    entries as ``real``."""
    if not convert:
        @cuda.jit(device=True, inline=True)
        def same(src, buf):
            return src

        return same

    @cuda.jit(device=True, inline=True)
    def converted(src, buf):
        for k in range(n):
            buf[k] = real(src[k])
        return buf

    return converted


def _sizes(riemann):
    """``(rpn2, num_eqn, num_waves, num_aux)``: what a kernel around the normal solve
    alone is specialised on (its cache key)."""
    return (riemann.rpn2, int(riemann.num_eqn), int(riemann.num_waves),
            int(riemann.num_aux))


def make_gpu_fluctuation_kernel(riemann):
    """CUDA version of :func:`.fluctuations.make_fluctuation_kernel`:
    ``fluct(ixy, ql, qr, auxl, auxr, params, out)`` on device arrays."""
    key = ("fluct", *_sizes(riemann))
    hit = _KERNELS.get(key)
    if hit is not None:
        return hit
    _, MEQN, MWAVES, MAUX = key[1:]
    MAUXL = max(MAUX, 1)
    rpn2 = cuda_device(riemann.rpn2)

    @cuda.jit
    def kernel(ixy, ql, qr, auxl, auxr, params, out):
        k = cuda.grid(1)
        if k >= ql.shape[0]:
            return
        a = cuda.local.array(MEQN, float64)
        b = cuda.local.array(MEQN, float64)
        xa = cuda.local.array(MAUXL, float64)
        xb = cuda.local.array(MAUXL, float64)
        wave = cuda.local.array((MEQN, MWAVES), float64)
        s = cuda.local.array(MWAVES, float64)
        amdq = cuda.local.array(MEQN, float64)
        apdq = cuda.local.array(MEQN, float64)
        for m in range(MEQN):
            a[m] = ql[k, m]
            b[m] = qr[k, m]
        for j in range(MAUX):
            xa[j] = auxl[k, j]
            xb[j] = auxr[k, j]
        rpn2(ixy, a, b, xa, xb, params, wave, s, amdq, apdq)
        for m in range(MEQN):
            out[k, m] = amdq[m] + apdq[m]

    kernel = fast_kernel(kernel)

    def fluct(ixy, ql, qr, auxl, auxr, params, out):
        n = ql.shape[0]
        if n:
            from forestpy.cuda_device import launch_kernel, launch_stream

            stream = launch_stream()
            launch_kernel(kernel, (n + 127) // 128, 128, stream, ixy, ql, qr, auxl, auxr, params,
                          out)

    _KERNELS[key] = fluct
    return fluct


class GPUTimeSync:
    """The coarse-fine fixes of :mod:`forestpy.patches.time_sync` on the GPU, each one
    launch with one thread per coarse edge cell (a pair of plan entries) that gathers
    its states, solves the extra Riemann problems with the two fine cells beside it and
    combines them in the order of the array version.  Plans on the device
    (:meth:`TimeSyncPlan.to`); ``params`` the solver's device parameters.

    ``apply`` is the fix of a step that all levels take together
    (:func:`~forestpy.patches.time_sync.apply_time_sync`); ``add_fine_terms``,
    ``start_coarse_sums`` and ``correct`` the three pieces of the subcycled fix
    (:func:`~forestpy.patches.time_sync.fine_face_terms` summed over the fine
    substeps, :func:`~forestpy.patches.time_sync.coarse_face_fluxes` of the coarse
    step, :func:`~forestpy.patches.time_sync.correct_coarse`).  A coarse cell in both an
    x-normal and a y-normal pair (a patch corner) is corrected by one thread, x first
    (:func:`~forestpy.patches.time_sync.corner_partners`), so one launch gives the
    values of the two launches, x then y, of the array version.
    """

    def __init__(self, apply_kernel, fine_kernel, coarse_kernel, correct_kernel):
        self._apply = apply_kernel
        self._fine = fine_kernel
        self._coarse = coarse_kernel
        self._correct = correct_kernel

    @staticmethod
    def _grid(n):
        return (n + 127) // 128, 128

    def apply(self, plan, q_old, q_new, aux, edge, dt, params, capacity_index):
        """``q_new``'s coarse edge cells corrected for a step ``dt`` of every level."""
        from forestpy.cuda_device import launch_kernel, launch_stream
        from forestpy.patches.time_sync import corner_partners

        npairs = len(plan) // 2
        if npairs:
            partner, shared = corner_partners(plan, _xp(q_new))
            stream = launch_stream()
            launch_kernel(self._apply, *self._grid(npairs), stream, npairs, plan.nx // 2, partner,
                          shared, plan.coarse, plan.fine, plan.coarse_edge, plan.fine_edge,
                          plan.sign, plan.width, q_old, q_new, aux, edge, dt_argument(dt), params,
                          int(capacity_index))

    def add_fine_terms(self, plan, q_coarse, q_fine, aux, edge, dt, params, fine_sum):
        """``fine_sum += dt * fine_face_terms(plan, q_coarse, q_fine, aux, edge, ...)``."""
        from forestpy.cuda_device import launch_kernel, launch_stream

        npairs = len(plan) // 2
        if npairs:
            launch_kernel(self._fine, *self._grid(npairs), launch_stream(), npairs, plan.nx // 2,
                          plan.coarse, plan.fine, plan.fine_edge, plan.sign, q_coarse, q_fine,
                          aux, edge, dt_argument(dt), params, fine_sum)

    def start_coarse_sums(self, plan, edge, dt, coarse_sum, fine_sum):
        """``coarse_sum = dt * coarse_face_fluxes(plan, edge)``; ``fine_sum = 0``."""
        from forestpy.cuda_device import launch_kernel, launch_stream

        npairs = len(plan) // 2
        if npairs:
            stream = launch_stream()
            launch_kernel(self._coarse, *self._grid(npairs), stream, npairs, plan.coarse_edge,
                          edge, dt_argument(dt), coarse_sum, fine_sum)

    def correct(self, plan, q, aux, fine_sum, coarse_sum, capacity_index):
        """``correct_coarse(plan, q, aux, fine_sum, coarse_sum, capacity_index)``."""
        from forestpy.cuda_device import launch_kernel, launch_stream
        from forestpy.patches.time_sync import corner_partners

        npairs = len(plan) // 2
        if npairs:
            partner, shared = corner_partners(plan, _xp(q))
            launch_kernel(self._correct, *self._grid(npairs), launch_stream(), npairs, plan.nx // 2,
                          partner, shared, plan.coarse, plan.sign, plan.width, q, aux,
                          fine_sum, coarse_sum, int(capacity_index))


def _xp(a):
    from forestpy.backend import array_module

    return array_module(a)


def make_gpu_time_sync(riemann) -> GPUTimeSync:
    """The :class:`GPUTimeSync` of ``riemann`` (kernels compiled on first launch,
    cached per solver)."""
    key = ("time_sync", *_sizes(riemann))
    hit = _KERNELS.get(key)
    if hit is not None:
        return hit
    _, MEQN, MWAVES, MAUX = key[1:]
    MAUXL = max(MAUX, 1)
    rpn2 = cuda_device(riemann.rpn2)

    @cuda.jit(device=True, inline=True)
    def fine_term(k, nx, coarse, fine, fine_edge, sign, q_coarse, q_fine, aux, edge,
                  params, f0):
        """``f0`` := the mean over pair ``k``'s two fine edge cells of the fine flux in
        the coarse cell's frame, ``fine_face_terms``' row ``k``."""
        ql = cuda.local.array(MEQN, float64)
        qr = cuda.local.array(MEQN, float64)
        al = cuda.local.array(MAUXL, float64)
        ar = cuda.local.array(MAUXL, float64)
        wave = cuda.local.array((MEQN, MWAVES), float64)
        s = cuda.local.array(MWAVES, float64)
        amdq = cuda.local.array(MEQN, float64)
        apdq = cuda.local.array(MEQN, float64)
        ixy = 1 if k < nx else 2
        e0 = 2 * k
        pc = coarse[e0, 0]
        jc = coarse[e0, 1]
        ic = coarse[e0, 2]
        sg = float64(sign[e0])
        for h in range(2):
            e = e0 + h
            pf = fine[e, 0]
            jf = fine[e, 1]
            i_f = fine[e, 2]
            for m in range(MEQN):
                if sg > 0:
                    ql[m] = q_coarse[pc, m, jc, ic]
                    qr[m] = q_fine[pf, m, jf, i_f]
                else:
                    ql[m] = q_fine[pf, m, jf, i_f]
                    qr[m] = q_coarse[pc, m, jc, ic]
            for a in range(MAUX):
                if sg > 0:
                    al[a] = aux[pc, a, jc, ic]
                    ar[a] = aux[pf, a, jf, i_f]
                else:
                    al[a] = aux[pf, a, jf, i_f]
                    ar[a] = aux[pc, a, jc, ic]
            rpn2(ixy, ql, qr, al, ar, params, wave, s, amdq, apdq)
            for m in range(MEQN):
                v = edge[fine_edge[e, 0], fine_edge[e, 1], m, fine_edge[e, 2]] + sg * (
                    amdq[m] + apdq[m])
                if h == 0:
                    f0[m] = v
                else:
                    f0[m] = 0.5 * (f0[m] + v)

    @cuda.jit(device=True, inline=True)
    def apply_pair(k, nx, coarse, fine, coarse_edge, fine_edge, sign, width, q_old, q_new,
                   aux, edge, dt, params, capa):
        f0 = cuda.local.array(MEQN, float64)
        fine_term(k, nx, coarse, fine, fine_edge, sign, q_old, q_old, aux, edge, params, f0)
        e0 = 2 * k
        pc = coarse[e0, 0]
        jc = coarse[e0, 1]
        ic = coarse[e0, 2]
        sg = float64(sign[e0])
        ratio = dt / width[k]
        if capa >= 0:
            ratio = ratio / aux[pc, capa, jc, ic]
        for m in range(MEQN):
            coarse_flux = edge[coarse_edge[e0, 0], coarse_edge[e0, 1], m, coarse_edge[e0, 2]]
            q_new[pc, m, jc, ic] += -sg * ratio * (f0[m] - coarse_flux)

    @cuda.jit
    def apply_kernel(npairs, nx, partner, shared, coarse, fine, coarse_edge, fine_edge, sign,
                     width, q_old, q_new, aux, edge, dtv, params, capa):
        dt = device_scalar(dtv)
        k = cuda.grid(1)
        if k >= npairs or (k < nx and shared[k]):
            return
        if k >= nx and partner[k - nx] >= 0:  # a corner: its x correction first
            apply_pair(partner[k - nx], nx, coarse, fine, coarse_edge, fine_edge, sign, width,
                       q_old, q_new, aux, edge, dt, params, capa)
        apply_pair(k, nx, coarse, fine, coarse_edge, fine_edge, sign, width, q_old, q_new,
                   aux, edge, dt, params, capa)

    @cuda.jit
    def fine_kernel(npairs, nx, coarse, fine, fine_edge, sign, q_coarse, q_fine, aux, edge,
                    dtv, params, fine_sum):
        dt = device_scalar(dtv)
        k = cuda.grid(1)
        if k >= npairs:
            return
        f0 = cuda.local.array(MEQN, float64)
        fine_term(k, nx, coarse, fine, fine_edge, sign, q_coarse, q_fine, aux, edge, params,
                  f0)
        for m in range(MEQN):
            fine_sum[k, m] = fine_sum[k, m] + dt * f0[m]

    @cuda.jit
    def coarse_kernel(npairs, coarse_edge, edge, dtv, coarse_sum, fine_sum):
        dt = device_scalar(dtv)
        k = cuda.grid(1)
        if k >= npairs:
            return
        e0 = 2 * k
        for m in range(MEQN):
            coarse_sum[k, m] = dt * edge[coarse_edge[e0, 0], coarse_edge[e0, 1], m,
                                         coarse_edge[e0, 2]]
            fine_sum[k, m] = 0.0

    @cuda.jit(device=True, inline=True)
    def correct_pair(k, coarse, sign, width, q, aux, fine_sum, coarse_sum, capa):
        e0 = 2 * k
        pc = coarse[e0, 0]
        jc = coarse[e0, 1]
        ic = coarse[e0, 2]
        sg = float64(sign[e0])
        ratio = 1.0 / width[k]
        if capa >= 0:
            ratio = ratio / aux[pc, capa, jc, ic]
        for m in range(MEQN):
            q[pc, m, jc, ic] += -sg * ratio * (fine_sum[k, m] - coarse_sum[k, m])

    @cuda.jit
    def correct_kernel(npairs, nx, partner, shared, coarse, sign, width, q, aux, fine_sum,
                       coarse_sum, capa):
        k = cuda.grid(1)
        if k >= npairs or (k < nx and shared[k]):
            return
        if k >= nx and partner[k - nx] >= 0:  # a corner: its x correction first
            correct_pair(partner[k - nx], coarse, sign, width, q, aux, fine_sum, coarse_sum,
                         capa)
        correct_pair(k, coarse, sign, width, q, aux, fine_sum, coarse_sum, capa)

    hit = _KERNELS[key] = GPUTimeSync(*(fast_kernel(k) for k in (
        apply_kernel, fine_kernel, coarse_kernel, correct_kernel)))
    return hit
