"""``dwt53``: the seed's mass-conserving 5/3 lifting wavelets on each patch, sparse and
quantised storage, exact float64 totals restored after decoding.

Seed 003 (Flint, Huppé, Helluy, Bramas, Genaud, Int. J. Numer. Meth. Fluids 2024,
section 3) transforms ``2**J + 1`` point samples with both boundary samples kept at
every scale and update weights 1/4 (1/2 next to the ends), so that the trapezoidal mass
is the same at every scale and thresholding details never changes it.

**Cell averages.**  A patch holds ``my x mx`` cell averages (``mx``, ``my`` powers of
two), not ``2**J + 1`` samples.  The codec pads each field with one column and one row,
linearly extrapolated (``x[:, mx] = 2 x[:, mx-1] - x[:, mx-2]``, then the same along
y), and runs the seed's lifting unchanged on the ``(my+1) x (mx+1)`` samples, as
Mallat's pyramid (at each level x then y, on the scaling coefficients of the level
before) down to ``levels`` levels (default ``log2(min(mx, my))``: 2 x 2 coarse
coefficients).  Decoding inverts the lifting and drops the padding.  Then:

* a linear field ``a + b i + c j`` stays linear after padding, its details vanish and
  it decodes exactly whatever the threshold (to the last bit when the arithmetic is
  exact, e.g. integer or dyadic values; otherwise to a few ulps);
* the last odd sample of every row and column has a zero detail at the finest level
  (the padding is its linear prediction), so padding costs no stored detail there;
* the seed's trapezoid identity is for point samples: the sum of the cells is another
  quadrature, so the codec stores each patch field's exact total (Neumaier-compensated
  float64 sum, rows then columns) and adds ``(total - decoded total) / (mx my)`` to every
  decoded cell.  Totals survive any threshold to round-off (relative 1e-16 of the sum
  of magnitudes); constant fields (a lake at rest in the surface elevation) decode to
  the same bits because their details are exactly zero and the correction is exactly 0.

**Thresholds and quantisation.**  A detail made at level ``t`` (``t = 0`` finest) is
dropped when ``|d| < tau * 2**t`` (the seed's ``tau_j = tau 2**(J-j)``), else stored as
the integer ``floor(d / s + 1/2)`` with the step ``s = 2**e`` (a power of two, so that
quantising is exact and CPU and GPU agree to the bit).  With ``tau`` alone,
``s = 2**floor(log2 tau)``; with ``tau = 0`` and no bound the kept details are stored as
float64 (lossless up to the lifting's round-off).

**Error-bounded mode** (``tol``, one absolute L-infinity bound per field, or ``rtol``
times each field's range in the batch): the encoder starts from
``s = 2**floor(log2 tol)``, decodes the field (inverse lifting and total correction, the
decoder's own code) and compares it with the input; a field that misses the bound is
quantised again with half the step, up to ``tries`` times (default 8), and stored raw
(float64, exact) when it still misses.  The decoded data therefore always respect the
bound (checked, not estimated).

**Storage** (two sections: ``fdata`` float64 and ``bdata`` bytes; ``offsets`` and
``boffsets`` index them per patch, ``crc`` holds each patch's CRC-32).  Per patch field:
in ``fdata`` the exact total, then the coarse coefficients (or the ``my mx`` raw values,
or, for unquantised details, the kept ones); in ``bdata`` an 8-byte header (mode, value
width, step exponent, number of kept details), a bitmap of the kept details over the
``(my+1)(mx+1)`` positions and the quantised integers, little-endian two's complement of
the smallest width (1, 2, 4 or 8 bytes) that holds them all.

On a CuPy batch the encoder and decoder run as Numba-CUDA kernels, one block per patch
with the workspace in shared memory (:mod:`.dwt53_gpu`), and give the same bytes as the
CPU (:mod:`.dwt53_kernels`, ``prange`` over patches).
"""

from __future__ import annotations

import math

import numpy as np

from . import dwt53_kernels as K
from .basic import _number, no_more
from .container import CodecError, check_index

__all__ = ["DWT53"]


def _pow2_exponent(v: float) -> int:
    """``floor(log2 v)`` for ``v > 0``, exactly (frexp)."""
    m, e = math.frexp(v)
    return e - 1


def _log2_exact(n: int) -> int:
    return n.bit_length() - 1


def _patch_crcs(fdata, bdata, foff, boff) -> np.ndarray:
    import zlib

    fr = memoryview(np.ascontiguousarray(fdata)).cast("B")
    br = memoryview(np.ascontiguousarray(bdata)).cast("B")
    out = np.empty(foff.size - 1, np.uint32)
    for k in range(out.size):
        c = zlib.crc32(fr[int(foff[k]) * 8:int(foff[k + 1]) * 8])
        out[k] = zlib.crc32(br[int(boff[k]):int(boff[k + 1])], c) & 0xFFFFFFFF
    return out


class DWT53:
    """The 5/3 lifting codec; parameters ``tau``, ``tol`` or ``rtol``, ``levels``,
    ``tries`` (see the module docstring)."""

    name = "dwt53"
    version = 1

    def __init__(self, **params):
        self.tau = _number(params, "tau", 0.0, 0.0)
        tol = params.pop("tol", None)
        if tol is not None:
            items = tol.split("/") if isinstance(tol, str) else (
                list(tol) if isinstance(tol, (list, tuple, np.ndarray)) else [tol])
            self.tol = [_number({"tol": v}, "tol", None, 0.0) for v in items]
        else:
            self.tol = None
        self.rtol = _number(params, "rtol", None, 0.0)
        if self.tol is not None and self.rtol is not None:
            raise CodecError("codec dwt53: give tol or rtol, not both")
        self.levels = _number(params, "levels", None, 0, 30, int)
        self.tries = _number(params, "tries", 8, 1, 64, int)
        self.zstd = _number(params, "zstd", 0, 0, 22, int)
        no_more(self.name, params, ("tau", "tol", "rtol", "levels", "tries", "zstd"))

    def params(self) -> dict:
        return {"tau": self.tau, "tol": self.tol, "rtol": self.rtol,
                "levels": self.levels, "tries": self.tries, "zstd": self.zstd}

    # ------------------------------------------------------------------ set-up
    def plan(self, batch) -> tuple[int, np.ndarray, np.ndarray]:
        """``(nlev, tol[meqn], e0[meqn])`` for ``batch`` (``tol < 0``: no bound)."""
        npatch, meqn, my, mx = batch.shape
        for n, what in ((mx, "mx"), (my, "my")):
            if n < 2 or n & (n - 1):
                raise CodecError(f"codec dwt53: {what}={n}, the lifting needs a power of "
                                 "two >= 2 cells")
        top = min(_log2_exact(mx), _log2_exact(my))
        nlev = top if self.levels is None else min(self.levels, top)
        if self.rtol is not None:
            if npatch == 0:
                lo = hi = np.zeros(meqn)
            elif type(batch).__module__.startswith("cupy"):
                lo = batch.min(axis=(0, 2, 3)).get()
                hi = batch.max(axis=(0, 2, 3)).get()
            else:
                b = np.asarray(batch)
                lo, hi = b.min(axis=(0, 2, 3)), b.max(axis=(0, 2, 3))
            tol = self.rtol * (np.asarray(hi, np.float64) - np.asarray(lo, np.float64))
            tol = np.where(np.isfinite(tol), tol, 0.0)
        elif self.tol is not None:
            if len(self.tol) not in (1, meqn):
                raise CodecError(f"codec dwt53: {len(self.tol)} tolerances for {meqn} "
                                 "fields")
            tol = np.broadcast_to(np.array(self.tol, np.float64), (meqn,)).copy()
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
        return nlev, tol, e0

    # ------------------------------------------------------------------ encode
    supports_raw = True

    def encode(self, batch, raw=None):
        """``raw`` (bool ``[npatch, meqn]`` or broadcastable, host): fields stored as
        they are (exact), e.g. the depths of patches with dry cells."""
        nlev, tol, e0 = self.plan(batch)
        npatch, meqn, my, mx = batch.shape
        if raw is not None:
            try:
                raw = np.broadcast_to(np.asarray(raw, bool), (npatch, meqn))
            except ValueError:
                raise CodecError(f"codec dwt53: raw mask of shape {np.shape(raw)} for "
                                 f"{npatch} patches of {meqn} fields") from None
        if not isinstance(batch, np.ndarray):  # CuPy or a Numba device array
            from . import dwt53_gpu

            fdata, bdata, foff, boff = dwt53_gpu.encode(batch, nlev, self.tau, e0,
                                                        self.tries, tol, raw)
        else:
            fdata, bdata, foff, boff = encode_host(np.asarray(batch), nlev, self.tau, e0,
                                                   self.tries, tol, raw)
        header = {"levels_used": nlev, "tol_used": [float(v) for v in tol]}
        sections = {"offsets": foff, "boffsets": boff,
                    "crc": _patch_crcs(fdata, bdata, foff, boff)}
        if self.zstd:
            zstd = _zstd(self.zstd)
            header["zstd"] = {"fdata": int(fdata.size), "bdata": int(bdata.size)}
            for name, a in (("fdata", fdata), ("bdata", bdata)):
                sections[f"{name}_z"] = (np.frombuffer(zstd.encode(a), np.uint8) if a.size
                                         else np.zeros(0, np.uint8))
        else:
            sections.update(fdata=fdata, bdata=bdata)
        return header, sections

    # ------------------------------------------------------------------ decode
    @classmethod
    def decode(cls, header, sections, device, err):
        npatch, meqn, my, mx = header["shape"]
        nlev = header.get("levels_used")
        if not (isinstance(nlev, int) and not isinstance(nlev, bool)):
            raise err("bad levels_used in the header")
        for n, what in ((mx, "mx"), (my, "my")):
            if n < 2 or n & (n - 1):
                raise err(f"{what}={n} is not a power of two >= 2")
        if not 0 <= nlev <= min(_log2_exact(mx), _log2_exact(my)):
            raise err(f"levels_used={nlev} does not fit {my} x {mx} patches")
        if header.get("zstd") is not None:
            _unzstd(header["zstd"], sections, err)
        fdata, bdata = sections.get("fdata"), sections.get("bdata")
        if fdata is None or fdata.dtype != np.float64 or bdata is None \
                or bdata.dtype != np.uint8:
            raise err("missing or mistyped sections fdata/bdata")
        check_index(sections, npatch, {"offsets": fdata.size, "boffsets": bdata.size}, err)
        foff, boff = sections["offsets"], sections["boffsets"]
        crc = sections.get("crc")
        if crc is None or crc.size != npatch:
            raise err("missing or short crc section")
        bad = np.nonzero(_patch_crcs(fdata, bdata, foff, boff) != crc)[0]
        if bad.size:
            raise err(f"corrupt data in patch {int(bad[0])} (CRC mismatch"
                      + (f", {bad.size} patches in all)" if bad.size > 1 else ")"))
        if device:
            from . import dwt53_gpu

            out, errs = dwt53_gpu.decode(fdata, bdata, foff, boff, (npatch, meqn, my, mx),
                                         nlev)
        else:
            out = np.empty((npatch, meqn, my, mx))
            errs = np.zeros((npatch, 2), np.int64)
            K.decode_cpu(fdata, bdata, foff.astype(np.int64), boff.astype(np.int64), out,
                         nlev, errs)
        bad = np.nonzero(errs[:, 0])[0]
        if bad.size:
            k = int(bad[0])
            raise err(f"patch {k} field {int(errs[k, 1])}: "
                      f"{K.ERRORS.get(int(errs[k, 0]), 'inconsistent data')}")
        return out


def _zstd(level: int = 3):
    try:
        from numcodecs import Zstd
    except ImportError as e:
        raise CodecError(f"codec dwt53 with zstd > 0 needs numcodecs (pip install "
                         f"'forestpy[codecs]'; zstd=0 works without): {e}") from None
    return Zstd(level=level)


def _unzstd(sizes, sections: dict, err) -> None:
    """Undo the Zstandard stage: ``fdata_z``/``bdata_z`` -> ``fdata``/``bdata``, each
    size checked against the header before and after decompressing."""
    from forestpy.errors import MAX_ARRAY_BYTES

    if not (isinstance(sizes, dict) and all(
            isinstance(sizes.get(k), int) and 0 <= sizes[k] for k in ("fdata", "bdata"))):
        raise err("bad zstd entry in the header")
    if 8 * sizes["fdata"] + sizes["bdata"] > MAX_ARRAY_BYTES:
        raise err("zstd sizes larger than forestpy decodes")
    zstd = _zstd()
    for name, dtype in (("fdata", np.float64), ("bdata", np.uint8)):
        z = sections.get(f"{name}_z")
        if z is None or z.dtype != np.uint8:
            raise err(f"missing or mistyped section {name}_z")
        want = sizes[name] * np.dtype(dtype).itemsize
        if want == 0:
            if z.size:
                raise err(f"section {name}_z holds bytes for an empty stream")
            sections[name] = np.zeros(0, dtype)
            continue
        try:
            raw = zstd.decode(z.tobytes())
        except Exception as e:  # noqa: BLE001 - numcodecs raises RuntimeError & co
            raise err(f"section {name}_z cannot be decompressed ({e})") from None
        if len(raw) != want:
            raise err(f"section {name}_z decompresses to {len(raw)} bytes, {want} expected")
        sections[name] = np.frombuffer(raw, dtype).copy()


def encode_host(x: np.ndarray, nlev: int, tau: float, e0, tries: int, tol, raw=None):
    """The CPU encoder: ``(fdata, bdata, offsets, boffsets)``."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    npatch, meqn, my, mx = x.shape
    coef = np.empty((npatch, meqn, (mx + 1) * (my + 1)))
    meta = np.empty((npatch, meqn, 4), np.int64)
    total = np.empty((npatch, meqn))
    mask = (np.zeros((npatch, meqn), np.uint8) if raw is None else
            np.ascontiguousarray(np.broadcast_to(np.asarray(raw, bool), (npatch, meqn)),
                                 dtype=np.uint8))
    K.analyse_cpu(x, coef, meta, total, nlev, float(tau), np.asarray(e0, np.int64),
                  int(tries), np.asarray(tol, np.float64), mask)
    nf, nb = K.sizes_of(meta, my, mx, nlev)
    foff, boff = K.offsets(nf), K.offsets(nb)
    fdata = np.empty(int(foff[-1]))
    bdata = np.empty(int(boff[-1]), np.uint8)
    K.pack_cpu(coef, meta, total, foff.astype(np.int64), boff.astype(np.int64), fdata,
               bdata, my, mx, nlev)
    return fdata, bdata, foff, boff
