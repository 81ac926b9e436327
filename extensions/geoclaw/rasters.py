"""Raster file formats for topography: GeoClaw topotype 1/2/3, ESRI ASCII grids, GeoTIFF.

Every reader returns a :class:`Raster`: values ``z[ny, nx]`` with row 0 the southmost,
the coordinates ``(x0, y0)`` of the first value (south-west), spacings ``dx, dy`` and
the registration (``"node"``: values at the given points, GeoClaw topotypes;
``"cell"``: values at centres of cells whose lower-left corner is given, ESRI ASCII
and GeoTIFF "PixelIsArea").  ``x0, y0`` always name the point of value ``z[0, 0]``,
so a cell-registered grid has ``x0 = xllcorner + dx/2``.  NODATA values become NaN.

Malformed, truncated or hostile files raise :class:`RasterError` (an
:class:`~forestpy.errors.InputFileError`) with one message naming the file and the
problem; every count, offset and size a file states is checked against the file's
length and :data:`~forestpy.errors.MAX_ARRAY_BYTES` before anything is allocated
(``tests/extensions/geoclaw/test_fuzz_rasters.py`` fuzzes every reader).  The GeoTIFF
code is a small baseline-TIFF reader (strips or tiles, uncompressed, deflate or LZW,
predictor 1/2/3, float32/64 or integer samples, one band) and a writer of uncompressed
or deflate float32/float64 GeoTIFFs with ModelPixelScale/ModelTiepoint/GeoKeyDirectory
tags; no third-party dependency.  (``tifffile`` was measured as a replacement: it needs
``imagecodecs``, 80 MB of native codecs, to read LZW such as the vendored Eden DEM, and
on mutated files it raised MemoryError, TypeError, IndexError and struct.error, so the
same checks would still be needed in front of it.)
"""

from __future__ import annotations

import io
import math
import struct
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np

from forestpy.errors import MAX_ARRAY_BYTES, InputFileError

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


class RasterError(InputFileError):
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
def _read_text(path) -> str:
    """The file as text: bytes that are no ASCII become characters that no number
    parses (latin-1), so a damaged file fails where its numbers are read."""
    try:
        return Path(path).read_bytes().decode("latin-1")
    except OSError as e:
        raise RasterError(f"{path}: cannot be read ({e.strerror or e})") from None


def _int_field(path, header, key):
    v = header[key]
    if not (math.isfinite(v) and v == int(v) and v >= 1):
        raise RasterError(f"{path}: header {key}={v} is not a positive integer")
    return int(v)


def _finite(path, **values):
    """Raise unless every header value is a finite number."""
    for key, v in values.items():
        if not math.isfinite(v):
            raise RasterError(f"{path}: header {key}={v} is not a finite number")


def _spacing(path, dx, dy):
    if not (0 < dx < math.inf and 0 < dy < math.inf):
        raise RasterError(f"{path}: cellsize must be positive and finite, got {dx}, {dy}")


def _numbers(path, text, expected, what):
    words = text.split()
    if len(words) != expected:  # counted before any number is made
        raise RasterError(f"{path}: {what} has {len(words)} values, header says {expected}")
    try:
        vals = np.array(words, dtype=np.float64)
    except ValueError as e:
        raise RasterError(f"{path}: non-numeric value in the {what}: {e}") from None
    if np.isinf(vals).any():
        raise RasterError(f"{path}: infinite value in the {what}")
    return vals


def _table(path, text, ncols, what):
    """Lines of ``ncols`` numbers (``#`` comments and blank lines skipped) as an
    ``(n, ncols)`` array of finite numbers (the last column may hold NaN)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data"
            data = np.loadtxt(io.StringIO(text), dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise RasterError(f"{path}: {what}: {' '.join(str(e).split())[:200]}") from None
    if data.shape[1] != ncols or data.shape[0] == 0:
        raise RasterError(f"{path}: {what}: found {data.shape[0]} lines of {data.shape[1]} "
                          f"columns")
    if not np.isfinite(data[:, :-1]).all() or np.isinf(data[:, -1]).any():
        raise RasterError(f"{path}: {what}: a coordinate is not finite or a value infinite")
    return data


def _grid_index(path, coords, what):
    """``(unique values, index of each point)`` of one coordinate of a point list on a
    uniform grid of at least 2 points, or :class:`RasterError`."""
    u = np.unique(coords)
    if u.size < 2:
        raise RasterError(f"{path}: {what} points do not span a grid (one {what} value)")
    d = np.diff(u)
    if np.ptp(d) > 1e-6 * d[0] or not np.isfinite((u[-1] - u[0]) / d[0]):
        raise RasterError(f"{path}: {what} points are not uniformly spaced")
    return u, np.rint((coords - u[0]) / d[0]).astype(np.int64)


def _apply_nodata(z, nodata):
    if nodata is not None and np.isfinite(nodata):
        z = np.where(z == nodata, np.nan, z)
    return z


# ----------------------------------------------------------------------------- topotypes
def read_topotype(path, topotype: int, nodata: float = -9999.0) -> Raster:
    """Read a GeoClaw topography file of type 1 (``x y z`` lines), 2 or 3.

    Types 2 and 3 name their NODATA value in the header; for type 1 it is ``nodata``."""
    path = Path(path)
    if topotype not in (1, 2, 3):
        raise RasterError(f"{path}: unknown topotype {topotype} (1, 2 or 3)")
    text = _read_text(path)
    if topotype == 1:
        data = _table(path, text, 3, "topotype 1 needs lines 'x y z'")
        xs, i = _grid_index(path, data[:, 0], "x")
        ys, j = _grid_index(path, data[:, 1], "y")
        flat = j * xs.size + i
        if xs.size * ys.size != len(data) or np.unique(flat).size != len(data):
            raise RasterError(f"{path}: topotype 1 points do not form a full grid")
        z = np.full((ys.size, xs.size), np.nan)
        z.flat[flat] = data[:, 2]
        z = _apply_nodata(z, nodata)
        return Raster(z, xs[0], ys[0], float(np.diff(xs).mean()), float(np.diff(ys).mean()),
                      "node", nodata)
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
            raise RasterError(f"{path}: header line {k + 1} {lines[k][:80]!r} has no number")
        h[keys[k]] = nums if k == 4 else nums[0]
    nx = _int_field(path, h, "ncols")
    ny = _int_field(path, h, "nrows")
    dx = h["cellsize"][0]
    dy = h["cellsize"][1] if len(h["cellsize"]) > 1 else dx
    _spacing(path, dx, dy)
    _finite(path, xlower=h["xlower"], ylower=h["ylower"])
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
    lines = _read_text(path).splitlines()
    header = {}
    n = 0
    while n < len(lines) and lines[n].strip() and lines[n].split()[0][0].isalpha():
        parts = lines[n].split()
        if len(parts) != 2:
            raise RasterError(
                f"{path}: header line {n + 1} {lines[n][:80]!r} is not 'name value'")
        try:
            header[parts[0].lower()] = float(parts[1])
        except ValueError:
            raise RasterError(
                f"{path}: header line {n + 1} {lines[n][:80]!r} has no number") from None
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
    _spacing(path, dx, dy)
    if "xllcorner" in header and "yllcorner" in header:
        x0, y0 = header["xllcorner"] + 0.5 * dx, header["yllcorner"] + 0.5 * dy
    elif "xllcenter" in header and "yllcenter" in header:
        x0, y0 = header["xllcenter"], header["yllcenter"]
    else:
        raise RasterError(f"{path}: header lacks xllcorner/yllcorner (or xllcenter/yllcenter)")
    _finite(path, xll=x0, yll=y0)
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
_NPTYPES = {1: "u1", 2: "u1", 3: "u2", 4: "u4", 6: "i1", 8: "i2", 9: "i4", 11: "f4", 12: "f8",
            16: "u8"}


# what a compressed block may expand to, at most: deflate's bound is 1032-fold; a TIFF
# LZW table cycle (3838 codes of 9-12 bits, 5.4 kB) writes at most 7.4 MB, 1363-fold
_RATIO = {1: 1, 5: 1400, 8: 1032, 32946: 1032}


@numba.njit(cache=True)
def _lzw_decode(src, out):  # pragma: no cover - compiled
    """TIFF LZW (MSB bit order, early code-width change) into ``out``; returns bytes
    written (at most ``out.size``; more data than room is dropped), or -1 for a code
    that names no string yet (corrupt data): every string written is then a defined
    table entry, so no write leaves ``out``."""
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
    first = 0
    while n < nout:
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
            if code > 255:  # the first code after a clear is a literal
                return -1
            out[n] = code
            n += 1
            old = code
            continue
        if code > nxt:
            return -1
        entry = code if code < nxt else old
        # write the string of entry backwards from its last character
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
        if code == nxt:  # KwKwK: old string + its first character
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
    return min(n, nout)


class _Tiff:
    """The first image directory of a TIFF in memory, every read bounds-checked.

    ``tags`` maps a tag to ``(type, count, value offset)`` only; values are decoded on
    demand (:meth:`ints`, :meth:`floats`, :meth:`text`), after checking that they lie
    inside the file, so that no count read from the file makes anything large."""

    def __init__(self, path, data: bytes):
        self.path, self.data, self.size = path, data, len(data)
        if self.size < 8:
            self.fail(f"{self.size} bytes, too short for a TIFF header (8)")
        if data[:2] == b"II":
            self.bo = "<"
        elif data[:2] == b"MM":
            self.bo = ">"
        else:
            self.fail("not a TIFF file (no II/MM byte-order mark)")
        magic = self.unpack("H", 2)[0]
        if magic == 43:
            self.fail("BigTIFF is not supported")
        if magic != 42:
            self.fail(f"not a TIFF file (magic {magic})")
        off = self.unpack("I", 4)[0]
        if off < 8 or off + 2 > self.size:
            self.fail(f"image directory offset {off} outside the file of {self.size} bytes")
        n = self.unpack("H", off)[0]
        if n == 0 or off + 2 + 12 * n > self.size:
            self.fail(f"image directory of {n} entries at {off} runs past the end of the "
                      f"file ({self.size} bytes)")
        self.tags: dict = {}
        for k in range(n):
            e = off + 2 + 12 * k
            tag, typ, count = self.unpack("HHI", e)
            if typ not in _TYPES or tag in self.tags:
                continue  # unknown type (skipped, as TIFF readers do) or a repeated tag
            nbytes = struct.calcsize(_TYPES[typ]) * count
            where = e + 8 if nbytes <= 4 else self.unpack("I", e + 8)[0]
            self.tags[tag] = (typ, count, where, nbytes)

    def fail(self, problem):
        raise RasterError(f"{self.path}: {problem}")

    def unpack(self, fmt, offset):
        fmt = self.bo + fmt
        end = offset + struct.calcsize(fmt)
        if end > self.size:
            self.fail(f"truncated: {end} bytes needed, the file has {self.size}")
        return struct.unpack_from(fmt, self.data, offset)

    def _values(self, tag, name, kinds):
        typ, count, where, nbytes = self.tags[tag]
        if typ not in kinds:
            self.fail(f"TIFF tag {tag} ({name}) has type {typ}, expected one of {kinds}")
        if count == 0:
            self.fail(f"TIFF tag {tag} ({name}) holds no value")
        if where + nbytes > self.size:
            self.fail(f"TIFF tag {tag} ({name}) claims {count} values at offset {where}, "
                      f"past the end of the file ({self.size} bytes)")
        dtype = np.dtype(_NPTYPES[typ]).newbyteorder(self.bo)
        return np.frombuffer(self.data, dtype, count, where)

    def ints(self, tag, name, default=None):
        """The values of an integer tag as an int64 array (``default`` if absent)."""
        if tag not in self.tags:
            if default is None:
                self.fail(f"TIFF tag {tag} ({name}) missing")
            return np.array([default], np.int64)
        v = self._values(tag, name, (1, 3, 4, 16))
        if v.dtype.itemsize == 8 and np.any(v >= 1 << 48):  # beyond any file
            self.fail(f"TIFF tag {tag} ({name}) holds a value beyond 2**48")
        return v.astype(np.int64)

    def one(self, tag, name, default=None) -> int:
        return int(self.ints(tag, name, default)[0])

    def floats(self, tag, name, least):
        v = self._values(tag, name, (11, 12)).astype(np.float64)
        if v.size < least or not np.isfinite(v[:least]).all():
            self.fail(f"TIFF tag {tag} ({name}) needs {least} finite numbers, "
                      f"holds {v[:least].tolist()}")
        return v

    def text(self, tag, name) -> str:
        return self._values(tag, name, (2,)).tobytes().rstrip(b"\0").decode("latin-1")


def read_geotiff(path) -> Raster:
    """Read a single-band GeoTIFF (see the module docstring for what is supported).

    Every count, offset and size in the file is checked against the file's length
    before use, and the decoded image against what its blocks can hold (compressed:
    deflate's or LZW's largest expansion) and :data:`~forestpy.errors.MAX_ARRAY_BYTES`,
    before anything is allocated; a malformed file raises :class:`RasterError`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RasterError(f"{path}: cannot be read ({e.strerror or e})") from None
    tif = _Tiff(path, data)
    fail = tif.fail

    nx, ny = tif.one(256, "ImageWidth"), tif.one(257, "ImageLength")
    if nx < 1 or ny < 1:
        fail(f"image of {nx} x {ny} pixels")
    bits = tif.one(258, "BitsPerSample", 8)
    comp = tif.one(259, "Compression", 1)
    spp = tif.one(277, "SamplesPerPixel", 1)
    pred = tif.one(317, "Predictor", 1)
    sfmt = tif.one(339, "SampleFormat", 1)
    planar = tif.one(284, "PlanarConfiguration", 1)
    if spp != 1:
        fail(f"{spp} samples per pixel; only single-band rasters")
    if planar not in (1, 2):
        fail(f"bad PlanarConfiguration {planar}")
    kinds = {(3, 32): "f4", (3, 64): "f8", (1, 8): "u1", (1, 16): "u2", (1, 32): "u4",
             (2, 8): "i1", (2, 16): "i2", (2, 32): "i4"}
    if (sfmt, bits) not in kinds:
        fail(f"sample format {sfmt} with {bits} bits is not supported")
    dtype = np.dtype(kinds[(sfmt, bits)]).newbyteorder(tif.bo)
    if comp not in _RATIO:
        fail(f"compression {comp} not supported (1, 5=LZW, 8=deflate)")
    if pred not in (1, 2, 3) or (pred == 3) != (sfmt == 3 and pred != 1):
        fail(f"predictor {pred} not supported for sample format {sfmt}")
    if comp == 1:  # a predictor applies to compressed data only (libtiff ignores it)
        pred = 1
    tiled = 322 in tif.tags
    if tiled:
        bw, bh = tif.one(322, "TileWidth"), tif.one(323, "TileLength")
        offsets, counts = tif.ints(324, "TileOffsets"), tif.ints(325, "TileByteCounts")
    else:
        if 273 not in tif.tags or 279 not in tif.tags:
            fail("neither strips nor tiles described")
        bw, bh = nx, min(tif.one(278, "RowsPerStrip", ny), ny)
        offsets, counts = tif.ints(273, "StripOffsets"), tif.ints(279, "StripByteCounts")
    if bw < 1 or bh < 1 or (tiled and (bw % 16 or bh % 16)):
        fail(f"blocks of {bw} x {bh} pixels")
    isz = dtype.itemsize
    for w, h, what in ((nx, ny, "image"), (bw, bh, "block")):  # before any array product
        if w * h * isz > MAX_ARRAY_BYTES:
            fail(f"{what} of {w} x {h} pixels: beyond {MAX_ARRAY_BYTES} bytes")
    nbx, nby = -(-nx // bw), -(-ny // bh)
    if len(offsets) != nbx * nby or len(counts) != len(offsets):
        fail(f"{len(offsets)} block offsets and {len(counts)} sizes, expected {nbx * nby}")
    rows = np.full(nby, bh) if tiled else np.minimum(bh, ny - bh * np.arange(nby))
    need = bw * isz * rows  # decoded bytes of the blocks of one block row
    end = offsets + counts
    if np.any(offsets < 0) or np.any(end > len(data)):
        k = int(np.argmax((offsets < 0) | (end > len(data))))
        fail(f"block {k} ({counts[k]} bytes at {offsets[k]}) runs past the end of the file "
             f"({len(data)} bytes)")
    ratio = _RATIO[comp]
    blocks_need = np.repeat(need, nbx)
    if np.any(blocks_need > ratio * counts + (64 if ratio > 1 else 0)):
        k = int(np.argmax(blocks_need > ratio * counts + (64 if ratio > 1 else 0)))
        fail(f"block {k} holds {counts[k]} bytes, too few for the {blocks_need[k]} bytes "
             f"of its {rows[k // nbx]} x {bw} pixels")
    # blocks may share bytes: bound their sum (and the image) by the file too
    height = nby * bh if tiled else ny
    if (int(blocks_need.sum()) > ratio * len(data) + 64 * nbx * nby
            or height * nbx * bw * isz > MAX_ARRAY_BYTES):
        fail(f"{nx} x {ny} pixels in {nbx * nby} blocks of {bw} x {bh}: more than the file of "
             f"{len(data)} bytes can hold")

    full = np.zeros((height, nbx * bw), dtype=dtype.newbyteorder("="))
    for k in range(nbx * nby):
        by, bx = divmod(k, nbx)
        r = int(rows[by])
        nbytes = r * bw * isz
        raw = data[offsets[k]:end[k]]
        if comp == 1:
            buf = np.frombuffer(raw, np.uint8, nbytes)
        elif comp == 5:
            buf = np.zeros(nbytes, np.uint8)
            if _lzw_decode(np.frombuffer(raw, np.uint8), buf) < 0:
                fail(f"block {k} is not valid LZW data")
        else:
            try:
                buf = np.frombuffer(zlib.decompressobj().decompress(raw, nbytes), np.uint8)
            except zlib.error as e:
                fail(f"block {k} is not valid deflate data: {e}")
            if buf.size < nbytes:
                fail(f"block {k} decompresses to {buf.size} bytes, expected {nbytes}")
        if pred == 3:  # floating-point predictor: byte planes, differenced
            b = np.cumsum(buf.reshape(r, bw * isz), axis=1, dtype=np.uint8)
            b = b.reshape(r, isz, bw).transpose(0, 2, 1)
            if tif.bo == "<":
                b = b[:, :, ::-1]
            block = np.ascontiguousarray(b).view(dtype).reshape(r, bw)
        else:
            block = buf.view(dtype).reshape(r, bw)
            if pred == 2:
                block = np.cumsum(block, axis=1, dtype=block.dtype)
        full[by * bh: by * bh + r, bx * bw:(bx + 1) * bw] = block
    with np.errstate(invalid="ignore"):  # signalling NaNs of float32 data
        z = full[:ny, :nx].astype(np.float64)
    del full
    nodata = None
    if 42113 in tif.tags:
        text = tif.text(42113, "GDAL_NODATA")
        try:
            nodata = float(text)
        except ValueError:
            fail(f"GDAL_NODATA {text[:40]!r} is not a number")
        z = _apply_nodata(z, nodata)
    if 33550 not in tif.tags or 33922 not in tif.tags:
        fail("no ModelPixelScale/ModelTiepoint tags: not georeferenced")
    sx, sy = tif.floats(33550, "ModelPixelScale", 2)[:2]
    i0, j0, _, X, Y, _ = tif.floats(33922, "ModelTiepoint", 6)[:6]
    if not (sx > 0 and sy > 0):
        fail(f"ModelPixelScale {sx}, {sy} is not positive")
    keys = tif.ints(34735, "GeoKeyDirectory", 0).tolist() if 34735 in tif.tags else []
    raster_type = 1
    epsg = None
    for k in range(4, len(keys) - 3, 4):
        if keys[k] == 1025 and keys[k + 1] == 0:
            raster_type = keys[k + 3]
        if keys[k] in (3072, 2048) and keys[k + 1] == 0:
            epsg = keys[k + 3]
    # top-left of pixel (i0, j0) is (X, Y) for PixelIsArea; the pixel centre for PixelIsPoint
    shift = 0.5 if raster_type == 1 else 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: refused below
        x0 = float(X + (shift - i0) * sx)
        ytop = Y - (shift - j0) * sy
        y0 = float(ytop - (ny - 1) * sy)
    if not (np.isfinite(x0) and np.isfinite(y0)):
        fail("the georeferencing gives a non-finite origin")
    meta = {"epsg": epsg, "raster_type": raster_type}
    return Raster(np.ascontiguousarray(z[::-1]), x0, y0, float(sx), float(sy),
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
