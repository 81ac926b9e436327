"""The self-describing container of every codec: one header, typed sections, checksums.

Layout (all integers little endian)::

    b"FPYCODEC"                  8 bytes, the magic
    version                      uint32 (this reader: 1)
    n                            uint32, bytes of the header
    header                       n bytes of UTF-8 JSON (below)
    crc                          uint32, CRC-32 of everything above
    section 0, section 1, ...    the sections' bytes, back to back, in header order

The header holds ``codec`` (name), ``codec_version``, ``shape`` ``[npatch, meqn, my,
mx]``, ``dtype`` (of the encoded batch), ``params`` (the codec's parameters), ``extra``
(JSON-able, the caller's) and ``sections``: a list of ``{"name", "dtype", "count",
"crc32"}``.  Every codec stores an index section ``offsets`` (``uint64``, one more entry
than chunks: a chunk is a patch for ``none``, ``fp16`` and ``dwt53``, a run of patches
for ``lossless``) and ``crc`` (``uint32``, CRC-32 of each chunk's bytes), so that a
damaged patch is named.

:func:`unpack` trusts nothing: lengths are checked against the data before anything is
allocated, the header CRC and every section's CRC are verified, and every problem is one
:class:`CodecError` naming the data and what is wrong.
"""

from __future__ import annotations

import json
import math
import struct
import zlib

import numpy as np

from forestpy.errors import MAX_ARRAY_BYTES, InputFileError

__all__ = ["CodecError", "MAGIC", "VERSION", "pack", "unpack", "crc32"]

MAGIC = b"FPYCODEC"
VERSION = 1
_MAX_HEADER = 1 << 20
_DTYPES = {"uint8", "uint16", "uint32", "uint64", "int64", "float16", "float32", "float64"}


class CodecError(InputFileError):
    """Compressed data that cannot be decoded (truncated, corrupt, foreign), or a codec
    specification or input that cannot be encoded: the message says what is wrong."""


def crc32(a) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(a)).cast("B")) & 0xFFFFFFFF


def pack(header: dict, sections: dict) -> bytes:
    """The container of ``header`` (JSON-able, without ``sections``) and ``sections``
    (name -> host NumPy array, stored in insertion order)."""
    header = dict(header)
    header["sections"] = [
        {"name": name, "dtype": a.dtype.name, "count": int(a.size), "crc32": crc32(a)}
        for name, a in sections.items()
    ]
    text = json.dumps(header, separators=(",", ":")).encode()
    head = MAGIC + struct.pack("<II", VERSION, len(text)) + text
    parts = [head, struct.pack("<I", zlib.crc32(head) & 0xFFFFFFFF)]
    parts += [memoryview(np.ascontiguousarray(a)).cast("B") for a in sections.values()]
    return b"".join(parts)


def unpack(data, name: str = "compressed data") -> tuple[dict, dict]:
    """``(header, sections)`` of a container; raises :class:`CodecError`."""

    def err(problem):
        return CodecError(f"{name}: {problem}")

    try:
        buf = memoryview(data).cast("B")
    except TypeError:
        raise err(f"not a bytes-like object ({type(data).__name__})") from None
    if len(buf) < 16 or bytes(buf[:8]) != MAGIC:
        if len(buf) < 8 or bytes(buf[:8]) != MAGIC:
            raise err("not forestpy codec data (no FPYCODEC magic)")
        raise err(f"truncated ({len(buf)} bytes, shorter than the fixed header)")
    version, n = struct.unpack("<II", buf[8:16])
    if version != VERSION:
        raise err(f"container version {version}, this forestpy reads version {VERSION}")
    if n > _MAX_HEADER or 16 + n + 4 > len(buf):
        raise err(f"truncated or corrupt: a header of {n} bytes in {len(buf)} bytes")
    (crc,) = struct.unpack("<I", buf[16 + n:20 + n])
    if zlib.crc32(buf[:16 + n]) & 0xFFFFFFFF != crc:
        raise err("corrupt header (CRC mismatch)")
    try:
        header = json.loads(bytes(buf[16:16 + n]))
    except (ValueError, RecursionError) as e:
        raise err(f"corrupt header ({e})") from None
    if not isinstance(header, dict):
        raise err("corrupt header (not a JSON object)")
    for key in ("codec", "codec_version", "shape", "dtype", "params", "sections"):
        if key not in header:
            raise err(f"header lacks {key!r}")
    shape = header["shape"]
    if (not isinstance(shape, list) or len(shape) != 4
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                       for v in shape)):
        raise err(f"bad shape {shape!r:.80} (4 integers >= 0 expected)")
    try:
        dtype = np.dtype(header["dtype"])
    except TypeError:
        raise err(f"bad dtype {header['dtype']!r:.40}") from None
    if dtype.kind != "f":
        raise err(f"dtype {dtype} is not floating point")
    if math.prod(shape) * dtype.itemsize > MAX_ARRAY_BYTES:
        raise err(f"shape {shape} is larger than forestpy decodes")
    secs = header["sections"]
    if not isinstance(secs, list):
        raise err("bad section list")
    pos = 20 + n
    sections = {}
    for s in secs:
        ok = (isinstance(s, dict) and isinstance(s.get("name"), str)
              and s.get("dtype") in _DTYPES and isinstance(s.get("count"), int)
              and not isinstance(s.get("count"), bool) and s["count"] >= 0
              and isinstance(s.get("crc32"), int))
        if not ok:
            raise err(f"bad section entry {s!r:.80}")
        dt = np.dtype(s["dtype"])
        size = s["count"] * dt.itemsize
        if pos + size > len(buf):
            raise err(f"truncated: section {s['name']!r} needs {size} bytes at {pos}, "
                      f"the data hold {len(buf)}")
        raw = buf[pos:pos + size]
        if zlib.crc32(raw) & 0xFFFFFFFF != s["crc32"]:
            raise err(f"corrupt section {s['name']!r} (CRC mismatch)")
        sections[s["name"]] = np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt)
        pos += size
    if pos != len(buf):
        raise err(f"{len(buf) - pos} bytes after the last section")
    header["shape"] = tuple(shape)
    return header, sections


def check_index(sections: dict, nchunk: int, lengths: dict, err) -> None:
    """Check that each ``offsets``-like section named in ``lengths`` (name -> length of
    the section it indexes) has ``nchunk + 1`` non-decreasing entries from 0 to that
    length."""
    for key, total in lengths.items():
        off = sections.get(key)
        if off is None:
            raise err(f"missing section {key!r}")
        if off.dtype != np.uint64 or off.size != nchunk + 1:
            raise err(f"section {key!r} has {off.size} entries, {nchunk + 1} expected")
        if off[0] != 0 or off[-1] != total or np.any(np.diff(off.astype(np.int64)) < 0):
            raise err(f"section {key!r} is not an index from 0 to {total}")
