"""Codecs for batches of patches: one API to encode ``[npatch, meqn, my, mx]`` to bytes.

::

    from forestpy.io.codecs import encode, decode
    blob, report = encode(q, "dwt53:tol=1e-6", report=True)    # q: NumPy or CuPy
    q2 = decode(blob)                                           # NumPy (device=True: CuPy)
    report["fields"][0]["max_error"], report["ratio"]

A codec is named by a specification string ``name[:key=value[,key=value...]]``
(:func:`parse_spec`), the form ``forestpy run --checkpoint-codec`` takes:

``none``
    the values as they are (float64 or the batch's dtype); lossless.
``lossless``
    byte shuffle + Zstandard through ``numcodecs.Blosc`` (``level=``, 1-9, default 5);
    bit for bit.  ``numcodecs`` rather than ``blosc2``: it is the codec registry that
    zarr reads, and its Blosc codec is exactly the shuffle + zstd that is asked for,
    without blosc2's array engine.
``fp16``
    storage in IEEE half precision: a fixed ratio of 4 from float64, no error control
    (values beyond 65504 overflow: such data are refused with a :class:`CodecError`).
``dwt53``
    the seed's 5/3 lifting wavelets, one transform per patch field, sparse storage of
    the kept coefficients, each patch's exact float64 totals restored after decoding
    (:mod:`forestpy.io.codecs.dwt53`).  ``tau=`` the threshold of the finest details
    (level ``t`` uses ``tau * 2**t``), ``tol=`` an absolute L-infinity bound (one number,
    or ``tol=a/b/c`` one per field), ``rtol=`` a bound relative to each field's range in
    the batch, ``levels=`` (default all), ``zstd=`` a Zstandard level (1-22) for a
    lossless stage on the host after the transform (default 0: none; ``zstd=3``
    nearly doubles the ratio on forestpy's data, docs/compression.md).
``zfpy``, ``sz3``
    adapters to ZFP (``tol=``, fixed-accuracy mode) and SZ3 through ``pysz`` (``tol=``,
    absolute bound), for comparison; both need their optional package.

Every encoded batch is a self-describing container (:mod:`.container`): a header with the
codec, its version and parameters, the shape and dtype, then typed sections with
per-patch offsets and CRC-32 checksums; corrupt or truncated data raise one
:class:`CodecError` (an :class:`~forestpy.errors.InputFileError`).
"""

from __future__ import annotations

import math

import numpy as np

from .container import CodecError, pack, unpack

__all__ = ["CodecError", "CODECS", "decode", "encode", "get_codec", "info", "metrics",
           "pack", "parse_spec", "unpack"]


def _codecs():
    from . import basic, dwt53

    return {
        "none": basic.NoneCodec,
        "lossless": basic.Lossless,
        "fp16": basic.FP16,
        "dwt53": dwt53.DWT53,
        "zfpy": basic.ZFPY,
        "sz3": basic.SZ3,
    }


#: the codec names :func:`get_codec` knows
CODECS = ("none", "lossless", "fp16", "dwt53", "zfpy", "sz3")


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"dwt53:tol=1e-6,levels=3"`` -> ``("dwt53", {"tol": "1e-6", "levels": "3"})``
    (values stay strings: each codec parses and checks its own)."""
    if not isinstance(spec, str) or not spec.strip():
        raise CodecError(f"codec specification {spec!r}: expected name[:key=value,...]")
    name, _, rest = spec.strip().partition(":")
    params = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise CodecError(f"codec specification {spec!r}: {item!r} is not key=value")
        params[key.strip()] = value.strip()
    return name.strip(), params


def get_codec(spec, **params):
    """The codec object for ``spec`` (a name or a specification string) and ``params``
    (keyword values override the string's).  Unknown names and parameters raise
    :class:`CodecError` listing the valid ones."""
    if not isinstance(spec, str):
        return spec  # already a codec object
    name, given = parse_spec(spec)
    given.update(params)
    table = _codecs()
    if name not in table:
        raise CodecError(f"unknown codec {name!r}; known: {', '.join(CODECS)}")
    return table[name](**given)


def _as_batch(batch):
    shape = getattr(batch, "shape", None)
    if shape is None or len(shape) != 4:
        raise CodecError(f"a batch of patches is [npatch, meqn, my, mx], got shape {shape}")
    dtype = np.dtype(batch.dtype)
    if dtype.kind != "f":
        raise CodecError(f"a batch of patches holds floating-point values, not {dtype}")
    return batch


def _is_device(a) -> bool:
    return type(a).__module__.startswith("cupy")


def encode(batch, codec="lossless", report: bool = False, extra: dict | None = None,
           raw=None, **params):
    """Encode ``batch[npatch, meqn, my, mx]`` (host NumPy or device CuPy) to bytes.

    ``codec`` is a name, a specification string (:func:`parse_spec`) or a codec object;
    ``params`` override its parameters; ``extra`` (JSON-able) is stored in the header
    and returned by :func:`info`.  With ``report=True`` returns ``(blob, report)`` where
    ``report`` is :func:`metrics` of the decoded batch against ``batch`` (one decode).
    A device batch is encoded on the device where the codec can (``dwt53``); only the
    compressed bytes cross to the host.  ``raw`` (bool ``[npatch, meqn]``, host) marks
    fields that a lossy codec stores exactly (``dwt53`` only; ignored by the exact
    codecs).
    """
    batch = _as_batch(batch)
    c = get_codec(codec, **params)
    if raw is not None and getattr(c, "supports_raw", False):
        header, sections = c.encode(batch, raw=raw)
    elif raw is not None and c.name not in ("none", "lossless") and np.any(raw):
        raise CodecError(f"codec {c.name} cannot store chosen fields exactly (raw=)")
    else:
        header, sections = c.encode(batch)
    header.update(codec=c.name, codec_version=c.version, shape=list(batch.shape),
                  dtype=np.dtype(batch.dtype).name, params=c.params(),
                  extra=extra)
    blob = pack(header, sections)
    if not report:
        return blob
    dec = decode(blob, device=_is_device(batch))
    return blob, metrics(batch, dec, len(blob))


def info(data, name: str = "compressed data") -> dict:
    """The header of encoded data (codec, version, shape, dtype, params, extra, sections)
    after the container's checks."""
    header, _ = unpack(data, name)
    return header


def decode(data, device: bool = False, name: str = "compressed data"):
    """The batch that :func:`encode` encoded: a NumPy array of the encoded dtype, or a
    CuPy array with ``device=True`` (``dwt53`` then decodes on the device).  ``name``
    names the data in error messages.  Raises :class:`CodecError`."""
    header, sections = unpack(data, name)
    table = _codecs()
    cname = header["codec"]
    if cname not in table:
        raise CodecError(f"{name}: unknown codec {cname!r:.40}")
    cls = table[cname]
    if header["codec_version"] != cls.version:
        raise CodecError(f"{name}: {cname} version {header['codec_version']!r:.20}, this "
                         f"forestpy reads version {cls.version}")

    def err(problem):
        return CodecError(f"{name}: {problem}")

    out = cls.decode(header, sections, device, err)
    dtype = np.dtype(header["dtype"])
    return out if out.dtype == dtype else out.astype(dtype)


def metrics(orig, dec, nbytes: int) -> dict:
    """``{"ratio", "bytes", "fields": [{"max_error", "nmse", "psnr", "range"}]}`` of a
    decoded batch ``dec`` against ``orig``: the ratio is ``orig.nbytes / nbytes``; per
    field the largest absolute error, NMSE ``sum (dec - orig)**2 / sum orig**2`` (the
    seed's normalised L2 error; 0 for an all-zero field decoded exactly) and PSNR
    ``20 log10(range / RMS error)`` in dB (``inf`` when exact)."""
    a = orig.get() if _is_device(orig) else np.asarray(orig)
    b = dec.get() if _is_device(dec) else np.asarray(dec)
    n_in = a.nbytes
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    fields = []
    for m in range(a.shape[1]):
        x, y = a[:, m], b[:, m]
        d = y - x
        err = float(np.max(np.abs(d))) if d.size else 0.0
        se = float(np.sum(d * d))
        ss = float(np.sum(x * x))
        rng = float(np.max(x) - np.min(x)) if x.size else 0.0
        rmse = math.sqrt(se / d.size) if d.size else 0.0
        fields.append({
            "max_error": err,
            "nmse": se / ss if ss > 0 else (0.0 if se == 0 else math.inf),
            "psnr": math.inf if rmse == 0 else (20 * math.log10(rng / rmse) if rng > 0
                                                 else -math.inf),
            "range": rng,
        })
    return {"ratio": n_in / nbytes if nbytes else math.inf, "bytes": int(nbytes),
            "fields": fields}

