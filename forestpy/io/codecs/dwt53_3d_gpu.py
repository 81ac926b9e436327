"""The 3D block codec (:mod:`.dwt53_3d`) on the GPU: one CUDA block per data block, its
padded samples in shared memory, the bodies of :mod:`.dwt53_3d_kernels` compiled by
:func:`forestpy.cuda_device.cuda_device` (the CPU's bytes).

Encoding: ``analyse`` (load and pad by z-lines, line totals, lifting level by level and
axis by axis with threads over lines, quantisation with shared-memory atomics for the
count and the largest integer, the error-bounded decode-and-check loop, the optional
write-back of the decoded values), the per-block sizes and their prefix sums (host, from
the 32 bytes of ``meta`` per block field), then ``pack`` (bitmap counts, a scan, the
bitmap and values).  The streams stay in device memory.  Decoding: one kernel.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float64, int64

from forestpy.backend import cuda_simulator_enabled
from forestpy.cuda_device import cuda_device

from . import dwt53_3d_kernels as D
from . import dwt53_kernels as K

__all__ = ["encode", "decode"]

SIM = cuda_simulator_enabled()

_load = cuda_device(D.load_lines)
_pady = cuda_device(D.pad_y)
_padx = cuda_device(D.pad_x)
_ltot = cuda_device(D.line_totals)
_sumr = cuda_device(K.sum_rows)
_fwd = cuda_device(D.lines_forward)
_inv = cuda_device(D.lines_inverse)
_level = cuda_device(D.level_of3)
_quant = cuda_device(K.quantise)
_dequant = cuda_device(K.dequantise)
_pow2 = cuda_device(K.pow2)
_width = cuda_device(K.width_for)
_lerr = cuda_device(D.line_error)
_adddelta = cuda_device(D.add_delta)
_store = cuda_device(D.store_lines)
_origin = cuda_device(D.block_origin)
_counts = cuda_device(D.count_bits)
_scan = cuda_device(K.exclusive_scan)
_pack = cuda_device(D.pack_field3)
_sizes = cuda_device(D.field_sizes3)
_header = cuda_device(D.read_header3)
_popc = cuda_device(D.popcounts3)
_unpack = cuda_device(D.unpack_field3)

_KERNELS: dict = {}


def threads_per_block(block) -> int:
    """Threads of a CUDA block: about one per z-line of the block, a warp multiple, at
    most 128; 16 in the simulator."""
    if SIM:
        return 16
    bx, by, bz = block
    return min(128, max(32, 32 * -(-((bx + 1) * (by + 1)) // 32)))


def _kernels(block, nlev):
    key = (tuple(block), nlev)
    if key in _KERNELS:
        return _KERNELS[key]
    bx, by, bz = block
    px, py, pz = bx + 1, by + 1, bz + 1
    NPOS = px * py * pz
    NLINE = bx * by
    NBM = (NPOS + 7) // 8
    NCELL = bx * by * bz
    h = 1 << nlev
    NCOARSE = (bx // h + 1) * (by // h + 1) * (bz // h + 1)
    RAW, QUANT, FLOAT, QMAX = K.RAW, K.QUANT, K.FLOAT, K.QMAX

    @cuda.jit
    def analyse(x, coef, meta, total, tau, e0, tries, tol, write_back):
        b = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        w = cuda.shared.array(NPOS, float64)
        w2 = cuda.shared.array(NPOS, float64)
        rows = cuda.shared.array(NLINE, float64)
        red = cuda.shared.array(2, float64)
        ired = cuda.shared.array(2, int64)
        nby = x.shape[2] // by
        nbz = x.shape[3] // bz
        i0, j0, k0 = _origin(b, nby, nbz, bx, by, bz)
        for m in range(x.shape[0]):
            if tid == 0:
                ired[0] = 0
            _load(w, x, m, i0, j0, k0, px, py, pz, tid, nt)
            cuda.syncthreads()
            _pady(w, px, py, pz, tid, nt)
            cuda.syncthreads()
            _padx(w, px, py, pz, tid, nt)
            _ltot(w, rows, px, py, pz, tid, nt)
            cuda.syncthreads()
            T = _sumr(rows, NLINE)
            for p in range(tid, NPOS, nt):
                v = w[p]
                if not (v - v == 0.0):
                    ired[0] = 1
            cuda.syncthreads()
            finite = ired[0] == 0
            tolm = tol[m]
            mode = RAW
            e = e0[m]
            nnz = 0
            qmax = 0.0
            written = False
            step = 0.0
            if finite:
                for t in range(nlev):
                    for ax in range(3):
                        _fwd(w, px, py, pz, t, ax, tid, nt)
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
                        t = _level(p, py, pz, nlev)
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
                        w2[p] = _dequant(w2[p], _level(p, py, pz, nlev), nlev, step)
                    cuda.syncthreads()
                    for t in range(nlev - 1, -1, -1):
                        for ax in range(2, -1, -1):
                            _inv(w2, px, py, pz, t, ax, tid, nt)
                            cuda.syncthreads()
                    _ltot(w2, rows, px, py, pz, tid, nt)
                    cuda.syncthreads()
                    delta = (T - _sumr(rows, NLINE)) * (1.0 / NCELL)
                    err = _lerr(w2, x, m, i0, j0, k0, px, py, pz, delta, tid, nt)
                    cuda.atomic.max(red, 1, err)
                    cuda.syncthreads()
                    if red[1] <= tolm:
                        mode = QUANT
                        if write_back:
                            _adddelta(w2, px, py, pz, delta, tid, nt)
                            _store(w2, x, m, i0, j0, k0, px, py, pz, tid, nt)
                            written = True
                        cuda.syncthreads()
                        for p in range(tid, NPOS, nt):
                            w2[p] = _quant(w[p], _level(p, py, pz, nlev), nlev, tau, inv)
                        cuda.syncthreads()
                        break
                    e -= 1
                    cuda.syncthreads()
            if mode == RAW:
                for r in range(tid, NLINE, nt):
                    i = r // by
                    j = r - i * by
                    for k in range(bz):
                        coef[b, m, (i * py + j) * pz + k] = x[m, i0 + i, j0 + j, k0 + k]
            else:
                for p in range(tid, NPOS, nt):
                    coef[b, m, p] = w2[p]
            if tid == 0:
                total[b, m] = T
                meta[b, m, 0] = mode
                meta[b, m, 1] = 8 if mode != QUANT else _width(qmax)
                meta[b, m, 2] = e if mode == QUANT else 0
                meta[b, m, 3] = nnz if mode != RAW else 0
            cuda.syncthreads()
            if write_back and mode != RAW and not written:
                for p in range(tid, NPOS, nt):
                    w2[p] = _dequant(w2[p], _level(p, py, pz, nlev), nlev, step)
                cuda.syncthreads()
                for t in range(nlev - 1, -1, -1):
                    for ax in range(2, -1, -1):
                        _inv(w2, px, py, pz, t, ax, tid, nt)
                        cuda.syncthreads()
                _ltot(w2, rows, px, py, pz, tid, nt)
                cuda.syncthreads()
                delta = (T - _sumr(rows, NLINE)) * (1.0 / NCELL)
                _adddelta(w2, px, py, pz, delta, tid, nt)
                _store(w2, x, m, i0, j0, k0, px, py, pz, tid, nt)
            cuda.syncthreads()

    @cuda.jit
    def pack(coef, meta, total, foff, boff, fout, bout):
        b = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        cnt = cuda.shared.array(NBM, int64)
        fo = foff[b]
        bo = boff[b]
        for m in range(meta.shape[1]):
            _counts(coef, b, m, py, pz, nlev, NBM, NPOS, cnt, tid, nt)
            cuda.syncthreads()
            if tid == 0:
                _scan(cnt, NBM)
            cuda.syncthreads()
            _pack(coef, meta, total, b, m, fout, bout, fo, bo, px, py, pz, nlev, NBM, tid,
                  nt, cnt)
            cuda.syncthreads()
            nf, nb = _sizes(meta[b, m, 0], meta[b, m, 1], meta[b, m, 3], NCELL, NCOARSE,
                            NBM)
            fo += nf
            bo += nb

    @cuda.jit
    def unpack(fin, bin_, foff, boff, out, errs):
        b = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        w = cuda.shared.array(NPOS, float64)
        rows = cuda.shared.array(NLINE, float64)
        cnt = cuda.shared.array(NBM, int64)
        ired = cuda.shared.array(2, int64)
        nby = out.shape[2] // by
        nbz = out.shape[3] // bz
        i0, j0, k0 = _origin(b, nby, nbz, bx, by, bz)
        fo = foff[b]
        bo = boff[b]
        fend = foff[b + 1]
        bend = boff[b + 1]
        code = 0
        field = 0
        for m in range(out.shape[0]):
            mode, width, e, nnz, nf, nb, err = _header(bin_, bo, bend, fo, fend, NCELL,
                                                       NCOARSE, NBM)
            if err != 0:
                code = err
                field = m
                break
            T = fin[fo]
            if mode == RAW:
                for r in range(tid, NLINE, nt):
                    i = r // by
                    j = r - i * by
                    for k in range(bz):
                        out[m, i0 + i, j0 + j, k0 + k] = fin[fo + 1 + r * bz + k]
            else:
                _popc(bin_, bo, NBM, cnt, nnz > 0, tid, nt)
                if tid == 0:
                    ired[1] = 0
                cuda.syncthreads()
                if tid == 0:
                    s = 0
                    for q8 in range(NBM):
                        s += cnt[q8]
                    ired[0] = s
                    _scan(cnt, NBM)
                cuda.syncthreads()
                if ired[0] != nnz:
                    code = K.E_COUNT
                    field = m
                    break
                bad = _unpack(fin, bin_, fo, bo, mode, width, e, w, px, py, pz, nlev, NBM,
                              cnt, nnz > 0, tid, nt)
                if bad:
                    ired[1] = 1
                cuda.syncthreads()
                if ired[1] != 0:
                    code = K.E_COARSE
                    field = m
                    break
                for t in range(nlev - 1, -1, -1):
                    for ax in range(2, -1, -1):
                        _inv(w, px, py, pz, t, ax, tid, nt)
                        cuda.syncthreads()
                _ltot(w, rows, px, py, pz, tid, nt)
                cuda.syncthreads()
                delta = (T - _sumr(rows, NLINE)) * (1.0 / NCELL)
                _adddelta(w, px, py, pz, delta, tid, nt)
                _store(w, out, m, i0, j0, k0, px, py, pz, tid, nt)
            cuda.syncthreads()
            fo += nf
            bo += nb
        if code == 0 and (fo != fend or bo != bend):
            code = K.E_SIZE
            field = out.shape[0] - 1
        if tid == 0:
            errs[b, 0] = code
            errs[b, 1] = field

    _KERNELS[key] = (analyse, pack, unpack)
    return _KERNELS[key]


def _mark(timings):
    if timings is None or SIM:
        return None
    ev = cuda.event()
    ev.record()
    return ev


def _elapsed(timings, key, a, b):
    if a is not None and b is not None:
        b.synchronize()
        timings[key] = timings.get(key, 0.0) + a.elapsed_time(b) / 1e3


def _arg(a):
    """A kernel argument: in the simulator a NumPy array (a strided view of the LBM's
    work buffer) is wrapped as it is, so the kernel writes through to it."""
    if SIM and isinstance(a, np.ndarray):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(a)
    return a


def encode(codec, x, tol, e0, write_back, timings=None, alloc=None):
    """Encode the device array ``x`` with ``codec`` (:class:`.dwt53_3d.DWT53Blocks`);
    the streams stay on the device (Numba device arrays)."""
    shape = tuple(int(s) for s in x.shape)
    meqn = shape[0]
    bx, by, bz = codec.block
    nblock = (shape[1] // bx) * (shape[2] // by) * (shape[3] // bz)
    analyse, pack, _ = _kernels(codec.block, codec.nlev)
    npos = (bx + 1) * (by + 1) * (bz + 1)
    coef = cuda.device_array((nblock, meqn, npos), np.float64)
    meta = cuda.device_array((nblock, meqn, 4), np.int64)
    total = cuda.device_array((nblock, meqn), np.float64)
    tpb = threads_per_block(codec.block)
    d_e0 = cuda.to_device(np.asarray(e0, np.int64))
    d_tol = cuda.to_device(np.asarray(tol, np.float64))
    t0 = _mark(timings)
    analyse[nblock, tpb](_arg(x), coef, meta, total, float(codec.tau), d_e0, int(codec.tries),
                         d_tol, bool(write_back))
    h_meta = meta.copy_to_host()
    nf, nb = D.sizes_of3(h_meta, codec.block, codec.nlev)
    foff = K.offsets(nf).astype(np.int64)
    boff = K.offsets(nb).astype(np.int64)
    nf, nb = int(foff[-1]), int(boff[-1])
    if alloc is None:
        fout = cuda.device_array(max(nf, 1), np.float64)
        bout = cuda.device_array(max(nb, 1), np.uint8)
    else:
        fout, bout = alloc(nf, nb)
    if nf and nb:
        pack[nblock, tpb](coef, meta, total, cuda.to_device(foff), cuda.to_device(boff),
                          _arg(fout), _arg(bout))
    _elapsed(timings, "encode_s", t0, _mark(timings))
    return D.Encoded3D(fout[:nf], bout[:nb], foff, boff, shape,
                       np.dtype(x.dtype), codec.block, codec.nlev, h_meta[..., 0].copy())


def decode(enc, out=None, timings=None):
    """Decode device streams into ``out`` (a device array; default a new one)."""
    bx, by, bz = enc.block
    nblock = enc.foff.size - 1
    _, _, unpack = _kernels(enc.block, enc.nlev)
    if out is None:
        out = cuda.device_array(enc.shape, enc.dtype)
    if tuple(out.shape) != tuple(enc.shape):
        from .container import CodecError

        raise CodecError(f"dwt53 3D: output of shape {out.shape}, the data are {enc.shape}")
    errs = cuda.device_array((nblock, 2), np.int64)
    if not (enc.fdata.shape[0] and enc.bdata.shape[0]):
        D.raise_errors(np.array([[K.E_SIZE, 0]] * max(nblock, 1)))
    fin, bin_ = _arg(enc.fdata), _arg(enc.bdata)
    t0 = _mark(timings)
    unpack[nblock, threads_per_block(enc.block)](fin, bin_, cuda.to_device(enc.foff),
                                                 cuda.to_device(enc.boff), _arg(out), errs)
    _elapsed(timings, "decode_s", t0, _mark(timings))
    D.raise_errors(errs.copy_to_host())
    return out


def to_host(enc):
    """A copy of ``enc`` with its streams on the host (for comparing bytes)."""
    import dataclasses

    def h(a):
        return a if isinstance(a, np.ndarray) else a.copy_to_host()

    return dataclasses.replace(enc, fdata=h(enc.fdata), bdata=h(enc.bdata))
