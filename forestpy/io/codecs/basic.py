"""The simple codecs (``none``, ``lossless``, ``fp16``) and the comparison adapters
(``zfpy``, ``sz3``).  Each is a class with ``name``, ``version``, ``params()``,
``encode(batch) -> (header, sections)`` and the classmethod
``decode(header, sections, device, err) -> array``; :mod:`forestpy.io.codecs` wraps
them in the container.  Device batches are copied to the host first (only ``dwt53``
encodes on the device)."""

from __future__ import annotations

import math
import zlib

import numpy as np

from .container import CodecError, check_index

__all__ = ["NoneCodec", "Lossless", "FP16", "ZFPY", "SZ3"]


def to_host(a) -> np.ndarray:
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.ascontiguousarray(a)


def to_device(a, device: bool):
    if not device:
        return a
    import cupy

    return cupy.asarray(a)


def _number(params: dict, key: str, default, lo=None, hi=None, kind=float):
    """Parse ``params[key]`` (string or number) as ``kind`` within ``[lo, hi]``."""
    v = params.pop(key, default)
    if v is None:
        return None
    try:
        v = kind(v)
    except (TypeError, ValueError):
        raise CodecError(f"codec parameter {key}={v!r} is not a {kind.__name__}") from None
    if isinstance(v, float) and not math.isfinite(v):
        raise CodecError(f"codec parameter {key}={v!r} is not finite")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise CodecError(f"codec parameter {key}={v!r} is outside [{lo}, {hi}]")
    return v


def no_more(name: str, params: dict, known: tuple):
    if params:
        raise CodecError(f"codec {name}: unknown parameter(s) {sorted(params)}; known: "
                         f"{', '.join(known) if known else 'none'}")


def patch_crcs(flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """CRC-32 of each chunk ``flat[offsets[i]:offsets[i+1]]`` (bytes of a 1-D array)."""
    raw = memoryview(np.ascontiguousarray(flat)).cast("B")
    isz = flat.dtype.itemsize
    return np.array([zlib.crc32(raw[int(a) * isz:int(b) * isz]) & 0xFFFFFFFF
                     for a, b in zip(offsets[:-1], offsets[1:])], dtype=np.uint32)


def check_crcs(flat: np.ndarray, offsets: np.ndarray, crcs: np.ndarray, err, what="patch"):
    if crcs is None or crcs.size != offsets.size - 1:
        raise err("missing or short crc section")
    bad = np.nonzero(patch_crcs(flat, offsets) != crcs)[0]
    if bad.size:
        raise err(f"corrupt data in {what} {int(bad[0])} (CRC mismatch"
                  + (f", {bad.size} {what}es in all)" if bad.size > 1 else ")"))


class _PerPatch:
    """A codec storing each patch as a fixed number of values of one dtype."""

    name = "none"
    version = 1
    store = None  # dtype of the stored values (None: the batch's)

    def __init__(self, **params):
        no_more(self.name, params, ())

    def params(self) -> dict:
        return {}

    def convert(self, x: np.ndarray) -> np.ndarray:
        return x if self.store is None else x.astype(self.store)

    def encode(self, batch):
        x = self.convert(to_host(batch))
        flat = x.reshape(-1)
        n = x.shape[0]
        per = int(np.prod(x.shape[1:]))
        offsets = np.arange(n + 1, dtype=np.uint64) * np.uint64(per)
        return {}, {"offsets": offsets, "crc": patch_crcs(flat, offsets), "data": flat}

    @classmethod
    def decode(cls, header, sections, device, err):
        shape = header["shape"]
        per = int(np.prod(shape[1:]))
        data = sections.get("data")
        if data is None:
            raise err("missing section 'data'")
        want = np.dtype(header["dtype"]) if cls.store is None else np.dtype(cls.store)
        if data.dtype != want or data.size != shape[0] * per:
            raise err(f"section 'data' holds {data.size} {data.dtype} values, "
                      f"{shape[0] * per} {want} expected")
        check_index(sections, shape[0], {"offsets": data.size}, err)
        check_crcs(data, sections["offsets"], sections.get("crc"), err)
        return to_device(data.reshape(shape).astype(header["dtype"]), device)


class NoneCodec(_PerPatch):
    """The values as they are."""

    name = "none"


class FP16(_PerPatch):
    """IEEE half precision storage (the FP16 baseline: ratio 4 from float64)."""

    name = "fp16"
    store = np.float16

    def convert(self, x):
        finite = np.abs(x[np.isfinite(x)])
        big = float(finite.max()) if finite.size else 0.0
        if not big <= 65504.0:
            raise CodecError(f"codec fp16: values up to {big:.6g} do not fit half "
                             "precision (largest 65504)")
        return x.astype(np.float16)


class Lossless(_PerPatch):
    """Byte shuffle + Zstandard (``numcodecs.Blosc``), in chunks of whole patches of
    about ``chunk`` bytes (default 1 MiB), each compressed on its own."""

    name = "lossless"

    def __init__(self, **params):
        self.level = _number(params, "level", 5, 1, 9, int)
        self.chunk = _number(params, "chunk", 1 << 20, 1 << 10, 1 << 30, int)
        no_more(self.name, params, ("level", "chunk"))

    def params(self):
        return {"level": self.level, "chunk": self.chunk}

    @staticmethod
    def _blosc(level=5):
        try:
            from numcodecs import Blosc
        except ImportError as e:
            raise CodecError(f"codec lossless needs numcodecs (pip install "
                             f"'forestpy[codecs]'): {e}") from None
        return Blosc(cname="zstd", clevel=level, shuffle=Blosc.SHUFFLE)

    def encode(self, batch):
        x = to_host(batch)
        n = x.shape[0]
        per = x[0].nbytes if n else 1
        step = max(1, self.chunk // max(per, 1))
        starts = list(range(0, n, step)) + [n]
        blosc = self._blosc(self.level)
        parts = [np.frombuffer(blosc.encode(np.ascontiguousarray(x[a:b])), np.uint8)
                 if x[a:b].size else np.zeros(0, np.uint8)
                 for a, b in zip(starts[:-1], starts[1:])]
        sizes = np.array([0] + [p.size for p in parts], dtype=np.uint64)
        offsets = np.cumsum(sizes, dtype=np.uint64)
        data = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        return {"chunk_patches": [int(s) for s in starts]}, {
            "offsets": offsets, "crc": patch_crcs(data, offsets), "data": data}

    @classmethod
    def decode(cls, header, sections, device, err):
        shape = header["shape"]
        dtype = np.dtype(header["dtype"])
        starts = header.get("chunk_patches")
        ok = (isinstance(starts, list) and len(starts) >= 1 and starts[0] == 0
              and starts[-1] == shape[0]
              and all(isinstance(s, int) for s in starts)
              and all(b > a for a, b in zip(starts[:-1], starts[1:])))
        if not ok:
            raise err("bad chunk_patches in the header")
        data = sections.get("data")
        if data is None or data.dtype != np.uint8:
            raise err("missing or mistyped section 'data'")
        nchunk = len(starts) - 1
        check_index(sections, nchunk, {"offsets": data.size}, err)
        off = sections["offsets"]
        check_crcs(data, off, sections.get("crc"), err, "chunk")
        out = np.empty(shape, dtype)
        blosc = cls._blosc()
        per = int(np.prod(shape[1:])) * dtype.itemsize
        for c in range(nchunk):
            a, b = starts[c], starts[c + 1]
            if per == 0:  # patches without values (e.g. no aux fields)
                if off[c + 1] != off[c]:
                    raise err(f"chunk {c} holds bytes for patches without values")
                continue
            try:
                raw = blosc.decode(data[int(off[c]):int(off[c + 1])].tobytes())
            except Exception as e:  # noqa: BLE001 - numcodecs raises RuntimeError & co
                raise err(f"chunk {c} cannot be decompressed ({e})") from None
            if len(raw) != (b - a) * per:
                raise err(f"chunk {c} decompresses to {len(raw)} bytes, "
                          f"{(b - a) * per} expected")
            out[a:b] = np.frombuffer(raw, dtype).reshape((b - a,) + tuple(shape[1:]))
        return to_device(out, device)


class _Adapter:
    """A whole-batch adapter to an external compressor (comparison only)."""

    version = 1

    def __init__(self, **params):
        self.tol = _number(params, "tol", None, 0.0)
        if self.tol is None:
            raise CodecError(f"codec {self.name} needs tol=<absolute error bound>")
        no_more(self.name, params, ("tol",))

    def params(self):
        return {"tol": self.tol}

    def encode(self, batch):
        x = np.ascontiguousarray(to_host(batch), dtype=np.float64)
        data = np.frombuffer(self.compress(x), np.uint8)
        offsets = np.array([0, data.size], np.uint64)
        return {}, {"offsets": offsets, "crc": patch_crcs(data, offsets), "data": data}

    @classmethod
    def decode(cls, header, sections, device, err):
        data = sections.get("data")
        if data is None or data.dtype != np.uint8:
            raise err("missing or mistyped section 'data'")
        check_index(sections, 1, {"offsets": data.size}, err)
        check_crcs(data, sections["offsets"], sections.get("crc"), err, "chunk")
        shape = tuple(header["shape"])
        try:
            out = cls.decompress(data, shape, header["params"])
        except CodecError:
            raise
        except Exception as e:  # noqa: BLE001 - the library's own errors
            raise err(f"{cls.name} cannot decompress ({type(e).__name__}: {e})") from None
        if out.shape != shape:
            raise err(f"{cls.name} returned shape {out.shape}, {shape} expected")
        return to_device(out, device)


class ZFPY(_Adapter):
    """ZFP (``zfpy``) in fixed-accuracy mode: ``tol`` is ZFP's absolute tolerance.  The
    batch is one 4D array (ZFP blocks of 4 x 4 x 4 x 4 values across patches)."""

    name = "zfpy"

    def compress(self, x):
        zfpy = _need("zfpy")
        return zfpy.compress_numpy(x, tolerance=self.tol)

    @staticmethod
    def decompress(data, shape, params):
        zfpy = _need("zfpy")
        return zfpy.decompress_numpy(data.tobytes())


class SZ3(_Adapter):
    """SZ3 (``pysz``) with an absolute error bound ``tol``, on the 4D batch."""

    name = "sz3"

    def compress(self, x):
        pysz = _need("pysz")
        cfg = pysz.szConfig()
        cfg.errorBoundMode = pysz.szErrorBoundMode.ABS
        cfg.absErrorBound = self.tol
        out, _ = pysz.sz.compress(x, cfg)
        return np.asarray(out, np.uint8).tobytes()

    @staticmethod
    def decompress(data, shape, params):
        pysz = _need("pysz")
        out, _ = pysz.sz.decompress(np.ascontiguousarray(data), np.float64, shape)
        return np.asarray(out)


def _need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise CodecError(f"codec {module} needs the package {module} (pip install "
                         f"'forestpy[codecs]'): {e}") from None
