"""Raster file formats for topography: GeoClaw topotype 1/2/3, ESRI ASCII grids, GeoTIFF.

Every reader returns a :class:`Raster`: values ``z[ny, nx]`` with row 0 the southmost,
the coordinates ``(x0, y0)`` of the first value (south-west), spacings ``dx, dy`` and
the registration (``"node"``: values at the given points, GeoClaw topotypes;
``"cell"``: values at centres of cells whose lower-left corner is given, ESRI ASCII
and GeoTIFF "PixelIsArea").  ``x0, y0`` always name the point of value ``z[0, 0]``,
so a cell-registered grid has ``x0 = xllcorner + dx/2``.  NODATA values become NaN.

Malformed files raise :class:`RasterError` with one message naming the file and the
problem.  The GeoTIFF code is a small baseline-TIFF reader (strips or tiles,
uncompressed, deflate or LZW, predictor 1/2/3, float32/64 or integer samples, one band)
and a writer of uncompressed or deflate float32/float64 GeoTIFFs with
ModelPixelScale/ModelTiepoint/GeoKeyDirectory tags; no third-party dependency.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np

__all__ = [
    "Raster",
    "RasterError",
    "read_raster",
    "read_topotype",
    "write_topotype",
    "read_esri_ascii",
    "write_esri_ascii",
    "read_geotiff",
    "write_geotiff",
    "fill_nodata",
]


class RasterError(ValueError):
    """A raster file that cannot be read: the message names the file and the problem."""


@dataclass
class Raster:
    """A uniform grid of values: ``z[j, i]`` at ``(x0 + i dx, y0 + j dy)``, row 0 south."""

    z: np.ndarray
    x0: float
    y0: float
    dx: float
    dy: float
    registration: str = "node"
    nodata: float | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.z = np.asarray(self.z, dtype=np.float64)
        if self.z.ndim != 2 or min(self.z.shape) < 1:
            raise ValueError(f"Raster z must be a non-empty 2D array, got shape {self.z.shape}")
        if not (self.dx > 0 and self.dy > 0):
            raise ValueError(f"Raster spacings must be positive, got dx={self.dx}, dy={self.dy}")
        if self.registration not in ("node", "cell"):
            raise ValueError(f"registration must be 'node' or 'cell', got {self.registration!r}")

    @property
    def shape(self):
        return self.z.shape

    @property
    def x(self) -> np.ndarray:
        return self.x0 + self.dx * np.arange(self.z.shape[1])

    @property
    def y(self) -> np.ndarray:
        return self.y0 + self.dy * np.arange(self.z.shape[0])

    @property
    def corner(self) -> tuple[float, float]:
        """Lower-left corner as a cell-registered file writes it (xllcorner, yllcorner)."""
        if self.registration == "cell":
            return self.x0 - 0.5 * self.dx, self.y0 - 0.5 * self.dy
        return self.x0, self.y0


# ----------------------------------------------------------------------------- helpers
def _int_field(path, header, key):
    v = header[key]
    if v != int(v) or v < 1:
        raise RasterError(f"{path}: header {key}={v} is not a positive integer")
    return int(v)


def _numbers(path, text, expected, what):
    try:
        vals = np.array(text.split(), dtype=np.float64)
    except ValueError as e:
        raise RasterError(f"{path}: non-numeric value in the {what}: {e}") from None
    if vals.size != expected:
        raise RasterError(f"{path}: {what} has {vals.size} values, header says {expected}")
    return vals


def _apply_nodata(z, nodata):
    if nodata is not None and np.isfinite(nodata):
        z = np.where(z == nodata, np.nan, z)
    return z


# ----------------------------------------------------------------------------- topotypes
def read_topotype(path, topotype: int, nodata: float = -9999.0) -> Raster:
    """Read a GeoClaw topography file of type 1 (``x y z`` lines), 2 or 3.

    Types 2 and 3 name their NODATA value in the header; for type 1 it is ``nodata``."""
    path = Path(path)
    if topotype == 1:
        try:
            data = np.loadtxt(path, dtype=np.float64, ndmin=2)
        except ValueError as e:
            raise RasterError(f"{path}: topotype 1 needs lines 'x y z': {e}") from None
        if data.shape[1] != 3:
            raise RasterError(f"{path}: topotype 1 needs 3 columns, found {data.shape[1]}")
        xs, ys = np.unique(data[:, 0]), np.unique(data[:, 1])
        if xs.size * ys.size != len(data) or xs.size < 2 or ys.size < 2:
            raise RasterError(f"{path}: topotype 1 points do not form a full grid")
        dx, dy = np.diff(xs), np.diff(ys)
        if np.ptp(dx) > 1e-6 * dx[0] or np.ptp(dy) > 1e-6 * dy[0]:
            raise RasterError(f"{path}: topotype 1 grid is not uniform")
        i = np.rint((data[:, 0] - xs[0]) / dx[0]).astype(int)
        j = np.rint((data[:, 1] - ys[0]) / dy[0]).astype(int)
        z = np.full((ys.size, xs.size), np.nan)
        z[j, i] = data[:, 2]
        z = _apply_nodata(z, nodata)
        return Raster(z, xs[0], ys[0], float(dx.mean()), float(dy.mean()), "node", nodata)
    if topotype not in (2, 3):
        raise RasterError(f"{path}: unknown topotype {topotype} (1, 2 or 3)")
    text = path.read_text()
    lines = text.splitlines()
    keys = ("ncols", "nrows", "xlower", "ylower", "cellsize", "nodata_value")
    # the cellsize line may carry two values (dx dy)
    nhead = 6
    h = {}
    for k in range(nhead):
        if k >= len(lines):
            raise RasterError(f"{path}: header ends after {k} lines, expected 6 {keys}")
        parts = lines[k].split()
        nums = []
        for p in parts:
            try:
                nums.append(float(p))
            except ValueError:
                pass
        if not nums:
            raise RasterError(f"{path}: header line {k + 1} {lines[k]!r} has no number")
        h[keys[k]] = nums if k == 4 else nums[0]
    nx = _int_field(path, h, "ncols")
    ny = _int_field(path, h, "nrows")
    dx = h["cellsize"][0]
    dy = h["cellsize"][1] if len(h["cellsize"]) > 1 else dx
    if not (dx > 0 and dy > 0):
        raise RasterError(f"{path}: cellsize must be positive, got {h['cellsize']}")
    body = "\n".join(lines[nhead:])
    vals = _numbers(path, body, nx * ny, "data")
    z = vals.reshape(ny, nx)[::-1]  # file rows run north to south
    z = _apply_nodata(z, h["nodata_value"])
    return Raster(np.ascontiguousarray(z), h["xlower"], h["ylower"], dx, dy, "node",
                  h["nodata_value"])


def write_topotype(path, raster: Raster, topotype: int = 3, nodata: float = -9999.0) -> None:
    """Write ``raster`` (node registration) as GeoClaw topotype 1, 2 or 3."""
    path = Path(path)
    z = np.where(np.isnan(raster.z), nodata, raster.z)
    ny, nx = z.shape
    if topotype == 1:
        X, Y = np.meshgrid(raster.x, raster.y)
        rows = np.column_stack([X[::-1].ravel(), Y[::-1].ravel(), z[::-1].ravel()])
        np.savetxt(path, rows, fmt="%.17g")
        return
    if topotype not in (2, 3):
        raise ValueError(f"topotype must be 1, 2 or 3, got {topotype}")
    x0, y0, dx, dy, nodata = (float(v) for v in (raster.x0, raster.y0, raster.dx, raster.dy,
                                                  nodata))
    head = (
        f"{nx:<20d} ncols\n{ny:<20d} nrows\n{x0!r:<20} xlower\n"
        f"{y0!r:<20} ylower\n{dx!r} {dy!r} cellsize\n"
        f"{nodata!r:<20} nodata_value\n"
    )
    sep = "\n" if topotype == 2 else " "
    body = "\n".join(sep.join(f"{v:.17g}" for v in row) for row in z[::-1])
    path.write_text(head + body + "\n")


# ----------------------------------------------------------------------------- ESRI ASCII
def read_esri_ascii(path) -> Raster:
    """Read an ESRI ASCII grid (``ncols nrows xllcorner|xllcenter yll... cellsize``)."""
    path = Path(path)
    lines = Path(path).read_text().splitlines()
    header = {}
    n = 0
    while n < len(lines) and lines[n].strip() and lines[n].split()[0][0].isalpha():
        parts = lines[n].split()
        if len(parts) != 2:
            raise RasterError(f"{path}: header line {n + 1} {lines[n]!r} is not 'name value'")
        try:
            header[parts[0].lower()] = float(parts[1])
        except ValueError:
            raise RasterError(f"{path}: header line {n + 1} {lines[n]!r} has no number") from None
        n += 1
    for key in ("ncols", "nrows"):
        if key not in header:
            raise RasterError(f"{path}: header lacks {key}")
    if "cellsize" in header:
        dx = dy = header["cellsize"]
    elif "dx" in header and "dy" in header:
        dx, dy = header["dx"], header["dy"]
    else:
        raise RasterError(f"{path}: header lacks cellsize")
    if not (dx > 0 and dy > 0):
        raise RasterError(f"{path}: cellsize must be positive, got {dx}, {dy}")
    if "xllcorner" in header and "yllcorner" in header:
        x0, y0 = header["xllcorner"] + 0.5 * dx, header["yllcorner"] + 0.5 * dy
    elif "xllcenter" in header and "yllcenter" in header:
        x0, y0 = header["xllcenter"], header["yllcenter"]
    else:
        raise RasterError(f"{path}: header lacks xllcorner/yllcorner (or xllcenter/yllcenter)")
    nx, ny = _int_field(path, header, "ncols"), _int_field(path, header, "nrows")
    nodata = header.get("nodata_value")
    vals = _numbers(path, "\n".join(lines[n:]), nx * ny, "data")
    z = _apply_nodata(vals.reshape(ny, nx)[::-1], nodata)
    return Raster(np.ascontiguousarray(z), x0, y0, dx, dy, "cell", nodata)


def write_esri_ascii(path, raster: Raster, nodata: float = -9999.0) -> None:
    """Write an ESRI ASCII grid (cell registration: xllcorner = x0 - dx/2)."""
    if not np.isclose(raster.dx, raster.dy, rtol=1e-12, atol=0):
        raise ValueError(f"ESRI ASCII needs square cells, got dx={raster.dx}, dy={raster.dy}")
    ny, nx = raster.z.shape
    xll, yll = float(raster.x0 - 0.5 * raster.dx), float(raster.y0 - 0.5 * raster.dy)
    nodata, cell = float(nodata), float(raster.dx)
    z = np.where(np.isnan(raster.z), nodata, raster.z)
    head = (f"ncols {nx}\nnrows {ny}\nxllcorner {xll!r}\nyllcorner {yll!r}\n"
            f"cellsize {cell!r}\nNODATA_value {nodata!r}\n")
    body = "\n".join(" ".join(f"{v:.17g}" for v in row) for row in z[::-1])
    Path(path).write_text(head + body + "\n")


# ----------------------------------------------------------------------------- GeoTIFF
_TYPES = {1: "B", 2: "s", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i", 11: "f", 12: "d", 16: "Q"}


@numba.njit(cache=True)
def _lzw_decode(src, out):  # pragma: no cover - compiled
    """TIFF LZW (MSB bit order, early code-width change) into ``out``; returns bytes written."""
    prefix = np.zeros(4096, np.int32)
    suffix = np.zeros(4096, np.uint8)
    length = np.zeros(4096, np.int32)
    for c in range(256):
        suffix[c] = c
        length[c] = 1
        prefix[c] = -1
    nsrc = src.size
    bitpos = 0
    width = 9
    nxt = 258
    old = -1
    n = 0
    nout = out.size
    while True:
        if bitpos + width > nsrc * 8:
            break
        code = 0
        for _ in range(width):
            byte = src[bitpos >> 3]
            code = (code << 1) | ((byte >> (7 - (bitpos & 7))) & 1)
            bitpos += 1
        if code == 257:
            break
        if code == 256:
            width = 9
            nxt = 258
            old = -1
            continue
        if old == -1:
            if n < nout:
                out[n] = code
            n += 1
            old = code
            continue
        if code < nxt:
            entry = code
        else:
            entry = old
        # write string of entry
        ln = length[entry]
        pos = n + ln - 1
        c = entry
        while c != -1:
            if pos < nout:
                out[pos] = suffix[c]
            first = suffix[c]
            c = prefix[c]
            pos -= 1
        n += ln
        if code >= nxt:  # KwKwK: old string + its first character
            if n < nout:
                out[n] = first
            n += 1
        if nxt < 4096:
            prefix[nxt] = old
            suffix[nxt] = first
            length[nxt] = length[old] + 1
            nxt += 1
        old = code
        if nxt + 1 >= (1 << width) and width < 12:
            width += 1
    return n


def _tiff_tags(path, data):
    if data[:2] == b"II":
        bo = "<"
    elif data[:2] == b"MM":
        bo = ">"
    else:
        raise RasterError(f"{path}: not a TIFF file (no II/MM byte-order mark)")
    magic = struct.unpack(bo + "H", data[2:4])[0]
    if magic == 43:
        raise RasterError(f"{path}: BigTIFF is not supported")
    if magic != 42:
        raise RasterError(f"{path}: not a TIFF file (magic {magic})")
    off = struct.unpack(bo + "I", data[4:8])[0]
    try:
        n = struct.unpack(bo + "H", data[off:off + 2])[0]
        tags = {}
        for k in range(n):
            e = data[off + 2 + 12 * k: off + 14 + 12 * k]
            tag, typ, count = struct.unpack(bo + "HHI", e[:8])
            if typ not in _TYPES:
                continue
            fmt = _TYPES[typ]
            size = struct.calcsize(fmt) * count
            raw = e[8:8 + size] if size <= 4 else data[
                struct.unpack(bo + "I", e[8:12])[0]:struct.unpack(bo + "I", e[8:12])[0] + size]
            if typ == 2:
                tags[tag] = raw.rstrip(b"\0").decode("latin-1")
            else:
                tags[tag] = struct.unpack(bo + fmt * count, raw)
    except struct.error as e:
        raise RasterError(f"{path}: truncated TIFF directory ({e})") from None
    return bo, tags


def read_geotiff(path) -> Raster:
    """Read a single-band GeoTIFF (see the module docstring for what is supported)."""
    path = Path(path)
    data = path.read_bytes()
    bo, tags = _tiff_tags(path, data)

    def one(tag, default=None, name=""):
        if tag not in tags:
            if default is None:
                raise RasterError(f"{path}: TIFF tag {tag} ({name}) missing")
            return default
        return tags[tag][0]

    nx, ny = one(256, name="ImageWidth"), one(257, name="ImageLength")
    bits = one(258, 8)
    comp = one(259, 1)
    spp = one(277, 1)
    pred = one(317, 1)
    sfmt = one(339, 1)
    planar = one(284, 1)
    if spp != 1:
        raise RasterError(f"{path}: {spp} samples per pixel; only single-band rasters")
    if planar not in (1, 2):
        raise RasterError(f"{path}: bad PlanarConfiguration {planar}")
    kinds = {(3, 32): "f4", (3, 64): "f8", (1, 8): "u1", (1, 16): "u2", (1, 32): "u4",
             (2, 8): "i1", (2, 16): "i2", (2, 32): "i4"}
    if (sfmt, bits) not in kinds:
        raise RasterError(f"{path}: sample format {sfmt} with {bits} bits is not supported")
    dtype = np.dtype(kinds[(sfmt, bits)]).newbyteorder(bo)
    if comp not in (1, 5, 8, 32946):
        raise RasterError(f"{path}: compression {comp} not supported (1, 5=LZW, 8=deflate)")
    if pred not in (1, 2, 3):
        raise RasterError(f"{path}: predictor {pred} not supported")
    if 322 in tags:
        bw, bh = one(322), one(323, name="TileLength")
        offsets, counts = tags[324], tags[325]
    else:
        bw, bh = nx, one(278, ny)
        offsets, counts = tags.get(273), tags.get(279)
        if offsets is None or counts is None:
            raise RasterError(f"{path}: neither strips nor tiles described")
    nbx, nby = -(-nx // bw), -(-ny // bh)
    if len(offsets) != nbx * nby or len(counts) != len(offsets):
        raise RasterError(f"{path}: {len(offsets)} blocks, expected {nbx * nby}")
    isz = dtype.itemsize
    full = np.zeros((nby * bh, nbx * bw), dtype=dtype.newbyteorder("="))
    for k, (o, c) in enumerate(zip(offsets, counts)):
        raw = data[o:o + c]
        if len(raw) != c:
            raise RasterError(f"{path}: block {k} runs past the end of the file")
        nbytes = bw * bh * isz
        if comp == 1:
            buf = np.frombuffer(raw, np.uint8)
        elif comp == 5:
            out = np.zeros(nbytes, np.uint8)
            _lzw_decode(np.frombuffer(raw, np.uint8), out)
            buf = out
        else:
            try:
                buf = np.frombuffer(zlib.decompress(raw), np.uint8)
            except zlib.error as e:
                raise RasterError(f"{path}: block {k} is not valid deflate data: {e}") from None
        rows = bh if 322 in tags else min(bh, ny - (k // nbx) * bh)
        if buf.size < rows * bw * isz:
            raise RasterError(f"{path}: block {k} holds {buf.size} bytes, expected {nbytes}")
        buf = buf[: rows * bw * isz]
        if pred == 3:  # floating-point predictor: byte planes, differenced
            b = buf.reshape(rows, bw * isz).astype(np.uint8)
            b = np.cumsum(b, axis=1, dtype=np.uint8)
            b = b.reshape(rows, isz, bw).transpose(0, 2, 1)
            if bo == "<":
                b = b[:, :, ::-1]
            block = np.ascontiguousarray(b).view(dtype).reshape(rows, bw)
        else:
            block = buf.view(dtype).reshape(rows, bw)
            if pred == 2:
                block = np.cumsum(block, axis=1, dtype=block.dtype)
        by, bx = divmod(k, nbx)
        full[by * bh: by * bh + rows, bx * bw:(bx + 1) * bw] = block
    z = full[:ny, :nx].astype(np.float64)
    nodata = None
    if 42113 in tags:
        try:
            nodata = float(tags[42113])
        except ValueError:
            raise RasterError(f"{path}: GDAL_NODATA {tags[42113]!r} is not a number") from None
        z = _apply_nodata(z, nodata)
    if 33550 not in tags or 33922 not in tags:
        raise RasterError(f"{path}: no ModelPixelScale/ModelTiepoint tags: not georeferenced")
    sx, sy = tags[33550][:2]
    i0, j0, _, X, Y, _ = tags[33922][:6]
    keys = tags.get(34735, ())
    raster_type = 1
    epsg = None
    for k in range(4, len(keys) - 3, 4):
        if keys[k] == 1025 and keys[k + 1] == 0:
            raster_type = keys[k + 3]
        if keys[k] in (3072, 2048) and keys[k + 1] == 0:
            epsg = keys[k + 3]
    # top-left of pixel (i0, j0) is (X, Y) for PixelIsArea; the pixel centre for PixelIsPoint
    shift = 0.5 if raster_type == 1 else 0.0
    x0 = X + (shift - i0) * sx
    ytop = Y - (shift - j0) * sy
    y0 = ytop - (ny - 1) * sy
    meta = {"epsg": epsg, "raster_type": raster_type}
    return Raster(np.ascontiguousarray(z[::-1]), x0, y0, sx, sy,
                  "cell" if raster_type == 1 else "node", nodata, meta)


def write_geotiff(path, raster: Raster, dtype="float32", compress: bool = False,
                  epsg: int | None = None, nodata: float | None = -9999.0) -> None:
    """Write a single-band float GeoTIFF (strips; deflate when ``compress``).

    ``epsg`` sets ProjectedCSTypeGeoKey (or GeographicTypeGeoKey for 4326); NaN is
    written as ``nodata`` with the GDAL_NODATA tag (``None``: NaN stays NaN)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    z = raster.z[::-1].astype(dtype)
    if nodata is not None:
        z = np.where(np.isnan(z), dtype.type(nodata), z)
    ny, nx = z.shape
    rows_per_strip = max(1, 65536 // (nx * dtype.itemsize))
    strips = []
    for r in range(0, ny, rows_per_strip):
        raw = np.ascontiguousarray(z[r:r + rows_per_strip]).astype("<" + dtype.str[1:]).tobytes()
        strips.append(zlib.compress(raw, 6) if compress else raw)
    area = raster.registration == "cell"
    # tiepoint: top-left corner of pixel (0, 0) (PixelIsArea) or its centre (PixelIsPoint)
    X = raster.x0 - (0.5 * raster.dx if area else 0.0)
    Y = raster.y0 + (ny - 1) * raster.dy + (0.5 * raster.dy if area else 0.0)
    geokeys = [1, 1, 0, 0]
    entries = [(1024, 0, 1, 2 if epsg == 4326 else 1), (1025, 0, 1, 1 if area else 2)]
    if epsg is not None:
        entries.append((2048 if epsg == 4326 else 3072, 0, 1, int(epsg)))
    geokeys[3] = len(entries)
    for e in entries:
        geokeys.extend(e)
    tags = [
        (256, 4, [nx]), (257, 4, [ny]), (258, 3, [8 * dtype.itemsize]),
        (259, 3, [8 if compress else 1]), (262, 3, [1]), (273, 4, None),
        (277, 3, [1]), (278, 4, [rows_per_strip]), (279, 4, [len(s) for s in strips]),
        (284, 3, [1]), (339, 3, [3]), (33550, 12, [raster.dx, raster.dy, 0.0]),
        (33922, 12, [0.0, 0.0, 0.0, X, Y, 0.0]), (34735, 3, geokeys),
    ]
    if nodata is not None:
        tags.append((42113, 2, repr(float(nodata)).encode() + b"\0"))
    # layout: header, IFD, out-of-line tag values, strips
    n = len(tags)
    ifd_size = 2 + 12 * n + 4
    extra = bytearray()
    base = 8 + ifd_size
    strip_base_placeholder = []
    entries_bin = []
    strip_total = sum(len(s) for s in strips)
    # offsets of strips depend on extra's size: compute extra first with dummy offsets
    for tag, typ, vals in tags:
        if tag == 273:
            vals = [0] * len(strips)
        if typ == 2:
            payload = vals
            count = len(vals)
        else:
            payload = struct.pack("<" + _TYPES[typ] * len(vals), *vals)
            count = len(vals)
        entries_bin.append([tag, typ, count, payload])
    for e in entries_bin:
        if len(e[3]) > 4:
            if len(extra) % 2:
                extra.append(0)
            e.append(base + len(extra))
            extra.extend(e[3])
        else:
            e.append(None)
    strip_start = base + len(extra)
    offs, pos = [], strip_start
    for s in strips:
        offs.append(pos)
        pos += len(s)
    del strip_base_placeholder, strip_total
    for e in entries_bin:  # now the real strip offsets
        if e[0] == 273:
            e[3] = struct.pack("<" + "I" * len(offs), *offs)
            if e[4] is not None:
                extra[e[4] - base:e[4] - base + len(e[3])] = e[3]
    out = bytearray(b"II*\0" + struct.pack("<I", 8))
    out += struct.pack("<H", n)
    for tag, typ, count, payload, where in entries_bin:
        if where is None:
            out += struct.pack("<HHI", tag, typ, count) + payload.ljust(4, b"\0")
        else:
            out += struct.pack("<HHII", tag, typ, count, where)
    out += struct.pack("<I", 0)
    out += extra
    for s in strips:
        out += s
    Path(path).write_bytes(bytes(out))


def fill_nodata(raster: Raster, max_sweeps: int = 1000) -> Raster:
    """A copy with NaN values replaced, sweep by sweep, by the mean of their valid
    4-neighbours (for thin NODATA borders or small holes; says so in ``meta``)."""
    z = raster.z.copy()
    nan = np.isnan(z)
    if nan.all():
        raise ValueError("fill_nodata: every value is NODATA")
    sweeps = 0
    while nan.any():
        if sweeps == max_sweeps:
            raise ValueError(f"fill_nodata: holes remain after {max_sweeps} sweeps")
        p = np.pad(np.where(nan, 0.0, z), 1)
        w = np.pad((~nan).astype(float), 1)
        s = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]
        n = w[:-2, 1:-1] + w[2:, 1:-1] + w[1:-1, :-2] + w[1:-1, 2:]
        fill = nan & (n > 0)
        z[fill] = s[fill] / n[fill]
        nan &= ~fill
        sweeps += 1
    meta = dict(raster.meta, filled_nodata=int(np.isnan(raster.z).sum()))
    return Raster(z, raster.x0, raster.y0, raster.dx, raster.dy, raster.registration,
                  raster.nodata, meta)


# ----------------------------------------------------------------------------- dispatch
def read_raster(path, topotype: int | None = None) -> Raster:
    """Read by ``topotype`` (1, 2, 3) or by extension: .tt1/.tt2/.tt3/.topo (3),
    .asc (ESRI ASCII), .tif/.tiff (GeoTIFF)."""
    path = Path(path)
    if not path.exists():
        raise RasterError(f"{path}: no such file")
    if topotype is not None:
        return read_topotype(path, topotype)
    ext = path.suffix.lower()
    if ext in (".tt1", ".xyz"):
        return read_topotype(path, 1)
    if ext == ".tt2":
        return read_topotype(path, 2)
    if ext in (".tt3", ".topo"):
        return read_topotype(path, 3)
    if ext == ".asc":
        return read_esri_ascii(path)
    if ext in (".tif", ".tiff"):
        return read_geotiff(path)
    raise RasterError(f"{path}: unknown raster extension {ext!r}; give topotype")
