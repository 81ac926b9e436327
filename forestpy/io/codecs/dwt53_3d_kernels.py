"""The compiled bodies of the 3D block codec (:mod:`.dwt53_3d`): geometry, lifting
passes, padding, totals, packing and unpacking of one block field, the CPU drivers,
and the encoded-data record; compiled for the device by :mod:`.dwt53_3d_gpu`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from . import dwt53_kernels as K
from .container import CodecError
from .dwt53_kernels import (
    FLOAT,
    HEADER,
    QMAX,
    QUANT,
    RAW,
    dequantise,
    exclusive_scan,
    get_int,
    lift_forward,
    lift_inverse,
    popcount8,
    pow2,
    put_int,
    quantise,
    row_total,
    sum_rows,
    width_for,
)

OK, E_MODE, E_WIDTH, E_SIZE, E_COUNT, E_COARSE = (K.OK, K.E_MODE, K.E_WIDTH, K.E_SIZE,
                                                  K.E_COUNT, K.E_COARSE)


# ------------------------------------------------------------------ geometry
@numba.njit
def level_of3(p, py, pz, nlev):
    """The level at which padded position ``p = (i py + j) pz + k`` became a detail, or
    ``nlev`` for a coarse scaling coefficient."""
    k = p % pz
    r = p // pz
    j = r % py
    i = r // py
    t = 0
    while t < nlev and (i >> t) % 2 == 0 and (j >> t) % 2 == 0 and (k >> t) % 2 == 0:
        t += 1
    return t


@numba.njit(inline="always")
def level_lines(px, py, pz, t, axis):
    """Lines along ``axis`` (0 x, 1 y, 2 z) of level ``t``'s grid."""
    h = 1 << t
    nx = (px - 1) // h + 1
    ny = (py - 1) // h + 1
    nz = (pz - 1) // h + 1
    return ny * nz if axis == 0 else (nx * nz if axis == 1 else nx * ny)


@numba.njit(inline="always")
def level_line(px, py, pz, t, axis, r):
    """``(start, stride, length)`` of line ``r`` along ``axis`` of level ``t``'s grid."""
    h = 1 << t
    nx = (px - 1) // h + 1
    ny = (py - 1) // h + 1
    nz = (pz - 1) // h + 1
    if axis == 0:
        j = r // nz
        return j * h * pz + (r - j * nz) * h, h * py * pz, nx
    if axis == 1:
        i = r // nz
        return i * h * py * pz + (r - i * nz) * h, h * pz, ny
    i = r // ny
    return (i * h * py + (r - i * ny) * h) * pz, h, nz


@numba.njit
def lines_forward(w, px, py, pz, t, axis, r0, rstep):
    """Level ``t``: the lifting along ``axis`` (0 x, 1 y, 2 z) on lines ``r0::rstep`` of
    the level's grid."""
    for r in range(r0, level_lines(px, py, pz, t, axis), rstep):
        start, stride, n = level_line(px, py, pz, t, axis, r)
        lift_forward(w, start, stride, n)


@numba.njit
def lines_inverse(w, px, py, pz, t, axis, r0, rstep):
    for r in range(r0, level_lines(px, py, pz, t, axis), rstep):
        start, stride, n = level_line(px, py, pz, t, axis, r)
        lift_inverse(w, start, stride, n)


@numba.njit
def load_lines(w, x, m, i0, j0, k0, px, py, pz, r0, rstep):
    """z-lines ``(i, j)``, ``i < bx, j < by`` (``r0::rstep``) of block field ``m`` at
    ``x[m, i0:, j0:, k0:]`` into ``w``, each with its padded sample
    ``w[i, j, bz] = 2 w[i, j, bz-1] - w[i, j, bz-2]``."""
    bx, by, bz = px - 1, py - 1, pz - 1
    for r in range(r0, bx * by, rstep):
        i = r // by
        j = r - i * by
        b = (i * py + j) * pz
        for k in range(bz):
            w[b + k] = x[m, i0 + i, j0 + j, k0 + k]
        w[b + bz] = 2.0 * w[b + bz - 1] - w[b + bz - 2]


@numba.njit
def pad_y(w, px, py, pz, r0, rstep):
    """The padded y layer ``w[i, by, k] = 2 w[i, by-1, k] - w[i, by-2, k]``, ``i < bx``."""
    by = py - 1
    for r in range(r0, (px - 1) * pz, rstep):
        i = r // pz
        k = r - i * pz
        b = (i * py + by) * pz + k
        w[b] = 2.0 * w[b - pz] - w[b - 2 * pz]


@numba.njit
def pad_x(w, px, py, pz, r0, rstep):
    """The padded x layer ``w[bx, j, k] = 2 w[bx-1, j, k] - w[bx-2, j, k]``."""
    s = py * pz
    b0 = (px - 1) * s
    for r in range(r0, s, rstep):
        w[b0 + r] = 2.0 * w[b0 + r - s] - w[b0 + r - 2 * s]


@numba.njit
def line_totals(w, rows, px, py, pz, r0, rstep):
    """``rows[i by + j]``: the compensated sum of the ``bz`` cells of z-line ``(i, j)``."""
    by = py - 1
    for r in range(r0, (px - 1) * by, rstep):
        i = r // by
        j = r - i * by
        rows[r] = row_total(w, pz, i * py + j)


@numba.njit
def add_delta(w, px, py, pz, delta, r0, rstep):
    by = py - 1
    for r in range(r0, (px - 1) * by, rstep):
        i = r // by
        j = r - i * by
        b = (i * py + j) * pz
        for k in range(pz - 1):
            w[b + k] = w[b + k] + delta


@numba.njit
def store_lines(w, out, m, i0, j0, k0, px, py, pz, r0, rstep):
    """The cells of ``w`` to ``out[m, i0:, j0:, k0:]`` (z-lines ``r0::rstep``)."""
    by = py - 1
    for r in range(r0, (px - 1) * by, rstep):
        i = r // by
        j = r - i * by
        b = (i * py + j) * pz
        for k in range(pz - 1):
            out[m, i0 + i, j0 + j, k0 + k] = w[b + k]


@numba.njit
def line_error(w, x, m, i0, j0, k0, px, py, pz, delta, r0, rstep):
    """Largest ``|w + delta - x|`` over the cells of z-lines ``r0::rstep`` (NaN-safe:
    a NaN makes it NaN... kept as the running value that fails ``<= tol``)."""
    by = py - 1
    err = 0.0
    for r in range(r0, (px - 1) * by, rstep):
        i = r // by
        j = r - i * by
        b = (i * py + j) * pz
        for k in range(pz - 1):
            d = abs(w[b + k] + delta - x[m, i0 + i, j0 + j, k0 + k])
            if not d <= err:
                err = d
    return err


@numba.njit
def block_origin(b, nby, nbz, bx, by, bz):
    bk = b % nbz
    r = b // nbz
    bj = r % nby
    bi = r // nby
    return bi * bx, bj * by, bk * bz


@numba.njit
def field_sizes3(mode, width, nnz, ncell, ncoarse, nbitmap):
    if mode == RAW:
        return 1 + ncell, HEADER
    nbm = nbitmap if nnz > 0 else 0  # no bitmap when no detail is kept
    if mode == FLOAT:
        return 1 + ncoarse + nnz, HEADER + nbm
    return 1 + ncoarse, HEADER + nbm + nnz * width


@numba.njit
def count_bits(coef, b, m, py, pz, nlev, nbitmap, npos, cnt, r0, rstep):
    for q8 in range(r0, nbitmap, rstep):
        n = 0
        for q in range(8):
            p = 8 * q8 + q
            if p < npos and level_of3(p, py, pz, nlev) < nlev and coef[b, m, p] != 0.0:
                n += 1
        cnt[q8] = n


@numba.njit
def pack_field3(coef, meta, total, b, m, fout, bout, fo, bo, px, py, pz, nlev, nbitmap,
                r0, rstep, cnt):
    """Field ``m`` of block ``b`` at ``fout[fo:]``, ``bout[bo:]`` (``cnt``: exclusive
    prefix of the bitmap bytes' counts)."""
    mode = meta[b, m, 0]
    width = meta[b, m, 1]
    e = meta[b, m, 2]
    nnz = meta[b, m, 3]
    npos = px * py * pz
    if r0 == 0:
        fout[fo] = total[b, m]
        bout[bo] = mode
        bout[bo + 1] = width
        put_int(bout, bo + 2, e + 32768, 2)
        put_int(bout, bo + 4, nnz, 4)
    bx, by, bz = px - 1, py - 1, pz - 1
    if mode == RAW:
        for r in range(r0, bx * by, rstep):
            i = r // by
            j = r - i * by
            for k in range(bz):
                fout[fo + 1 + r * bz + k] = coef[b, m, (i * py + j) * pz + k]
        return
    h = 1 << nlev
    cx = bx // h + 1
    cy = by // h + 1
    cz = bz // h + 1
    for c in range(r0, cx * cy * cz, rstep):
        ck = c % cz
        rr = c // cz
        cj = rr % cy
        ci = rr // cy
        fout[fo + 1 + c] = coef[b, m, (ci * h * py + cj * h) * pz + ck * h]
    fv = fo + 1 + cx * cy * cz
    bv = bo + HEADER + nbitmap
    if nnz == 0:
        return
    for q8 in range(r0, nbitmap, rstep):
        byte = 0
        n = cnt[q8]
        for q in range(8):
            p = 8 * q8 + q
            if p < npos and level_of3(p, py, pz, nlev) < nlev and coef[b, m, p] != 0.0:
                byte |= 1 << q
                v = coef[b, m, p]
                if mode == FLOAT:
                    fout[fv + n] = v
                else:
                    put_int(bout, bv + n * width, numba.int64(v), width)
                n += 1
        bout[bo + HEADER + q8] = byte


@numba.njit
def read_header3(bin_, bo, bend, fo, fend, ncell, ncoarse, nbitmap):
    if bo + HEADER > bend:
        return 0, 0, 0, 0, 0, 0, E_SIZE
    mode = numba.int64(bin_[bo])
    width = numba.int64(bin_[bo + 1])
    e = get_int(bin_, bo + 2, 2)
    if e < 0:
        e += 65536
    e -= 32768
    nnz = get_int(bin_, bo + 4, 4)
    if nnz < 0:
        nnz += numba.int64(1) << 32
    if mode != RAW and mode != QUANT and mode != FLOAT:
        return mode, width, e, nnz, 0, 0, E_MODE
    if width != 1 and width != 2 and width != 4 and width != 8:
        return mode, width, e, nnz, 0, 0, E_WIDTH
    if nnz > 8 * nbitmap:
        return mode, width, e, nnz, 0, 0, E_COUNT
    nf, nb = field_sizes3(mode, width, nnz, ncell, ncoarse, nbitmap)
    if bo + nb > bend or fo + nf > fend:
        return mode, width, e, nnz, nf, nb, E_SIZE
    return mode, width, e, nnz, nf, nb, OK


@numba.njit
def unpack_field3(fin, bin_, fo, bo, mode, width, e, w, px, py, pz, nlev, nbitmap, cnt,
                  has_bm, r0, rstep):
    """Stored coefficients of one field into ``w`` (dequantised); 1 where the bitmap
    marks a coarse coefficient or a padding bit.  ``has_bm``: the field has a bitmap
    (it has none when no detail is kept)."""
    npos = px * py * pz
    h = 1 << nlev
    cy = (py - 1) // h + 1
    cz = (pz - 1) // h + 1
    step = pow2(e) if mode == QUANT else 0.0
    bad = 0
    fv = fo + 1 + ((px - 1) // h + 1) * cy * cz
    bv = bo + HEADER + nbitmap
    for q8 in range(r0, nbitmap, rstep):
        byte = bin_[bo + HEADER + q8] if has_bm else 0
        n = cnt[q8]
        for q in range(8):
            p = 8 * q8 + q
            bit = (byte >> q) & 1
            if p >= npos:
                if bit:
                    bad = 1
                continue
            t = level_of3(p, py, pz, nlev)
            if t >= nlev:
                if bit:
                    bad = 1
                k = p % pz
                r = p // pz
                j = r % py
                i = r // py
                w[p] = fin[fo + 1 + ((i // h) * cy + j // h) * cz + k // h]
            elif bit:
                if mode == FLOAT:
                    w[p] = fin[fv + n]
                else:
                    w[p] = dequantise(float(get_int(bin_, bv + n * width, width)), t, nlev,
                                      step)
                n += 1
            else:
                w[p] = 0.0
    return bad


@numba.njit
def popcounts3(bin_, bo, nbitmap, cnt, has_bm, r0, rstep):
    for q8 in range(r0, nbitmap, rstep):
        cnt[q8] = popcount8(bin_[bo + HEADER + q8]) if has_bm else 0


# ================================================================== CPU drivers
@numba.njit
def _inverse_all(w, px, py, pz, nlev):
    for t in range(nlev - 1, -1, -1):
        lines_inverse(w, px, py, pz, t, 2, 0, 1)
        lines_inverse(w, px, py, pz, t, 1, 0, 1)
        lines_inverse(w, px, py, pz, t, 0, 0, 1)


@numba.njit
def _encode_field(x, b, m, i0, j0, k0, w, w2, rows, coef, meta, total, px, py, pz, nlev,
                  tau, e0, tries, tol, write_back):
    npos = px * py * pz
    nline = (px - 1) * (py - 1)
    ncell = nline * (pz - 1)
    load_lines(w, x, m, i0, j0, k0, px, py, pz, 0, 1)
    pad_y(w, px, py, pz, 0, 1)
    pad_x(w, px, py, pz, 0, 1)
    line_totals(w, rows, px, py, pz, 0, 1)
    T = sum_rows(rows, nline)
    total[b, m] = T
    finite = True
    for p in range(npos):
        if not math.isfinite(w[p]):
            finite = False
    mode = RAW
    e = 0
    nnz = 0
    qmax = 0.0
    written = False
    step = 0.0
    if finite:
        for t in range(nlev):
            lines_forward(w, px, py, pz, t, 0, 0, 1)
            lines_forward(w, px, py, pz, t, 1, 0, 1)
            lines_forward(w, px, py, pz, t, 2, 0, 1)
        if tol < 0.0 and tau == 0.0:
            tries = 1
        e = e0
        for _attempt in range(tries):
            step = pow2(e) if (tol >= 0.0 or tau > 0.0) else 0.0
            inv = 1.0 / step if step > 0.0 else 0.0
            nnz = 0
            qmax = 0.0
            for p in range(npos):
                t = level_of3(p, py, pz, nlev)
                v = quantise(w[p], t, nlev, tau, inv)
                w2[p] = v
                if t < nlev and v != 0.0:
                    nnz += 1
                    if abs(v) > qmax:
                        qmax = abs(v)
            if step > 0.0 and not qmax < QMAX:
                break
            if tol < 0.0:
                mode = QUANT if step > 0.0 else FLOAT
                break
            for p in range(npos):
                w2[p] = dequantise(w2[p], level_of3(p, py, pz, nlev), nlev, step)
            _inverse_all(w2, px, py, pz, nlev)
            line_totals(w2, rows, px, py, pz, 0, 1)
            delta = (T - sum_rows(rows, nline)) * (1.0 / ncell)
            err = line_error(w2, x, m, i0, j0, k0, px, py, pz, delta, 0, 1)
            if err <= tol:
                mode = QUANT
                if write_back:
                    add_delta(w2, px, py, pz, delta, 0, 1)
                    store_lines(w2, x, m, i0, j0, k0, px, py, pz, 0, 1)
                    written = True
                for p in range(npos):
                    w2[p] = quantise(w[p], level_of3(p, py, pz, nlev), nlev, tau, inv)
                break
            e -= 1
    if mode == RAW:
        bx, by, bz = px - 1, py - 1, pz - 1
        for i in range(bx):
            for j in range(by):
                for k in range(bz):
                    coef[b, m, (i * py + j) * pz + k] = x[m, i0 + i, j0 + j, k0 + k]
        meta[b, m, 0] = RAW
        meta[b, m, 1] = 8
        meta[b, m, 2] = 0
        meta[b, m, 3] = 0
        return
    for p in range(npos):
        coef[b, m, p] = w2[p]
    meta[b, m, 0] = mode
    meta[b, m, 1] = width_for(qmax) if mode == QUANT else 8
    meta[b, m, 2] = e if mode == QUANT else 0
    meta[b, m, 3] = nnz
    if write_back and not written:
        for p in range(npos):
            w2[p] = dequantise(w2[p], level_of3(p, py, pz, nlev), nlev, step)
        _inverse_all(w2, px, py, pz, nlev)
        line_totals(w2, rows, px, py, pz, 0, 1)
        delta = (T - sum_rows(rows, nline)) * (1.0 / ncell)
        add_delta(w2, px, py, pz, delta, 0, 1)
        store_lines(w2, x, m, i0, j0, k0, px, py, pz, 0, 1)


@numba.njit(cache=True)
def analyse_cpu3(x, coef, meta, total, bx, by, bz, nlev, tau, e0, tries, tol, write_back):
    """Phase 1 of encoding: block ``b`` per ``prange`` iteration."""
    meqn, nx, ny, nz = x.shape
    nby, nbz = ny // by, nz // bz
    nblock = (nx // bx) * nby * nbz
    px, py, pz = bx + 1, by + 1, bz + 1
    for b in numba.prange(nblock):
        w = np.empty(px * py * pz)
        w2 = np.empty(px * py * pz)
        rows = np.empty(bx * by)
        i0, j0, k0 = block_origin(b, nby, nbz, bx, by, bz)
        for m in range(meqn):
            _encode_field(x, b, m, i0, j0, k0, w, w2, rows, coef, meta, total, px, py, pz,
                          nlev, tau, e0[m], tries, tol[m], write_back)


@numba.njit(cache=True)
def pack_cpu3(coef, meta, total, foff, boff, fout, bout, bx, by, bz, nlev):
    nblock, meqn = meta.shape[0], meta.shape[1]
    px, py, pz = bx + 1, by + 1, bz + 1
    npos = px * py * pz
    nbitmap = (npos + 7) // 8
    ncell = bx * by * bz
    h = 1 << nlev
    ncoarse = (bx // h + 1) * (by // h + 1) * (bz // h + 1)
    for b in numba.prange(nblock):
        cnt = np.empty(nbitmap, np.int64)
        fo = foff[b]
        bo = boff[b]
        for m in range(meqn):
            count_bits(coef, b, m, py, pz, nlev, nbitmap, npos, cnt, 0, 1)
            exclusive_scan(cnt, nbitmap)
            pack_field3(coef, meta, total, b, m, fout, bout, fo, bo, px, py, pz, nlev,
                        nbitmap, 0, 1, cnt)
            nf, nb = field_sizes3(meta[b, m, 0], meta[b, m, 1], meta[b, m, 3], ncell,
                                  ncoarse, nbitmap)
            fo += nf
            bo += nb


@numba.njit(cache=True)
def decode_cpu3(fin, bin_, foff, boff, out, bx, by, bz, nlev, errs):
    """Decode every block into ``out[meqn, nx, ny, nz]``; ``errs[b] = (code, field)``."""
    meqn, nx, ny, nz = out.shape
    nby, nbz = ny // by, nz // bz
    nblock = (nx // bx) * nby * nbz
    px, py, pz = bx + 1, by + 1, bz + 1
    npos = px * py * pz
    nbitmap = (npos + 7) // 8
    nline = bx * by
    ncell = nline * bz
    h = 1 << nlev
    ncoarse = (bx // h + 1) * (by // h + 1) * (bz // h + 1)
    for b in numba.prange(nblock):
        w = np.empty(npos)
        rows = np.empty(nline)
        cnt = np.empty(nbitmap, np.int64)
        i0, j0, k0 = block_origin(b, nby, nbz, bx, by, bz)
        fo = foff[b]
        bo = boff[b]
        fend = foff[b + 1]
        bend = boff[b + 1]
        errs[b, 0] = OK
        errs[b, 1] = 0
        for m in range(meqn):
            mode, width, e, nnz, nf, nb, err = read_header3(bin_, bo, bend, fo, fend, ncell,
                                                            ncoarse, nbitmap)
            if err != OK:
                errs[b, 0] = err
                errs[b, 1] = m
                break
            T = fin[fo]
            if mode == RAW:
                for r in range(nline):
                    i = r // by
                    j = r - i * by
                    for k in range(bz):
                        out[m, i0 + i, j0 + j, k0 + k] = fin[fo + 1 + r * bz + k]
            else:
                popcounts3(bin_, bo, nbitmap, cnt, nnz > 0, 0, 1)
                s = 0
                for q8 in range(nbitmap):
                    s += cnt[q8]
                if s != nnz:
                    errs[b, 0] = E_COUNT
                    errs[b, 1] = m
                    break
                exclusive_scan(cnt, nbitmap)
                if unpack_field3(fin, bin_, fo, bo, mode, width, e, w, px, py, pz, nlev,
                                 nbitmap, cnt, nnz > 0, 0, 1):
                    errs[b, 0] = E_COARSE
                    errs[b, 1] = m
                    break
                _inverse_all(w, px, py, pz, nlev)
                line_totals(w, rows, px, py, pz, 0, 1)
                delta = (T - sum_rows(rows, nline)) * (1.0 / ncell)
                add_delta(w, px, py, pz, delta, 0, 1)
                store_lines(w, out, m, i0, j0, k0, px, py, pz, 0, 1)
            fo += nf
            bo += nb
        if errs[b, 0] == OK and (fo != fend or bo != bend):
            errs[b, 0] = E_SIZE
            errs[b, 1] = meqn - 1


#: blocks from which the CPU drivers run their ``prange`` in parallel (a variant compiled
#: on first use: a parallel compilation costs seconds, which small arrays and the tests
#: do not pay)
PARALLEL_MIN_BLOCKS = 64
_PARALLEL: dict = {}


def _driver(fn, nblock: int):
    """``fn`` (serial, cached) or its ``parallel=True`` twin for ``nblock`` blocks."""
    if nblock < PARALLEL_MIN_BLOCKS or numba.get_num_threads() < 2:
        return fn
    if fn not in _PARALLEL:
        _PARALLEL[fn] = numba.njit(parallel=True)(fn.py_func)
    return _PARALLEL[fn]


def sizes_of3(meta: np.ndarray, block, nlev: int):
    """Per-block (float64 values, bytes) from ``meta[nblock, meqn, 4]``."""
    bx, by, bz = block
    npos = (bx + 1) * (by + 1) * (bz + 1)
    nbitmap = (npos + 7) // 8
    h = 1 << nlev
    ncoarse = (bx // h + 1) * (by // h + 1) * (bz // h + 1)
    mode, width, nnz = meta[..., 0], meta[..., 1], meta[..., 3]
    nf = np.where(mode == RAW, 1 + bx * by * bz,
                  np.where(mode == FLOAT, 1 + ncoarse + nnz, 1 + ncoarse))
    nbm = np.where(nnz > 0, nbitmap, 0)
    nb = np.where(mode == RAW, HEADER,
                  np.where(mode == FLOAT, HEADER + nbm, HEADER + nbm + nnz * width))
    return nf.sum(axis=1), nb.sum(axis=1)


@dataclass
class Encoded3D:
    """One encoded array: ``fdata`` (float64), ``bdata`` (uint8) and the per-block
    ``foff``/``boff`` (int64, host arrays), the data's ``shape`` and ``dtype``, the
    block edges and the levels.  ``fdata``/``bdata`` are NumPy arrays, or device arrays
    when the encoding ran on the GPU (they stay there)."""

    fdata: object
    bdata: object
    foff: np.ndarray
    boff: np.ndarray
    shape: tuple
    dtype: np.dtype
    block: tuple
    nlev: int
    modes: np.ndarray  # (nblock, meqn) field modes, host

    @property
    def nbytes(self) -> int:
        """Bytes held: both streams and the two offset tables."""
        return int(self.foff[-1]) * 8 + int(self.boff[-1]) + 8 * (self.foff.size
                                                                  + self.boff.size)

    @property
    def ratio(self) -> float:
        """Size of the data as stored (``shape``, ``dtype``) over :attr:`nbytes`."""
        return float(np.prod(self.shape)) * np.dtype(self.dtype).itemsize / self.nbytes



def raise_errors(errs):
    bad = np.nonzero(errs[:, 0])[0]
    if bad.size:
        b = int(bad[0])
        raise CodecError(f"dwt53 3D: block {b} field {int(errs[b, 1])}: "
                         f"{K.ERRORS.get(int(errs[b, 0]), 'inconsistent data')}")
