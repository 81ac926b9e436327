"""Damaged and hostile raster and deformation files: the cases of issue 30, GeoTIFF
variants against Pillow (libtiff), and fuzzing of every reader (``tests/fuzzsupport.py``:
seeded mutations of valid files read in a child process under memory and time limits;
each must give a well-formed result or one RasterError line naming the file)."""

import struct
import subprocess
import sys

import numpy as np
import pytest
from forestpy.extensions.geoclaw.dtopo import DTopography, read_dtopo, write_dtopo
from forestpy.extensions.geoclaw.rasters import (
    Raster,
    RasterError,
    read_geotiff,
    read_raster,
    write_esri_ascii,
    write_geotiff,
    write_topotype,
)
from fuzzsupport import fuzz_case
from tiffs import write_tiff

from forestpy.errors import InputFileError

RNG = np.random.default_rng(30)
Z = RNG.random((13, 11)) * 10 - 2


def _ifd_entry(data: bytes, tag: int) -> int:
    """Offset of the directory entry of ``tag`` in a little-endian TIFF."""
    off = struct.unpack_from("<I", data, 4)[0]
    for k in range(struct.unpack_from("<H", data, off)[0]):
        e = off + 2 + 12 * k
        if struct.unpack_from("<H", data, e)[0] == tag:
            return e
    raise KeyError(tag)


@pytest.fixture(scope="module")
def tif(tmp_path_factory):
    path = tmp_path_factory.mktemp("tif") / "a.tif"
    write_geotiff(path, Raster(Z, 1.0, 2.0, 0.5, 0.5, "cell"), compress=True)
    return path


@pytest.mark.parametrize("size", [0, 3, 6, 7])
def test_geotiff_cut_to_a_few_bytes(tif, tmp_path, size):
    bad = tmp_path / "cut.tif"
    bad.write_bytes(tif.read_bytes()[:size])
    with pytest.raises(RasterError, match=f"cut.tif: {size} bytes, too short"):
        read_raster(bad)


@pytest.mark.parametrize("tag", [256, 273, 279, 33550, 34735])
def test_geotiff_corrupt_tag_count_is_refused_at_once(tif, tmp_path, tag):
    """A count of 0xFF000001 (from 1 or a few) made the old reader build a 4.3e9-character
    format string (65 s, 8.5 GB); it must be refused before anything is allocated: in a
    child limited to 512 MiB of address space and 20 s."""
    data = bytearray(tif.read_bytes())
    struct.pack_into("<I", data, _ifd_entry(data, tag) + 4, 0xFF000001)
    bad = tmp_path / "count.tif"
    bad.write_bytes(bytes(data))
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))\n"
        "from forestpy.extensions.geoclaw.rasters import RasterError, read_raster\n"
        "try:\n"
        f"    read_raster({str(bad)!r})\n"
        "except RasterError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"count.tif: TIFF tag {tag}" in out.stdout and "4278190081" in out.stdout


def test_geotiff_hostile_sizes(tmp_path):
    z = RNG.random((40, 24)).astype(np.float32)  # 2 x 3 tiles
    good = write_tiff(tmp_path / "g.tif", z, compression=8, tile=16).read_bytes()
    for tag, value, match in [
        (256, 0xFFFFFFFF, "image of 4294967295 x 40 pixels: beyond"),
        (257, 1 << 14, "6 block offsets and 6 sizes, expected 2048"),
        (322, 0xFFF0, "6 block offsets and 6 sizes, expected 3"),  # one tile that wide
        (322, 24, "blocks of 24 x 16 pixels"),  # tiles are multiples of 16
    ]:
        data = bytearray(good)
        e = _ifd_entry(data, tag)
        typ = struct.unpack_from("<H", data, e + 2)[0]
        struct.pack_into("<H" if typ == 3 else "<I", data, e + 8, value)
        (tmp_path / "h.tif").write_bytes(bytes(data))
        with pytest.raises(RasterError, match=match):
            read_geotiff(tmp_path / "h.tif")


def test_geotiff_zip_bomb_block_is_refused(tmp_path):
    """A deflate block cannot hold more than 1032 times its size: a header claiming a
    larger image is refused before decompressing."""
    z = np.zeros((64, 64), np.float32)
    path = write_tiff(tmp_path / "b.tif", z, compression=8)
    data = bytearray(path.read_bytes())
    for tag in (256, 257):
        struct.pack_into("<I", data, _ifd_entry(data, tag) + 8, 60000)
    struct.pack_into("<I", data, _ifd_entry(data, 278) + 8, 60000)
    path.write_bytes(bytes(data))
    with pytest.raises(RasterError, match="too few for the 14400000000 bytes"):
        read_geotiff(path)


@pytest.mark.parametrize("compression", [1, 5, 8])
@pytest.mark.parametrize("predictor,dtype", [(1, "f4"), (2, "i2"), (3, "f4"), (3, "f8"),
                                             (1, "u1"), (2, "i4")])
@pytest.mark.parametrize("layout", [dict(tile=16), dict(rows_per_strip=5), {}])
def test_geotiff_variants_match_libtiff(tmp_path, compression, predictor, dtype, layout):
    """Tiles and strips, LZW and deflate, predictors 2 and 3 (which uncompressed data
    ignores): our reader gives what Pillow (libtiff) reads from the same file."""
    from PIL import Image

    if predictor == 1 and dtype == "f4":
        z = RNG.random((37, 29)).astype(dtype)
    else:
        z = RNG.integers(-100 if dtype[0] == "i" else 0, 100, (37, 29)).astype(dtype)
    path = write_tiff(tmp_path / "v.tif", z, compression=compression, predictor=predictor,
                      **layout)
    r = read_geotiff(path)
    assert np.array_equal(r.z, z[::-1].astype(np.float64))
    assert (r.x0, r.dx, r.dy, r.registration) == (10.25, 0.5, 0.25, "cell")
    if dtype != "f8":  # Pillow has no 64-bit float mode
        with Image.open(path) as im:
            assert np.array_equal(np.array(im), z)


def test_predictor_must_fit_the_samples(tmp_path):
    path = write_tiff(tmp_path / "p.tif", RNG.integers(0, 9, (8, 8)).astype("i2"),
                      compression=8, predictor=2)
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, _ifd_entry(data, 317) + 8, 3)
    path.write_bytes(bytes(data))
    with pytest.raises(RasterError, match="predictor 3 not supported for sample format 2"):
        read_geotiff(path)


def test_ascii_headers_and_values(tmp_path):
    r = Raster(Z, 1.0, 2.0, 0.5, 0.5, "cell")
    write_esri_ascii(tmp_path / "a.asc", r)
    text = (tmp_path / "a.asc").read_text()
    for old, new, match in [
        ("ncols 11", "ncols nan", "ncols=nan is not a positive integer"),
        ("ncols 11", "ncols inf", "ncols=inf is not a positive integer"),
        ("cellsize 0.5", "cellsize inf", "cellsize must be positive and finite"),
        ("xllcorner 0.75", "xllcorner nan", "xll=nan is not a finite number"),
        ("nrows 13", "nrows 1000000000", "data has 143 values, header says 11000000000"),
    ]:
        assert old in text, old
        (tmp_path / "b.asc").write_text(text.replace(old, new))
        with pytest.raises(RasterError, match=match):
            read_raster(tmp_path / "b.asc")
    lines = text.splitlines()
    lines[7] = lines[7].replace(lines[7].split()[2], "inf", 1)
    (tmp_path / "c.asc").write_text("\n".join(lines))
    with pytest.raises(RasterError, match="infinite value in the data"):
        read_raster(tmp_path / "c.asc")
    (tmp_path / "d.asc").write_bytes(text.encode()[:40] + b"\xff\xfe\x00" + text.encode()[40:])
    with pytest.raises(RasterError, match="d.asc"):
        read_raster(tmp_path / "d.asc")


def test_topotype_1_points_off_the_grid(tmp_path):
    node = Raster(Z, 1.0, 2.0, 0.5, 0.5, "node")
    write_topotype(tmp_path / "a.tt1", node, 1)
    lines = (tmp_path / "a.tt1").read_text().splitlines()
    dup = lines[:]
    dup[1] = dup[0]  # a point twice: the grid would keep a hole
    (tmp_path / "b.tt1").write_text("\n".join(dup))
    with pytest.raises(RasterError, match="do not form a full grid"):
        read_raster(tmp_path / "b.tt1")
    nan = lines[:]
    nan[3] = "nan " + " ".join(nan[3].split()[1:])
    (tmp_path / "c.tt1").write_text("\n".join(nan))
    with pytest.raises(RasterError, match="a coordinate is not finite"):
        read_raster(tmp_path / "c.tt1")


def test_dtopo_header_values(tmp_path):
    d = DTopography(RNG.random((2, 4, 5)), [0.0, 1.0], 0.0, 0.0, 0.5, 0.5)
    write_dtopo(tmp_path / "a.tt3", d, 3)
    text = (tmp_path / "a.tt3").read_text()
    lines = text.splitlines()
    for k, value, match in [(0, "inf", "mx=inf is not a finite number"),
                            (8, "-1.0", "must be positive"), (6, "0", "must be positive"),
                            (2, "1", "frames has 40 values, header says 20")]:
        bad = lines[:]
        bad[k] = value + " " + " ".join(bad[k].split()[1:])
        (tmp_path / "b.tt3").write_text("\n".join(bad))
        with pytest.raises(RasterError, match=match):
            read_dtopo(tmp_path / "b.tt3")


def test_raster_error_is_the_input_error():
    assert issubclass(RasterError, InputFileError) and issubclass(RasterError, ValueError)


# --------------------------------------------------------------------------- fuzzing
@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Valid files of every format the readers take, small."""
    d = tmp_path_factory.mktemp("seeds")
    cell = Raster(Z, 1.0, 2.0, 0.5, 0.25, "cell")
    node = Raster(Z[:6, :5], 1.0, 2.0, 0.5, 0.5, "node")
    write_geotiff(d / "deflate.tif", cell, compress=True, nodata=-9999.0, epsg=32756)
    write_geotiff(d / "plain.tif", cell, dtype="float64", compress=False)
    z32 = RNG.random((40, 24)).astype(np.float32)
    write_tiff(d / "lzw_tiles_p3.tif", z32, compression=5, predictor=3, tile=16)
    write_tiff(d / "lzw_strips_p2.tif", RNG.integers(-50, 50, (21, 9)).astype("i2"),
               compression=5, predictor=2, rows_per_strip=4, nodata=-50)
    write_tiff(d / "deflate_tiles.tif", z32[:20], compression=8, tile=16)
    write_esri_ascii(d / "a.asc", Raster(Z[:7, :6], 1.0, 2.0, 0.5, 0.5, "cell"))
    for tt in (1, 2, 3):
        write_topotype(d / f"a.tt{tt}", node, tt)
    dt = DTopography(RNG.random((3, 4, 5)), [0.0, 0.5, 1.0], 0.0, 0.0, 0.5, 0.5)
    write_dtopo(d / "d.tt3", dt, 3)
    write_dtopo(d / "d.tt1", DTopography(dt.dz[:2, :3, :3], [0.0, 1.0], 0, 0, 1.0, 1.0), 1)
    return d


CASES = {  # reader, checker, seed files with their mutation kinds, count in the fast suite
    "geotiff": ("forestpy.extensions.geoclaw.rasters:read_raster",
                "fuzzsupport:check_raster",
                [("deflate.tif", "tiff"), ("plain.tif", "tiff"), ("lzw_tiles_p3.tif", "tiff"),
                 ("lzw_strips_p2.tif", "tiff"), ("deflate_tiles.tif", "tiff")], 1500),
    "ascii": ("forestpy.extensions.geoclaw.rasters:read_raster", "fuzzsupport:check_raster",
              [("a.asc", "text"), ("a.tt1", "text"), ("a.tt2", "text"), ("a.tt3", "text")],
              1500),
    "dtopo": ("forestpy.extensions.geoclaw.dtopo:read_dtopo", "fuzzsupport:check_dtopo",
              [("d.tt3", "text"), ("d.tt1", "text")], 800),
}


def _run(name, seeds, tmp_path, count, seed):
    fuzz_case(CASES[name], seeds.joinpath, count=count, seed=seed, work=tmp_path,
              need_ok=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz(name, seeds, tmp_path):
    _run(name, seeds, tmp_path, CASES[name][3], seed=1)


# many more mutations, other seeds: minutes
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_sweep(name, seeds, tmp_path):
    for seed in (2, 3, 4):
        _run(name, seeds, tmp_path, 10 * CASES[name][3], seed=seed)
