r"""``dwt53`` on 3D blocks: the seed's 5/3 lifting on the blocks of a 3D field array, for
the in-situ store of :mod:`forestpy.solvers.lbm.insitu` (issue 35).

The data are ``x[meqn, nx, ny, nz]`` (field-major, ``z`` contiguous: the layout of the
LBM's distributions); ``(bx, by, bz)`` blocks (powers of two >= 2 dividing the extents,
default 8 x 8 x 8) are coded independently, block ``b = (bi nby + bj) nbz + bk``, every
field of a block in turn.  Per block field, exactly as the 2D codec
(:mod:`forestpy.io.codecs.dwt53`) does per patch field:

* **padding**: one sample more per axis, linearly extrapolated (along z, then y, then
  x), so the seed's lifting on ``2**J + 1`` samples with both ends kept runs unchanged;
  linear fields ``a + b i + c j + d k`` stay linear and have no details;
* **lifting**: Mallat's pyramid, at level ``t`` (spacing ``2**t``) along x, then y, then
  z on the scaling coefficients of the level before, ``levels`` levels (default
  ``log2`` of the smallest block edge) -- the 1D lifting steps are the 2D codec's
  (:func:`.dwt53_kernels.lift_forward`);
* **exact totals**: each block field's float64 total (Neumaier-compensated, by z-lines
  in ``(i, j)`` order, then over the lines) is stored, and ``(total - decoded total) /
  (bx by bz)`` is added to every decoded cell: totals survive any threshold to
  round-off, which is what keeps the LBM's mass and momentum;
* **thresholds** ``|d| < tau 2**t`` dropped (the seed's ``tau_j = tau 2**(J-j)``),
  quantisation by a power-of-two step, and the **error-bounded mode** (``tol`` per field:
  decode, check the L-infinity error against the input, halve the step up to ``tries``
  times, else store the field raw): the decoded data always respect the bound;
* **storage**: ``fdata`` (float64: total, coarse coefficients, or raw values, or unquantised
  kept details) and ``bdata`` (bytes: 8-byte header, bitmap of the kept details over the
  padded positions, quantised integers of the smallest width), ``offsets``/``boffsets``
  per block.

Every floating-point operation is an addition, a subtraction or a product by a power of
two, so the CPU drivers here (``prange`` over blocks, in parallel from
:data:`PARALLEL_MIN_BLOCKS` blocks) and the CUDA kernels of
:mod:`.dwt53_3d_gpu` (one CUDA block per block, the workspace in shared memory), which
compile the same bodies, give the same bytes.

``write_back``: the encoder also overwrites its input with the decoded values (the
same bits :func:`decode` gives), in the kernel that encodes, so a caller that must carry
on from the lossy state (the in-situ workflow: neighbours read the edges of the state
that is stored) needs no second decode.

>>> import numpy as np
>>> from forestpy.io.codecs.dwt53_3d import DWT53Blocks
>>> x = np.random.default_rng(0).random((2, 8, 8, 16))
>>> c = DWT53Blocks(tol=1e-3)
>>> enc = c.encode(x)
>>> y = c.decode(enc)
>>> bool(np.abs(y - x).max() <= 1e-3), bool(abs(y.sum() - x.sum()) < 1e-12)
(True, True)
"""

from __future__ import annotations

import math

import numpy as np

from . import dwt53_kernels as K
from .container import CodecError
from .dwt53_3d_kernels import (
    PARALLEL_MIN_BLOCKS,
    Encoded3D,
    _driver,
    analyse_cpu3,
    decode_cpu3,
    pack_cpu3,
    raise_errors,
    sizes_of3,
)

__all__ = ["DWT53Blocks", "Encoded3D", "PARALLEL_MIN_BLOCKS", "decode", "encode_cpu",
           "decode_cpu"]


def _pow2_exponent(v: float) -> int:
    return math.frexp(v)[1] - 1


class DWT53Blocks:
    """The 3D block codec (see the module docstring).

    ``tau``: the threshold of the finest details; ``tol``: an absolute L-infinity
    bound, one number or one per field (error-bounded mode); ``block``: block edges
    (powers of two >= 2); ``levels``: lifting levels (default all); ``tries``: halvings
    of the quantisation step before a field is stored raw.
    """

    def __init__(self, tau=0.0, tol=None, block=(8, 8, 8), levels=None, tries=8):
        self.tau = float(tau)
        if not (self.tau >= 0 and math.isfinite(self.tau)):
            raise CodecError(f"dwt53 3D: tau must be a finite number >= 0, got {tau!r}")
        if tol is not None:
            t = np.atleast_1d(np.asarray(tol, np.float64))
            if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t < 0):
                raise CodecError(f"dwt53 3D: tol must be numbers >= 0, got {tol!r}")
            tol = t
        self.tol = tol
        block = tuple(int(b) for b in np.atleast_1d(block))
        if len(block) == 1:
            block = block * 3
        if len(block) != 3 or any(b < 2 or b & (b - 1) for b in block):
            raise CodecError(f"dwt53 3D: block edges must be three powers of two >= 2, "
                             f"got {block}")
        self.block = block
        top = min(b.bit_length() - 1 for b in block)
        if levels is None:
            levels = top
        levels = int(levels)
        if not 0 <= levels <= top:
            raise CodecError(f"dwt53 3D: levels must be in 0..{top} for blocks {block}, "
                             f"got {levels}")
        self.nlev = levels
        self.tries = int(tries)
        if not 1 <= self.tries <= 64:
            raise CodecError(f"dwt53 3D: tries must be in 1..64, got {tries}")

    def plan(self, meqn: int):
        """``(tol[meqn], e0[meqn])`` (``tol < 0``: no bound)."""
        if self.tol is not None:
            if self.tol.size not in (1, meqn):
                raise CodecError(f"dwt53 3D: {self.tol.size} tolerances for {meqn} fields")
            tol = np.broadcast_to(self.tol, (meqn,)).astype(np.float64)
        else:
            tol = np.full(meqn, -1.0)
        e0 = np.zeros(meqn, np.int64)
        for m in range(meqn):
            if tol[m] > 0:
                e0[m] = _pow2_exponent(float(tol[m]))
            elif tol[m] == 0:
                e0[m] = -60
            elif self.tau > 0:
                e0[m] = _pow2_exponent(self.tau)
        return tol, e0

    def check_shape(self, shape):
        if len(shape) != 4:
            raise CodecError(f"dwt53 3D: data are [meqn, nx, ny, nz], got shape {shape}")
        for n, b, a in zip(shape[1:], self.block, "xyz"):
            if n % b:
                raise CodecError(f"dwt53 3D: {a} extent {n} is not a multiple of the block "
                                 f"edge {b}")

    def encode(self, x, write_back: bool = False, timings=None, device=None,
               alloc=None) -> Encoded3D:
        """Encode ``x[meqn, nx, ny, nz]`` (float32/float64; NumPy on the CPU, CuPy or a
        Numba device array on the GPU, where the streams stay on the device).
        ``write_back``: overwrite ``x`` with the decoded values.  ``device``: run the
        CUDA kernels (default: when ``x`` is not a NumPy array; ``True`` with NumPy
        arrays in the CUDA simulator).  ``alloc(nf, nb)``: where the streams go (two
        arrays of ``nf`` float64 and ``nb`` uint8, e.g. views of a ring buffer; default
        new arrays)."""
        shape = tuple(int(s) for s in x.shape)
        self.check_shape(shape)
        dtype = np.dtype(x.dtype)
        if dtype not in (np.float32, np.float64):
            raise CodecError(f"dwt53 3D: float32 or float64 data, not {dtype}")
        meqn = shape[0]
        tol, e0 = self.plan(meqn)
        if device is None:
            device = not isinstance(x, np.ndarray)
        if device:
            from . import dwt53_3d_gpu

            return dwt53_3d_gpu.encode(self, x, tol, e0, write_back, timings, alloc)
        if write_back and not x.flags.writeable:
            raise CodecError("dwt53 3D: write_back needs a writeable array")
        nblock = int(np.prod([n // b for n, b in zip(shape[1:], self.block)]))
        bx, by, bz = self.block
        npos = (bx + 1) * (by + 1) * (bz + 1)
        coef = np.empty((nblock, meqn, npos))
        meta = np.empty((nblock, meqn, 4), np.int64)
        total = np.empty((nblock, meqn))
        _driver(analyse_cpu3, nblock)(x, coef, meta, total, bx, by, bz, self.nlev, self.tau, e0,
                     self.tries, tol, bool(write_back))
        nf, nb = sizes_of3(meta, self.block, self.nlev)
        foff = K.offsets(nf).astype(np.int64)
        boff = K.offsets(nb).astype(np.int64)
        if alloc is None:
            fdata = np.empty(int(foff[-1]))
            bdata = np.empty(int(boff[-1]), np.uint8)
        else:
            fdata, bdata = alloc(int(foff[-1]), int(boff[-1]))
        _driver(pack_cpu3, nblock)(coef, meta, total, foff, boff, fdata, bdata, bx, by, bz,
                                   self.nlev)
        return Encoded3D(fdata, bdata, foff, boff, shape, dtype, self.block, self.nlev,
                         meta[..., 0].copy())

    def decode(self, enc: Encoded3D, out=None, timings=None, device=None):
        """Decode into ``out`` (an array of ``enc.shape``; default a new NumPy array of
        ``enc.dtype``, or on the device when the streams are device arrays)."""
        return decode(enc, out, timings, device)


def decode(enc: Encoded3D, out=None, timings=None, device=None):
    """See :meth:`DWT53Blocks.decode`; inconsistent data raise :class:`CodecError`.
    ``device``: run the CUDA kernel (default: when the streams are not NumPy arrays)."""
    if device is None:
        device = not isinstance(enc.fdata, np.ndarray)
    if device:
        from . import dwt53_3d_gpu

        return dwt53_3d_gpu.decode(enc, out, timings)
    if out is None:
        out = np.empty(enc.shape, enc.dtype)
    if tuple(out.shape) != tuple(enc.shape):
        raise CodecError(f"dwt53 3D: output of shape {out.shape}, the data are {enc.shape}")
    nblock = enc.foff.size - 1
    errs = np.zeros((nblock, 2), np.int64)
    bx, by, bz = enc.block
    _driver(decode_cpu3, nblock)(enc.fdata, enc.bdata, enc.foff, enc.boff, out, bx, by, bz,
                                 enc.nlev, errs)
    raise_errors(errs)
    return out


def encode_cpu(x, **kw) -> Encoded3D:
    """``DWT53Blocks(**kw).encode(x)``."""
    return DWT53Blocks(**kw).encode(x)


def decode_cpu(enc: Encoded3D, out=None):
    return decode(enc, out)
