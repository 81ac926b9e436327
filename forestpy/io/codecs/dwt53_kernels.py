"""The ``dwt53`` codec's compiled bodies: the seed's 5/3 lifting, quantisation, packing.

Everything here works on one patch field at a time in a flat float64 workspace ``w`` of
``py * px`` values (row-major, row stride ``px``), where ``px = mx + 1`` and
``py = my + 1``: the patch's ``my x mx`` cell averages plus one padded column and row
(linear extrapolation, :func:`load_padded`).  The bodies are written once and run

* by the CPU drivers at the bottom (``numba.prange`` over patches, each patch serially:
  ``r0 = 0, rstep = 1``), and
* compiled for the device by :func:`forestpy.cuda_device.cuda_device`, by the CUDA
  kernels of :mod:`forestpy.io.codecs.dwt53_gpu` (one block per patch, the workspace in
  shared memory, thread ``r0`` of ``rstep`` taking every ``rstep``-th line or position).

Every floating-point operation is an addition, a subtraction, or a product by a power of
two (lifting weights 1/2 and 1/4, the quantisation step ``2**e``, ``1 / (mx my)``), so
each result is the same whether or not a compiler contracts ``a * b + c`` into a fused
multiply-add: the CPU and the GPU produce the same bytes.

Lifting (seed 003 section 3.1.3, Sweldens' lifting on ``2**J + 1`` samples, the two
boundary samples kept at every scale)::

    d_{j-1,k} = s_{j,2k+1} - (s_{j,2k} + s_{j,2k+2}) / 2                  (predict)
    s_{j-1,k} = s_{j,2k} + a_{k-1} d_{j-1,k-1} + a_k d_{j-1,k}, 0 < k < n  (update)
    a_k = 1/2 for k = 0 and k = n - 1, 1/4 otherwise   (n = 2**(j-1) details)

so that the trapezoidal mass ``s_0 / 2 + s_1 + ... + s_{2n-1} + s_{2n} / 2`` of every
scale is the same and details carry none.  In 2D the levels go as Mallat's pyramid: at
level ``t`` (spacing ``h = 2**t``) the lifting runs along x on the rows ``j = 0, h, ..``
and then along y on the columns ``i = 0, h, ...``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# modes of a patch field (byte 0 of its header)
RAW, QUANT, FLOAT = 0, 1, 2
#: largest quantised magnitude: beyond it the field is stored raw
QMAX = float(1 << 52)
#: bytes of a patch field's header: mode, width, exponent (2, little endian, +32768),
#: number of stored coefficients (4, little endian)
HEADER = 8

# error codes of the decoder (per patch)
OK, E_MODE, E_WIDTH, E_SIZE, E_COUNT, E_COARSE = 0, 1, 2, 3, 4, 5
ERRORS = {
    E_MODE: "unknown field mode",
    E_WIDTH: "bad value width",
    E_SIZE: "sizes past the end of the patch's data",
    E_COUNT: "coefficient count differs from the bitmap",
    E_COARSE: "bitmap marks a coarse coefficient",
}


# ------------------------------------------------------------------ 1D lifting
@numba.njit
def lift_forward(w, base, stride, n):
    """Forward 5/3 lifting of the ``n = 2**m + 1`` samples ``w[base + k * stride]``:
    details at the odd, scaling coefficients at the even positions."""
    nd = (n - 1) // 2
    for k in range(nd):
        o = base + (2 * k + 1) * stride
        w[o] = w[o] - 0.5 * (w[o - stride] + w[o + stride])
    for k in range(1, nd):
        e = base + 2 * k * stride
        al = 0.5 if k == 1 else 0.25
        ar = 0.5 if k == nd - 1 else 0.25
        w[e] = w[e] + (al * w[e - stride] + ar * w[e + stride])


@numba.njit
def lift_inverse(w, base, stride, n):
    """The inverse of :func:`lift_forward` (the same operations undone in reverse)."""
    nd = (n - 1) // 2
    for k in range(1, nd):
        e = base + 2 * k * stride
        al = 0.5 if k == 1 else 0.25
        ar = 0.5 if k == nd - 1 else 0.25
        w[e] = w[e] - (al * w[e - stride] + ar * w[e + stride])
    for k in range(nd):
        o = base + (2 * k + 1) * stride
        w[o] = w[o] + 0.5 * (w[o - stride] + w[o + stride])


@numba.njit
def rows_forward(w, px, py, t, r0, rstep):
    """Level ``t``, the x pass: rows ``r0, r0 + rstep, ...`` of the level's grid."""
    h = 1 << t
    nx = (px - 1) // h + 1
    ny = (py - 1) // h + 1
    for r in range(r0, ny, rstep):
        lift_forward(w, r * h * px, h, nx)


@numba.njit
def cols_forward(w, px, py, t, r0, rstep):
    """Level ``t``, the y pass: columns ``r0, r0 + rstep, ...`` of the level's grid."""
    h = 1 << t
    nx = (px - 1) // h + 1
    ny = (py - 1) // h + 1
    for c in range(r0, nx, rstep):
        lift_forward(w, c * h, h * px, ny)


@numba.njit
def rows_inverse(w, px, py, t, r0, rstep):
    h = 1 << t
    nx = (px - 1) // h + 1
    ny = (py - 1) // h + 1
    for r in range(r0, ny, rstep):
        lift_inverse(w, r * h * px, h, nx)


@numba.njit
def cols_inverse(w, px, py, t, r0, rstep):
    h = 1 << t
    nx = (px - 1) // h + 1
    ny = (py - 1) // h + 1
    for c in range(r0, nx, rstep):
        lift_inverse(w, c * h, h * px, ny)


@numba.njit
def level_of(p, px, nlev):
    """The level ``t`` at which position ``p`` of the padded grid became a detail, or
    ``nlev`` for a coarse scaling coefficient (kept as a float64)."""
    j = p // px
    i = p - j * px
    t = 0
    while t < nlev and (i >> t) % 2 == 0 and (j >> t) % 2 == 0:
        t += 1
    return t


# ------------------------------------------------------------------ load, totals
@numba.njit
def load_padded(w, x, k, m, px, py, r0, rstep):
    """Rows ``r0::rstep`` of field ``m`` of patch ``k`` of ``x`` into ``w`` with the
    padded column ``w[j, mx] = 2 x[j, mx-1] - x[j, mx-2]``."""
    mx = px - 1
    for j in range(r0, py - 1, rstep):
        b = j * px
        for i in range(mx):
            w[b + i] = x[k, m, j, i]
        w[b + mx] = 2.0 * w[b + mx - 1] - w[b + mx - 2]


@numba.njit
def pad_last_row(w, px, py, r0, rstep):
    """The padded row ``w[my, i] = 2 w[my-1, i] - w[my-2, i]`` (after every row is in)."""
    b = (py - 1) * px
    for i in range(r0, px, rstep):
        w[b + i] = 2.0 * w[b + i - px] - w[b + i - 2 * px]


@numba.njit
def row_total(w, px, j):
    """Neumaier-compensated sum of the ``px - 1`` cells of row ``j`` of ``w``."""
    s = 0.0
    c = 0.0
    b = j * px
    for i in range(px - 1):
        v = w[b + i]
        u = s + v
        if abs(s) >= abs(v):
            c += (s - u) + v
        else:
            c += (v - u) + s
        s = u
    return s + c


@numba.njit
def sum_rows(rows, n):
    """Neumaier-compensated sum of ``rows[:n]`` (the row totals, in row order): with
    :func:`row_total` the field total, the same on the CPU and the GPU."""
    s = 0.0
    c = 0.0
    for j in range(n):
        v = rows[j]
        u = s + v
        if abs(s) >= abs(v):
            c += (s - u) + v
        else:
            c += (v - u) + s
        s = u
    return s + c


# ------------------------------------------------------------------ quantisation
@numba.njit
def quantise(c, t, nlev, tau, inv_step):
    """The stored value of coefficient ``c`` made at level ``t``: ``c`` itself for a
    coarse coefficient (``t == nlev``); 0 for a detail below the level's threshold
    ``tau * 2**t`` (the seed's ``tau_j = tau 2**(J-j)``, finest details ``tau``);
    otherwise ``floor(c / step + 1/2)`` (``inv_step > 0``) or ``c`` (``inv_step == 0``,
    no quantisation)."""
    if t >= nlev:
        return c
    if abs(c) < tau * (1 << t):
        return 0.0
    if inv_step == 0.0:
        return c
    v = c * inv_step + 0.5
    if not abs(v) < QMAX:
        return v  # too large to quantise: the field is stored raw
    return float(math.floor(v))  # |v| < 2**52: exact through an int64


@numba.njit
def dequantise(v, t, nlev, step):
    if t >= nlev or step == 0.0:
        return v
    return v * step


@numba.njit
def correct(w, px, py, delta, r0, rstep):
    """Add ``delta`` to every cell of rows ``r0::rstep`` (the total correction)."""
    for j in range(r0, py - 1, rstep):
        b = j * px
        for i in range(px - 1):
            w[b + i] = w[b + i] + delta


@numba.njit
def pow2(e):
    """``2.0 ** e`` for an integer ``e`` (exact)."""
    v = 1.0
    if e >= 0:
        for _ in range(e):
            v *= 2.0
    else:
        for _ in range(-e):
            v *= 0.5
    return v


# ------------------------------------------------------------------ byte helpers
@numba.njit
def put_int(b, pos, v, width):
    """``v`` (int64) as ``width`` little-endian bytes of two's complement at ``b[pos]``."""
    for q in range(width):
        b[pos + q] = (v >> (8 * q)) & 0xFF


@numba.njit
def get_int(b, pos, width):
    v = numba.int64(0)
    for q in range(width):
        v |= numba.int64(b[pos + q]) << (8 * q)
    if width < 8 and v >= (numba.int64(1) << (8 * width - 1)):
        v -= numba.int64(1) << (8 * width)
    return v


@numba.njit
def width_for(qmax):
    """Bytes of two's complement that hold every integer of magnitude <= ``qmax``."""
    if qmax < 128.0:
        return 1
    if qmax < 32768.0:
        return 2
    if qmax < 2147483648.0:
        return 4
    return 8


@numba.njit
def popcount8(v):
    n = 0
    for q in range(8):
        n += (v >> q) & 1
    return n


@numba.njit
def field_sizes(mode, width, nnz, ncell, ncoarse, nbitmap):
    """(float64 values, bytes) that a patch field takes in the two streams."""
    if mode == RAW:
        return 1 + ncell, HEADER
    if mode == FLOAT:
        return 1 + ncoarse + nnz, HEADER + nbitmap
    return 1 + ncoarse, HEADER + nbitmap + nnz * width


# ================================================================== sizes
def sizes_of(meta: np.ndarray, my: int, mx: int, nlev: int):
    """Per-patch (float64 values, bytes) of the encoded stream from ``meta[npatch, meqn,
    4]`` (vectorised :func:`~.dwt53_kernels.field_sizes`)."""
    px, py = mx + 1, my + 1
    nbitmap = (px * py + 7) // 8
    h = 1 << nlev
    ncoarse = ((px - 1) // h + 1) * ((py - 1) // h + 1)
    mode, width, nnz = meta[..., 0], meta[..., 1], meta[..., 3]
    nf = np.where(mode == RAW, 1 + mx * my,
                  np.where(mode == FLOAT, 1 + ncoarse + nnz, 1 + ncoarse))
    nb = np.where(mode == RAW, HEADER,
                  np.where(mode == FLOAT, HEADER + nbitmap,
                           HEADER + nbitmap + nnz * width))
    return nf.sum(axis=1), nb.sum(axis=1)


def offsets(sizes) -> np.ndarray:
    out = np.zeros(sizes.size + 1, np.uint64)
    np.cumsum(sizes, out=out[1:])
    return out


# ================================================================== CPU drivers
@numba.njit
def _analyse_field(x, k, m, w, w2, rows, coef, meta, total, px, py, nlev, tau, e0,
                   tries, tol, raw):
    """Encode field ``m`` of patch ``k`` into ``coef[k, m]`` (stored values in place),
    ``meta[k, m] = (mode, width, exponent, nnz)`` and ``total[k, m]``; ``raw``: store
    it as it is."""
    npos = px * py
    ncell = (px - 1) * (py - 1)
    load_padded(w, x, k, m, px, py, 0, 1)
    pad_last_row(w, px, py, 0, 1)
    for j in range(py - 1):
        rows[j] = row_total(w, px, j)
    T = sum_rows(rows, py - 1)
    total[k, m] = T
    finite = raw == 0
    for p in range(npos):
        if not math.isfinite(w[p]):
            finite = False
    mode = RAW
    e = 0
    nnz = 0
    qmax = 0.0
    if finite:
        for t in range(nlev):
            rows_forward(w, px, py, t, 0, 1)
            cols_forward(w, px, py, t, 0, 1)
        if tol < 0.0 and tau == 0.0:
            tries = 1
        e = e0
        for _attempt in range(tries):
            step = pow2(e) if (tol >= 0.0 or tau > 0.0) else 0.0
            inv = 1.0 / step if step > 0.0 else 0.0
            nnz = 0
            qmax = 0.0
            for p in range(npos):
                t = level_of(p, px, nlev)
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
            # error-bounded: decode here and check the bound
            for p in range(npos):
                w2[p] = dequantise(w2[p], level_of(p, px, nlev), nlev, step)
            for t in range(nlev - 1, -1, -1):
                cols_inverse(w2, px, py, t, 0, 1)
                rows_inverse(w2, px, py, t, 0, 1)
            for j in range(py - 1):
                rows[j] = row_total(w2, px, j)
            delta = (T - sum_rows(rows, py - 1)) * (1.0 / ncell)
            err = 0.0
            for j in range(py - 1):
                for i in range(px - 1):
                    d = abs(w2[j * px + i] + delta - x[k, m, j, i])
                    if not d <= err:
                        err = d
            if err <= tol:
                mode = QUANT
                # quantise again (w2 now holds the decoded field)
                for p in range(npos):
                    w2[p] = quantise(w[p], level_of(p, px, nlev), nlev, tau, inv)
                break
            e -= 1
    if mode == RAW:
        for j in range(py - 1):
            for i in range(px - 1):
                coef[k, m, j * px + i] = x[k, m, j, i]
        meta[k, m, 0] = RAW
        meta[k, m, 1] = 8
        meta[k, m, 2] = 0
        meta[k, m, 3] = 0
        return
    for p in range(npos):
        coef[k, m, p] = w2[p]
    meta[k, m, 0] = mode
    meta[k, m, 1] = width_for(qmax) if mode == QUANT else 8
    meta[k, m, 2] = e if mode == QUANT else 0
    meta[k, m, 3] = nnz


@numba.njit(parallel=True, cache=True)
def analyse_cpu(x, coef, meta, total, nlev, tau, e0, tries, tol, raw):
    """Phase 1 of encoding on the CPU (one patch per ``prange`` iteration); fields with
    ``raw[k, m] != 0`` are stored as they are."""
    npatch, meqn, my, mx = x.shape
    px, py = mx + 1, my + 1
    for k in numba.prange(npatch):
        w = np.empty(px * py)
        w2 = np.empty(px * py)
        rows = np.empty(py)
        for m in range(meqn):
            _analyse_field(x, k, m, w, w2, rows, coef, meta, total, px, py, nlev, tau,
                           e0[m], tries, tol[m], raw[k, m])


@numba.njit
def pack_field(coef, meta, total, k, m, fout, bout, fo, bo, px, py, nlev, nbitmap,
               r0, rstep, cnt):
    """Write field ``m`` of patch ``k`` at ``fout[fo:]`` and ``bout[bo:]``: thread ``r0``
    of ``rstep`` writes bitmap bytes ``r0::rstep``; ``cnt`` (``nbitmap`` ints) must hold
    the exclusive prefix of the stored coefficients before each bitmap byte
    (:func:`bitmap_counts` then :func:`exclusive_scan`)."""
    mode = meta[k, m, 0]
    width = meta[k, m, 1]
    e = meta[k, m, 2]
    nnz = meta[k, m, 3]
    npos = px * py
    if r0 == 0:
        fout[fo] = total[k, m]
        bout[bo] = mode
        bout[bo + 1] = width
        put_int(bout, bo + 2, e + 32768, 2)
        put_int(bout, bo + 4, nnz, 4)
    if mode == RAW:
        for j in range(r0, py - 1, rstep):
            for i in range(px - 1):
                fout[fo + 1 + j * (px - 1) + i] = coef[k, m, j * px + i]
        return
    # coarse coefficients, in position order
    h = 1 << nlev
    cx = (px - 1) // h + 1
    cy = (py - 1) // h + 1
    for c in range(r0, cx * cy, rstep):
        cj = c // cx
        ci = c - cj * cx
        fout[fo + 1 + c] = coef[k, m, cj * h * px + ci * h]
    fv = fo + 1 + cx * cy  # FLOAT: the kept values follow
    bv = bo + HEADER + nbitmap  # QUANT: the integers follow the bitmap
    for b in range(r0, nbitmap, rstep):
        byte = 0
        n = cnt[b]
        for q in range(8):
            p = 8 * b + q
            if p < npos and level_of(p, px, nlev) < nlev and coef[k, m, p] != 0.0:
                byte |= 1 << q
                v = coef[k, m, p]
                if mode == FLOAT:
                    fout[fv + n] = v
                else:
                    put_int(bout, bv + n * width, numba.int64(v), width)
                n += 1
        bout[bo + HEADER + b] = byte


@numba.njit
def bitmap_counts(coef, k, m, px, py, nlev, nbitmap, cnt, r0, rstep):
    """``cnt[b]``: the stored coefficients of bitmap byte ``b`` (bytes ``r0::rstep``)."""
    npos = px * py
    for b in range(r0, nbitmap, rstep):
        n = 0
        for q in range(8):
            p = 8 * b + q
            if p < npos and level_of(p, px, nlev) < nlev and coef[k, m, p] != 0.0:
                n += 1
        cnt[b] = n


@numba.njit
def exclusive_scan(cnt, n):
    s = 0
    for b in range(n):
        v = cnt[b]
        cnt[b] = s
        s += v


@numba.njit(parallel=True, cache=True)
def pack_cpu(coef, meta, total, foff, boff, fout, bout, my, mx, nlev):
    """Phase 2 of encoding on the CPU: patch ``k`` at ``fout[foff[k]:]``,
    ``bout[boff[k]:]``."""
    npatch, meqn = meta.shape[0], meta.shape[1]
    px, py = mx + 1, my + 1
    nbitmap = (px * py + 7) // 8
    ncell = mx * my
    h = 1 << nlev
    ncoarse = ((px - 1) // h + 1) * ((py - 1) // h + 1)
    for k in numba.prange(npatch):
        cnt = np.empty(nbitmap, np.int64)
        fo = foff[k]
        bo = boff[k]
        for m in range(meqn):
            bitmap_counts(coef, k, m, px, py, nlev, nbitmap, cnt, 0, 1)
            exclusive_scan(cnt, nbitmap)
            pack_field(coef, meta, total, k, m, fout, bout, fo, bo, px, py, nlev, nbitmap,
                       0, 1, cnt)
            nf, nb = field_sizes(meta[k, m, 0], meta[k, m, 1], meta[k, m, 3], ncell,
                                 ncoarse, nbitmap)
            fo += nf
            bo += nb


# ------------------------------------------------------------------ decoding
@numba.njit
def read_header(bout, bo, bend, fo, fend, ncell, ncoarse, nbitmap):
    """``(mode, width, e, nnz, nf, nb, error)`` of the field whose header is at
    ``bout[bo]``, sizes checked against the patch's ends ``bend``, ``fend``."""
    if bo + HEADER > bend:
        return 0, 0, 0, 0, 0, 0, E_SIZE
    mode = numba.int64(bout[bo])
    width = numba.int64(bout[bo + 1])
    e = get_int(bout, bo + 2, 2)
    if e < 0:
        e += 65536
    e -= 32768
    nnz = get_int(bout, bo + 4, 4)
    if nnz < 0:
        nnz += numba.int64(1) << 32
    if mode != RAW and mode != QUANT and mode != FLOAT:
        return mode, width, e, nnz, 0, 0, E_MODE
    if width != 1 and width != 2 and width != 4 and width != 8:
        return mode, width, e, nnz, 0, 0, E_WIDTH
    if nnz > 8 * nbitmap:
        return mode, width, e, nnz, 0, 0, E_COUNT
    nf, nb = field_sizes(mode, width, nnz, ncell, ncoarse, nbitmap)
    if bo + nb > bend or fo + nf > fend:
        return mode, width, e, nnz, nf, nb, E_SIZE
    return mode, width, e, nnz, nf, nb, OK


@numba.njit
def unpack_field(fin, bin_, fo, bo, mode, width, e, w, px, py, nlev, nbitmap, cnt,
                 r0, rstep):
    """Stored coefficients of one field (mode QUANT or FLOAT) into ``w`` (dequantised);
    bitmap bytes ``r0::rstep``; ``cnt`` the exclusive prefix of the bitmap's counts.
    Returns 1 where the bitmap marks a coarse coefficient or the padding bits, else 0."""
    npos = px * py
    h = 1 << nlev
    cx = (px - 1) // h + 1
    step = pow2(e) if mode == QUANT else 0.0
    bad = 0
    fv = fo + 1 + cx * ((py - 1) // h + 1)
    bv = bo + HEADER + nbitmap
    for b in range(r0, nbitmap, rstep):
        byte = bin_[bo + HEADER + b]
        n = cnt[b]
        for q in range(8):
            p = 8 * b + q
            bit = (byte >> q) & 1
            if p >= npos:
                if bit:
                    bad = 1
                continue
            t = level_of(p, px, nlev)
            if t >= nlev:
                if bit:
                    bad = 1
                j = p // px
                i = p - j * px
                w[p] = fin[fo + 1 + (j // h) * cx + i // h]
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
def bitmap_popcounts(bin_, bo, nbitmap, cnt, r0, rstep):
    for b in range(r0, nbitmap, rstep):
        cnt[b] = popcount8(bin_[bo + HEADER + b])


@numba.njit(parallel=True, cache=True)
def decode_cpu(fin, bin_, foff, boff, out, nlev, errs):
    """Decode every patch into ``out[npatch, meqn, my, mx]``; ``errs[k] = (code, field)``
    for a patch whose data are inconsistent (its output is left undefined)."""
    npatch, meqn, my, mx = out.shape
    px, py = mx + 1, my + 1
    nbitmap = (px * py + 7) // 8
    ncell = mx * my
    h = 1 << nlev
    ncoarse = ((px - 1) // h + 1) * ((py - 1) // h + 1)
    for k in numba.prange(npatch):
        w = np.empty(px * py)
        rows = np.empty(py)
        cnt = np.empty(nbitmap, np.int64)
        fo = foff[k]
        bo = boff[k]
        fend = foff[k + 1]
        bend = boff[k + 1]
        errs[k, 0] = OK
        errs[k, 1] = 0
        for m in range(meqn):
            mode, width, e, nnz, nf, nb, err = read_header(bin_, bo, bend, fo, fend, ncell,
                                                           ncoarse, nbitmap)
            if err != OK:
                errs[k, 0] = err
                errs[k, 1] = m
                break
            T = fin[fo]
            if mode == RAW:
                for j in range(my):
                    for i in range(mx):
                        out[k, m, j, i] = fin[fo + 1 + j * mx + i]
            else:
                bitmap_popcounts(bin_, bo, nbitmap, cnt, 0, 1)
                total = 0
                for b in range(nbitmap):
                    total += cnt[b]
                if total != nnz:
                    errs[k, 0] = E_COUNT
                    errs[k, 1] = m
                    break
                exclusive_scan(cnt, nbitmap)
                if unpack_field(fin, bin_, fo, bo, mode, width, e, w, px, py, nlev, nbitmap,
                                cnt, 0, 1):
                    errs[k, 0] = E_COARSE
                    errs[k, 1] = m
                    break
                for t in range(nlev - 1, -1, -1):
                    cols_inverse(w, px, py, t, 0, 1)
                    rows_inverse(w, px, py, t, 0, 1)
                for j in range(my):
                    rows[j] = row_total(w, px, j)
                delta = (T - sum_rows(rows, my)) * (1.0 / ncell)
                correct(w, px, py, delta, 0, 1)
                for j in range(my):
                    for i in range(mx):
                        out[k, m, j, i] = w[j * px + i]
            fo += nf
            bo += nb
        if errs[k, 0] == OK and (fo != fend or bo != bend):
            errs[k, 0] = E_SIZE
            errs[k, 1] = meqn - 1
