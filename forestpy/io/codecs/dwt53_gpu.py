"""``dwt53`` on the GPU: one CUDA block per patch, the patch field's padded samples in
shared memory, the bodies of :mod:`.dwt53_kernels` compiled for the device by
:func:`forestpy.cuda_device.cuda_device` (so the bytes are the CPU's).

Encoding is two kernels and a prefix sum:

* ``analyse`` (a block per patch): load and pad each field (threads over rows), the row
  totals (a thread per row) and the field total, the lifting levels (threads over rows,
  then over columns, ``syncthreads`` between), quantisation (threads over positions;
  counts and maxima by shared-memory atomics, whose results do not depend on the
  order), and in the error-bounded mode the decode-and-check loop; it writes the stored
  values to a scratch array ``coef`` and ``(mode, width, exponent, count)`` to ``meta``;
* the per-patch sizes (CuPy, vectorised) and their prefix sums: the patch offsets;
* ``pack`` (a block per patch): per field the bitmap's counts (threads over bitmap
  bytes), an exclusive scan of the counts (one thread, at most 137 bytes for 32 x 32
  patches), then each thread writes its bitmap bytes and their values.

Decoding is one kernel: header checks, bitmap counts and scan, scatter of the values,
inverse lifting, total correction.  Only ``fdata``, ``bdata`` and the offsets cross to
the host after encoding.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float64, int64

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import cuda_device

from . import dwt53_kernels as K

__all__ = ["encode", "decode"]

SIM = cuda_simulator_enabled()


def threads_per_block(px: int, py: int) -> int:
    """Threads of a block: one per row of the padded patch (the lifting passes run a
    line per thread), rounded up to a warp; 16 in the simulator (Python threads)."""
    if SIM:
        return 16
    return min(128, max(32, 32 * -(-max(px, py) // 32)))


_lf = cuda_device(K.rows_forward)
_cf = cuda_device(K.cols_forward)
_li = cuda_device(K.rows_inverse)
_ci = cuda_device(K.cols_inverse)
_load = cuda_device(K.load_padded)
_padrow = cuda_device(K.pad_last_row)
_rowt = cuda_device(K.row_total)
_sumr = cuda_device(K.sum_rows)
_level = cuda_device(K.level_of)
_quant = cuda_device(K.quantise)
_dequant = cuda_device(K.dequantise)
_pow2 = cuda_device(K.pow2)
_width = cuda_device(K.width_for)
_counts = cuda_device(K.bitmap_counts)
_scan = cuda_device(K.exclusive_scan)
_pack = cuda_device(K.pack_field)
_sizes = cuda_device(K.field_sizes)
_header = cuda_device(K.read_header)
_popc = cuda_device(K.bitmap_popcounts)
_unpack = cuda_device(K.unpack_field)
_correct = cuda_device(K.correct)

_KERNELS: dict = {}


def _kernels(my: int, mx: int, nlev: int):
    key = (my, mx, nlev)
    if key in _KERNELS:
        return _KERNELS[key]
    px, py = mx + 1, my + 1
    NPOS = px * py
    NROW = py
    NBM = (NPOS + 7) // 8
    NCELL = mx * my
    h = 1 << nlev
    NCOARSE = ((px - 1) // h + 1) * ((py - 1) // h + 1)
    RAW, QUANT, FLOAT, QMAX = K.RAW, K.QUANT, K.FLOAT, K.QMAX

    @cuda.jit
    def analyse(x, coef, meta, total, tau, e0, tries, tol, raw):
        k = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        w = cuda.shared.array(NPOS, float64)
        w2 = cuda.shared.array(NPOS, float64)
        rows = cuda.shared.array(NROW, float64)
        red = cuda.shared.array(2, float64)
        ired = cuda.shared.array(2, int64)
        for m in range(x.shape[1]):
            _load(w, x, k, m, px, py, tid, nt)
            if tid == 0:
                ired[0] = 0
            cuda.syncthreads()
            _padrow(w, px, py, tid, nt)
            for j in range(tid, py - 1, nt):
                rows[j] = _rowt(w, px, j)
            cuda.syncthreads()
            T = _sumr(rows, py - 1)
            for p in range(tid, NPOS, nt):
                v = w[p]
                if not (v - v == 0.0):  # inf or nan
                    ired[0] = 1
            cuda.syncthreads()
            finite = ired[0] == 0 and raw[k, m] == 0
            tolm = tol[m]
            mode = RAW
            e = e0[m]
            nnz = 0
            qmax = 0.0
            if finite:
                for t in range(nlev):
                    _lf(w, px, py, t, tid, nt)
                    cuda.syncthreads()
                    _cf(w, px, py, t, tid, nt)
                    cuda.syncthreads()
                ntry = tries if (tolm >= 0.0 or tau > 0.0) else 1
                for _attempt in range(ntry):
                    step = _pow2(e) if (tolm >= 0.0 or tau > 0.0) else 0.0
                    inv = 1.0 / step if step > 0.0 else 0.0
                    if tid == 0:
                        ired[1] = 0
                        red[0] = 0.0
                        red[1] = 0.0
                    cuda.syncthreads()
                    n_loc = 0
                    q_loc = 0.0
                    for p in range(tid, NPOS, nt):
                        t = _level(p, px, nlev)
                        v = _quant(w[p], t, nlev, tau, inv)
                        w2[p] = v
                        if t < nlev and v != 0.0:
                            n_loc += 1
                            if abs(v) > q_loc:
                                q_loc = abs(v)
                    cuda.atomic.add(ired, 1, n_loc)
                    cuda.atomic.max(red, 0, q_loc)
                    cuda.syncthreads()
                    nnz = ired[1]
                    qmax = red[0]
                    if step > 0.0 and not qmax < QMAX:
                        break
                    if tolm < 0.0:
                        mode = QUANT if step > 0.0 else FLOAT
                        break
                    for p in range(tid, NPOS, nt):
                        w2[p] = _dequant(w2[p], _level(p, px, nlev), nlev, step)
                    cuda.syncthreads()
                    for t in range(nlev - 1, -1, -1):
                        _ci(w2, px, py, t, tid, nt)
                        cuda.syncthreads()
                        _li(w2, px, py, t, tid, nt)
                        cuda.syncthreads()
                    for j in range(tid, py - 1, nt):
                        rows[j] = _rowt(w2, px, j)
                    cuda.syncthreads()
                    delta = (T - _sumr(rows, py - 1)) * (1.0 / NCELL)
                    err = 0.0
                    for j in range(tid, py - 1, nt):
                        for i in range(px - 1):
                            d = abs(w2[j * px + i] + delta - x[k, m, j, i])
                            if not d <= err:
                                err = d
                    cuda.atomic.max(red, 1, err)
                    cuda.syncthreads()
                    if red[1] <= tolm:
                        mode = QUANT
                        for p in range(tid, NPOS, nt):
                            w2[p] = _quant(w[p], _level(p, px, nlev), nlev, tau, inv)
                        cuda.syncthreads()
                        break
                    e -= 1
                    cuda.syncthreads()
            if mode == RAW:
                for j in range(tid, py - 1, nt):
                    for i in range(px - 1):
                        coef[k, m, j * px + i] = x[k, m, j, i]
            else:
                for p in range(tid, NPOS, nt):
                    coef[k, m, p] = w2[p]
            if tid == 0:
                total[k, m] = T
                meta[k, m, 0] = mode
                meta[k, m, 1] = 8 if mode != QUANT else _width(qmax)
                meta[k, m, 2] = e if mode == QUANT else 0
                meta[k, m, 3] = nnz if mode != RAW else 0
            cuda.syncthreads()

    @cuda.jit
    def pack(coef, meta, total, foff, boff, fout, bout):
        k = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        cnt = cuda.shared.array(NBM, int64)
        fo = foff[k]
        bo = boff[k]
        for m in range(meta.shape[1]):
            _counts(coef, k, m, px, py, nlev, NBM, cnt, tid, nt)
            cuda.syncthreads()
            if tid == 0:
                _scan(cnt, NBM)
            cuda.syncthreads()
            _pack(coef, meta, total, k, m, fout, bout, fo, bo, px, py, nlev, NBM, tid, nt,
                  cnt)
            cuda.syncthreads()
            nf, nb = _sizes(meta[k, m, 0], meta[k, m, 1], meta[k, m, 3], NCELL, NCOARSE,
                            NBM)
            fo += nf
            bo += nb

    @cuda.jit
    def unpack(fin, bin_, foff, boff, out, errs):
        k = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        w = cuda.shared.array(NPOS, float64)
        rows = cuda.shared.array(NROW, float64)
        cnt = cuda.shared.array(NBM, int64)
        ired = cuda.shared.array(2, int64)
        fo = foff[k]
        bo = boff[k]
        fend = foff[k + 1]
        bend = boff[k + 1]
        code = 0
        field = 0
        for m in range(out.shape[1]):
            mode, width, e, nnz, nf, nb, err = _header(bin_, bo, bend, fo, fend, NCELL,
                                                       NCOARSE, NBM)
            if err != 0:
                code = err
                field = m
                break
            T = fin[fo]
            if mode == RAW:
                for j in range(tid, my, nt):
                    for i in range(mx):
                        out[k, m, j, i] = fin[fo + 1 + j * mx + i]
            else:
                _popc(bin_, bo, NBM, cnt, tid, nt)
                if tid == 0:
                    ired[1] = 0
                cuda.syncthreads()
                if tid == 0:
                    s = 0
                    for b in range(NBM):
                        s += cnt[b]
                    ired[0] = s
                    _scan(cnt, NBM)
                cuda.syncthreads()
                if ired[0] != nnz:
                    code = K.E_COUNT
                    field = m
                    break
                bad = _unpack(fin, bin_, fo, bo, mode, width, e, w, px, py, nlev, NBM, cnt,
                              tid, nt)
                if bad:
                    ired[1] = 1
                cuda.syncthreads()
                if ired[1] != 0:
                    code = K.E_COARSE
                    field = m
                    break
                for t in range(nlev - 1, -1, -1):
                    _ci(w, px, py, t, tid, nt)
                    cuda.syncthreads()
                    _li(w, px, py, t, tid, nt)
                    cuda.syncthreads()
                for j in range(tid, my, nt):
                    rows[j] = _rowt(w, px, j)
                cuda.syncthreads()
                delta = (T - _sumr(rows, my)) * (1.0 / NCELL)
                _correct(w, px, py, delta, tid, nt)
                for j in range(tid, my, nt):
                    for i in range(mx):
                        out[k, m, j, i] = w[j * px + i]
            cuda.syncthreads()
            fo += nf
            bo += nb
        if code == 0 and (fo != fend or bo != bend):
            code = K.E_SIZE
            field = out.shape[1] - 1
        if tid == 0:
            errs[k, 0] = code
            errs[k, 1] = field

    _KERNELS[key] = (analyse, pack, unpack)
    return _KERNELS[key]


def _raw_mask(raw, npatch, meqn):
    if raw is None:
        return np.zeros((npatch, meqn), np.uint8)
    return np.ascontiguousarray(np.broadcast_to(np.asarray(raw, bool), (npatch, meqn)),
                                dtype=np.uint8)


def _on_device(a):
    """``a`` as something a Numba kernel takes: a CuPy array as it is (CUDA array
    interface), a host array copied to the device."""
    if not isinstance(a, np.ndarray):
        return a
    return cuda.to_device(np.ascontiguousarray(a))


def _mark(timings):
    """A recorded CUDA event where kernel times are asked for (None in the simulator)."""
    if timings is None or SIM:
        return None
    ev = cuda.event()
    ev.record()
    return ev


def _elapsed(timings, key, a, b):
    if a is not None and b is not None:
        b.synchronize()
        timings[key] = timings.get(key, 0.0) + a.elapsed_time(b) / 1e3


def encode(x, nlev: int, tau: float, e0, tries: int, tol, raw=None, timings=None):
    """Encode the batch ``x`` (CuPy, a Numba device array or, in the simulator, NumPy:
    float64) on the device; returns the host arrays ``(fdata, bdata, offsets,
    boffsets)``, the same bytes as the CPU encoder (``raw``: host ``uint8[npatch, meqn]``,
    non-zero where a field is stored as it is).  A dict ``timings`` receives the kernel
    seconds (CUDA events) under ``"analyse_s"`` and ``"pack_s"`` (not in the
    simulator).  Only the per-patch sizes (``meta``, 32 bytes per patch field) and the
    compressed streams cross to the host."""
    npatch, meqn, my, mx = x.shape
    analyse, pack, _ = _kernels(my, mx, nlev)
    d_x = _on_device(x)
    coef = cuda.device_array((npatch, meqn, (mx + 1) * (my + 1)), np.float64)
    meta = cuda.device_array((npatch, meqn, 4), np.int64)
    total = cuda.device_array((npatch, meqn), np.float64)
    tpb = threads_per_block(mx + 1, my + 1)
    d_e0 = cuda.to_device(np.asarray(e0, np.int64))
    d_tol = cuda.to_device(np.asarray(tol, np.float64))
    d_raw = cuda.to_device(_raw_mask(raw, npatch, meqn))
    if npatch:
        t0 = _mark(timings)
        analyse[npatch, tpb](d_x, coef, meta, total, float(tau), d_e0, int(tries), d_tol,
                             d_raw)
        _elapsed(timings, "analyse_s", t0, _mark(timings))
    h_meta = meta.copy_to_host()
    nf, nb = K.sizes_of(h_meta, my, mx, nlev)
    foff, boff = K.offsets(nf), K.offsets(nb)
    fout = cuda.device_array(max(int(foff[-1]), 1), np.float64)
    bout = cuda.device_array(max(int(boff[-1]), 1), np.uint8)
    d_foff = cuda.to_device(foff.astype(np.int64))
    d_boff = cuda.to_device(boff.astype(np.int64))
    if npatch:
        t0 = _mark(timings)
        pack[npatch, tpb](coef, meta, total, d_foff, d_boff, fout, bout)
        _elapsed(timings, "pack_s", t0, _mark(timings))
    return (fout.copy_to_host()[:int(foff[-1])], bout.copy_to_host()[:int(boff[-1])],
            foff, boff)


def decode(fdata, bdata, foff, boff, shape, nlev: int, timings=None):
    """Decode on the device: ``(batch, host error array)``; the batch is a CuPy array
    where CuPy is installed and not in the simulator, else a Numba device array's host
    copy (the simulator).  ``timings`` receives ``"unpack_s"`` (kernel seconds)."""
    npatch, meqn, my, mx = shape
    _, _, unpack = _kernels(my, mx, nlev)
    out = cuda.device_array(shape, np.float64)
    errs = cuda.to_device(np.zeros((npatch, 2), np.int64))
    d_f = cuda.to_device(np.append(fdata, 0.0))
    d_b = cuda.to_device(np.append(bdata, np.uint8(0)))
    d_fo = cuda.to_device(foff.astype(np.int64))
    d_bo = cuda.to_device(boff.astype(np.int64))
    if npatch:
        t0 = _mark(timings)
        unpack[npatch, threads_per_block(mx + 1, my + 1)](d_f, d_b, d_fo, d_bo, out, errs)
        _elapsed(timings, "unpack_s", t0, _mark(timings))
    if SIM:
        return out.copy_to_host(), errs.copy_to_host()
    import cupy

    return cupy.asarray(out), errs.copy_to_host()
