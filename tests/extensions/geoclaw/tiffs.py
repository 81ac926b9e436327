"""Small TIFF files the reader's own writer does not make: LZW (a test-side encoder),
tiles, predictors 2 and 3, integer samples; for round trips and as fuzzing seeds."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np


def lzw_encode(data: bytes) -> bytes:
    """TIFF LZW (MSB first, early change, a clear code when the table is full)."""
    out = bytearray()
    acc = nbits = 0
    width = 9

    def emit(code):
        nonlocal acc, nbits
        acc = (acc << width) | code
        nbits += width
        while nbits >= 8:
            nbits -= 8
            out.append((acc >> nbits) & 0xFF)
        acc &= (1 << nbits) - 1

    def reset():
        return {bytes([i]): i for i in range(256)}, 258

    table, nxt = reset()
    emit(256)
    w = b""
    for byte in data:
        wc = w + bytes([byte])
        if wc in table:
            w = wc
            continue
        emit(table[w])
        table[wc] = nxt
        nxt += 1
        w = bytes([byte])
        if nxt == 4094:  # full: clear (the decoder then also starts again at 9 bits)
            emit(256)
            table, nxt = reset()
            width = 9
        elif nxt >= (1 << width) and width < 12:  # the decoder's table is one entry behind
            width += 1
    if w:
        emit(table[w])
    # the decoder adds one more entry on reading the last code: its width may grow
    if nxt + 1 >= (1 << width) and width < 12:
        width += 1
    emit(257)
    if nbits:
        out.append((acc << (8 - nbits)) & 0xFF)
    return bytes(out)


def _predict(block: np.ndarray, predictor: int) -> bytes:
    """Little-endian bytes of ``block`` (rows x cols) after the TIFF predictor."""
    a = np.ascontiguousarray(block).astype(block.dtype.newbyteorder("<"))
    if predictor == 1:
        return a.tobytes()
    if predictor == 2:
        d = a.copy()
        d[:, 1:] = a[:, 1:] - a[:, :-1]
        return d.tobytes()
    # 3: bytes of each row reordered most significant first, plane by plane, differenced
    rows, cols = a.shape
    isz = a.dtype.itemsize
    b = a.view(np.uint8).reshape(rows, cols, isz)[:, :, ::-1].transpose(0, 2, 1)
    b = np.ascontiguousarray(b).reshape(rows, cols * isz)
    d = b.copy()
    d[:, 1:] = b[:, 1:] - b[:, :-1]
    return d.tobytes()


def write_tiff(path, z, *, compression=5, predictor=1, tile=None, rows_per_strip=None,
               x0=10.0, ytop=20.0, dx=0.5, dy=0.25, nodata=None) -> Path:
    """A single-band little-endian GeoTIFF of ``z`` (row 0 north), PixelIsArea."""
    z = np.asarray(z)
    ny, nx = z.shape
    if tile is not None:
        bw = bh = tile
    else:
        bw, bh = nx, rows_per_strip or ny
    nbx, nby = -(-nx // bw), -(-ny // bh)
    blocks = []
    for by in range(nby):
        for bx in range(nbx):
            b = z[by * bh:(by + 1) * bh, bx * bw:(bx + 1) * bw]
            if tile is not None:  # tiles are whole, padded with zeros
                pad = np.zeros((bh, bw), z.dtype)
                pad[:b.shape[0], :b.shape[1]] = b
                b = pad
            raw = _predict(b, predictor if compression != 1 else 1)  # as libtiff
            blocks.append({1: raw, 5: lzw_encode(raw), 8: zlib.compress(raw)}[compression])
    sfmt = {"f": 3, "i": 2, "u": 1}[z.dtype.kind]
    tags = [(256, 4, [nx]), (257, 4, [ny]), (258, 3, [8 * z.dtype.itemsize]),
            (259, 3, [compression]), (262, 3, [1]), (277, 3, [1]), (284, 3, [1]),
            (317, 3, [predictor]), (339, 3, [sfmt]),
            (33550, 12, [dx, dy, 0.0]), (33922, 12, [0.0, 0.0, 0.0, x0, ytop, 0.0]),
            (34735, 3, [1, 1, 0, 1, 1025, 0, 1, 1])]
    if tile is not None:
        tags += [(322, 3, [bw]), (323, 3, [bh]), (324, 4, None), (325, 4, None)]
    else:
        tags += [(273, 4, None), (278, 4, [bh]), (279, 4, None)]
    if nodata is not None:
        tags.append((42113, 2, list(repr(float(nodata)).encode() + b"\0")))
    tags.sort()
    fmt = {2: "B", 3: "H", 4: "I", 12: "d"}
    # layout: header, directory, out-of-line values, blocks
    ifd_end = 8 + 2 + 12 * len(tags) + 4
    sizes = [len(b) for b in blocks]
    offsets_at = None
    extra = bytearray()
    entries = []
    nblocks = len(blocks)
    for tag, typ, vals in tags:
        if vals is None:
            vals = sizes if tag in (279, 325) else [0] * nblocks
        payload = struct.pack(f"<{len(vals)}{fmt[typ]}", *vals)
        if len(payload) <= 4:
            entries.append([tag, typ, len(vals), payload.ljust(4, b"\0"), None])
        else:
            if len(extra) % 2:
                extra.append(0)
            entries.append([tag, typ, len(vals), None, ifd_end + len(extra)])
            if tag in (273, 324):
                offsets_at = (len(extra), len(entries) - 1)
            extra += payload
    data_start = ifd_end + len(extra)
    starts = list(np.cumsum([data_start] + sizes[:-1]))
    packed = struct.pack(f"<{nblocks}I", *starts)
    if offsets_at is None:  # one block: the offset sits in the entry itself
        for e in entries:
            if e[0] in (273, 324):
                e[3] = packed
    else:
        extra[offsets_at[0]:offsets_at[0] + len(packed)] = packed
    out = bytearray(b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", len(entries)))
    for tag, typ, count, inline, where in entries:
        out += struct.pack("<HHI", tag, typ, count)
        out += inline if inline is not None else struct.pack("<I", where)
    out += struct.pack("<I", 0) + extra
    for b in blocks:
        out += b
    Path(path).write_bytes(bytes(out))
    return Path(path)
