"""Compressed outputs: bit-rounded ParaView frames (read back with VTK) and gauge archives."""

import json
import math

import numpy as np
import pytest

from forestpy.callbacks import Gauges, read_gauges
from forestpy.errors import InputFileError
from forestpy.io.bitround import (
    bitround,
    field_tolerances,
    parse_tolerance,
    round_to_tolerance,
)


def _data(kind, n=20000, seed=0):
    rng = np.random.default_rng(seed)
    x = np.linspace(-3, 7, n)
    if kind == "smooth":
        return 2.0 + np.sin(x) * np.exp(-0.1 * x * x)
    if kind == "random":  # signs and exponents spread over 20 binades, zeros, subnormals
        v = rng.standard_normal(n) * 10.0 ** rng.uniform(-10, 10, n)
        v[::97] = 0.0
        v[::89] = -0.0
        v[::101] = 5e-324 * rng.integers(1, 1000, v[::101].size)
        return v
    if kind == "discontinuous":  # a bore: a jump of 3 orders of magnitude, dry cells
        return np.where(x < 1.0, 1e3 + x, np.where(x < 4.0, 0.25 * x, 0.0))
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["smooth", "random", "discontinuous"])
@pytest.mark.parametrize("tol", [0.3, 1e-4, 1e-11])
def test_rounding_respects_its_bound(kind, tol):
    x = _data(kind)
    r, err = round_to_tolerance(x, tol)
    actual = np.abs(r - x).max()
    assert actual == err <= tol
    # not wastefully tight: the rounding spends at least a quarter of the bound
    # (2**floor(log2 tol) >= tol / 2, reached by values with dropped bits)
    if np.abs(x).max() > tol * 1e3:
        assert err > tol / 4
    # fewer distinct bits: low mantissa bits are zero where values were rounded
    low = r.view(np.uint64) & np.uint64(0xFFFF)
    assert np.count_nonzero(low == 0) > np.count_nonzero((x.view(np.uint64) & 0xFFFF) == 0)
    assert np.array_equal(np.signbit(r), np.signbit(x))


def test_bitround_equals_a_brute_force_reference():
    # rounding x = m 2**E to k explicit bits is rint(m 2**(k+1)) 2**(E-k-1), ties to even
    rng = np.random.default_rng(1)
    x = rng.standard_normal(5000) * 10.0 ** rng.uniform(-5, 5, 5000)
    x[:8] = [1.25, 1.75, -1.25, 2.5, 3.5, 1 + 2**-52, 0.75, 6.0]  # ties and the smallest step
    k = rng.integers(0, 53, x.size)
    k[:8] = 1
    m, e = np.frexp(x)
    ref = np.ldexp(np.rint(np.ldexp(m, k + 1)), e - k - 1)
    got = bitround(x, k)
    assert np.array_equal(got.view(np.uint64), ref.view(np.uint64))
    assert list(got[:8]) == [1.0, 2.0, -1.0, 2.0, 4.0, 1.0, 0.75, 6.0]


def test_float32_and_non_finite_values():
    x = np.array([np.nan, np.inf, -np.inf, 1.0e30, -3.3, 0.0], np.float32)
    r, err = round_to_tolerance(x, 0.01)
    assert r.dtype == np.float32 and np.isnan(r[0]) and list(r[1:3]) == [np.inf, -np.inf]
    assert err <= 0.01 and abs(float(r[4]) - float(x[4])) <= 0.01
    big = np.array([np.finfo(np.float64).max], np.float64)
    r, err = round_to_tolerance(big, 1e300)  # rounding up would overflow: kept
    assert np.isfinite(r).all() and err <= 1e300


def test_zero_tolerance_is_bit_for_bit():
    x = _data("random")
    x[:4] = [np.nan, -0.0, np.inf, 5e-324]
    r, err = round_to_tolerance(x, 0.0)
    assert err == 0.0 and np.array_equal(r.view(np.uint64), x.view(np.uint64))
    assert np.array_equal(bitround(x, 52).view(np.uint64), x.view(np.uint64))


@pytest.mark.parametrize("bad", [-1e-3, float("nan"), float("inf"), "abc", None])
def test_bad_tolerances_give_one_clear_error(bad):
    with pytest.raises(ValueError, match="tolerance"):
        round_to_tolerance(np.ones(3), bad)
    with pytest.raises(ValueError, match="frame tolerance"):
        field_tolerances(bad, ["h"], np.ones((1, 1, 2, 2)))


def test_tolerance_forms():
    assert parse_tolerance("1e-4") == 1e-4
    assert parse_tolerance("h=0.01, hu=2e-3") == {"h": 0.01, "hu": 2e-3}
    for text in ["-1", "nan", "h=", "h=x", "=3", "fast"]:
        with pytest.raises(ValueError, match="frame tolerance"):
            parse_tolerance(text)
    vals = np.stack([np.full((2, 2, 2), 3.0), np.arange(8.0).reshape(2, 2, 2)], axis=1)
    assert field_tolerances(1e-2, ["a", "b"], vals) == [0.0, 0.07]  # constant: exact
    assert field_tolerances({"b": 0.5}, ["a", "b"], vals) == [0.0, 0.5]
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['c'\]"):
        field_tolerances({"c": 0.5}, ["a", "b"], vals)


# ---------------------------------------------------------------------- frames
@pytest.fixture(scope="module")
def dam(radial_dam):
    pytest.importorskip("vtkmodules")
    sim = radial_dam.setup(mx=8, min_level=1, max_level=3, t_final=0.06)
    sim.run()
    return sim


def _read_vtm(path):
    from vtkmodules.util.numpy_support import vtk_to_numpy
    from vtkmodules.vtkIOXML import vtkXMLMultiBlockDataReader

    reader = vtkXMLMultiBlockDataReader()
    reader.SetFileName(str(path))
    reader.Update()
    out, top = {}, reader.GetOutput()
    for k in range(top.GetNumberOfBlocks()):
        level = top.GetBlock(k)
        for j in range(level.GetNumberOfBlocks()):
            cd = level.GetBlock(j).GetCellData()
            for a in range(cd.GetNumberOfArrays()):
                out.setdefault(cd.GetArrayName(a), []).append(vtk_to_numpy(cd.GetArray(a)))
    out.pop("vtkGhostType", None)  # the AMR blanking flags (none: every block a leaf)
    return {k: np.concatenate(v) for k, v in out.items()}


def _read_amr(path):
    from vtkmodules.vtkIOXML import vtkXMLUniformGridAMRReader

    reader = vtkXMLUniformGridAMRReader()
    reader.SetFileName(str(path))
    reader.SetMaximumLevelsToReadByDefault(0)
    reader.Update()
    return reader.GetOutput()


@pytest.mark.parametrize("compression", ["zlib", "lz4:1"])
def test_rounded_frames_read_back_with_vtk_within_the_bound(dam, tmp_path, compression):
    from forestpy.io.vtk import write_frame

    exact = write_frame(dam, tmp_path / "exact", compression="none")
    rep = {}
    path = write_frame(dam, tmp_path / "r", tolerance=1e-3, compression=compression,
                       report=rep)
    ref, got = _read_vtm(exact.with_suffix(".vtm")), _read_vtm(path.with_suffix(".vtm"))
    names = ["h", "hu", "hv", "depth", "velocity_x", "velocity_y", "speed", "surface"]
    assert set(got) == set(ref) == set(names) and set(rep) == set(names)
    for name in names:
        err = np.abs(got[name] - ref[name]).max()
        rng = ref[name].max() - ref[name].min()
        assert err == rep[name]["max_error"] or rep[name]["max_error"] >= err
        assert err <= rep[name]["tolerance"] <= 1e-3 * rng * (1 + 1e-12)
    # the AMR dataset (ancestor levels included) opens too, with the same arrays
    amr = _read_amr(path)
    nlev = int(dam.geom.level.max() - dam.geom.level.min()) + 1
    assert nlev == 2 and amr.GetNumberOfLevels() == nlev
    assert amr.GetDataSetAsImageData(1, 0).GetCellData().GetArray("hu") is not None
    # the writer's compressor is named in every block file
    tag = {"zlib": "vtkZLibDataCompressor", "lz4:1": "vtkLZ4DataCompressor"}[compression]
    block = next((tmp_path / "r").rglob("*.vti"))
    assert f'compressor="{tag}"' in block.read_text(errors="replace")[:400]
    # the conserved totals over the leaves, before and after, and their bound
    area = 5.0 * 5.0  # the radial dam's domain, covered once by the leaves
    for name in ("h", "hu", "hv"):
        r = rep[name]
        assert r["total_change"] == r["total_rounded"] - r["total"]
        assert abs(r["total_change"]) <= r["tolerance"] * area


def test_zero_tolerance_frames_are_bit_for_bit(dam, tmp_path):
    from forestpy.io.vtk import write_frame

    a = _read_vtm(write_frame(dam, tmp_path / "a").with_suffix(".vtm"))
    b = _read_vtm(write_frame(dam, tmp_path / "b", tolerance=0,
                              compression="lzma:9").with_suffix(".vtm"))
    c = _read_vtm(write_frame(dam, tmp_path / "c", tolerance={"hu": 1e-2}).with_suffix(".vtm"))
    for name in a:
        assert np.array_equal(a[name].view(np.uint64), b[name].view(np.uint64))
        if name != "hu":  # fields a per-field tolerance does not name stay exact
            assert np.array_equal(a[name], c[name])
    assert 0 < np.abs(c["hu"] - a["hu"]).max() <= 1e-2


def test_rounding_log_continues_after_a_restart(dam, tmp_path):
    from forestpy.io.vtk import VTKOutput

    t = float(dam.t)
    assert t > 0
    log = tmp_path / "frame_rounding.json"
    before = [{"t": 0.0, "file": "frame_0000.vtm", "fields": {}},
              {"t": t + 1.0, "file": "frame_0001.vtm", "fields": {}}]  # after t: dropped
    log.write_text(json.dumps(before))
    out = VTKOutput(tmp_path, tolerance=1e-4)
    out.on_start(dam)  # writes the frame at t
    got = json.loads(log.read_text())
    assert [r["t"] for r in got] == [0.0, t] and got[1]["fields"]["h"]["tolerance"] > 0


def test_frame_options_are_checked(dam, tmp_path):
    from forestpy.io.vtk import VTKOutput, parse_compression, write_frame

    assert parse_compression("LZ4:3") == ("lz4", 3) and parse_compression("none") == ("none", None)
    for bad in ["gzip", "zlib:0", "zlib:x", "none:3"]:
        with pytest.raises(ValueError, match="frame compression"):
            parse_compression(bad)
    with pytest.raises(ValueError, match="frame tolerance"):
        VTKOutput(tmp_path, tolerance=-1)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['eta'\]"):
        write_frame(dam, tmp_path / "x", tolerance={"eta": 1e-3})
    assert not list(tmp_path.iterdir())  # nothing written


def test_cli_frame_tolerance(radial_dam, tmp_path, capsys):
    pytest.importorskip("vtkmodules")
    from testsupport import ROOT

    from forestpy.cli import main

    demo = ROOT / "demos" / "radial_dam.py"
    small = ["--set", "max_level=2", "--set", "min_level=1", "--set", "t_final=0.03",
             "--set", "mx=8"]
    out = tmp_path / "o"
    rc = main(["run", str(demo), *small, "--out", str(out), "--output-interval", "0.015",
               "--frame-tolerance", "h=1e-3,hu=1e-3", "--frame-compression", "lz4", "--quiet"])
    assert rc == 0
    rounding = json.loads((out / "frame_rounding.json").read_text())
    assert [r["file"] for r in rounding] == [f"frame_{k:04d}.vtm" for k in range(3)]
    for r in rounding:
        f = r["fields"]
        assert f["h"]["tolerance"] == 1e-3 and f["hv"]["tolerance"] == 0.0
        assert f["h"]["max_error"] <= 1e-3 and f["hv"]["max_error"] == 0.0
    vals = _read_vtm(out / "frame_0002.vtm")
    assert np.isfinite(vals["h"]).all() and vals["h"].size
    assert "vtkLZ4DataCompressor" in next((out / "frame_0002").rglob("*.vti")).read_text(
        errors="replace")[:400]
    capsys.readouterr()
    for args, msg in [(["--frame-tolerance", "-1"], "--frame-tolerance"),
                      (["--frame-tolerance", "1e-3"], "apply to frames"),
                      (["--vtk", "amr", "--frame-compression", "brotli"],
                       "--frame-compression")]:
        assert main(["run", str(demo), *small, "--out", str(tmp_path / "bad"), *args]) == 2
        assert msg in capsys.readouterr().err


# ---------------------------------------------------------------------- gauges
def _gauges(ids, n=50, seed=3):
    g = Gauges({gid: (0.1 * k, -0.2 * k) for k, gid in enumerate(ids)}, path=None,
               units={"h": "m"}, crs="local")
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((n, len(ids), 2)) * 10.0 ** rng.uniform(-8, 8, (n, len(ids), 2))
    values[0, 0] = [np.nan, -0.0]
    g.load_state_dict({"ids": [str(i) for i in ids], "x": g.x, "y": g.y,
                       "field_names": ["h", "surface"],
                       "times": np.cumsum(rng.uniform(0, 1, n)), "values": values})
    return g


@pytest.mark.parametrize("codec", ["lossless", "lossless:level=9", "none"])
def test_gauge_archive_round_trips_bit_for_bit(tmp_path, codec):
    pytest.importorskip("numcodecs")
    ids = [0, 7, "pier A", "12"]
    g = _gauges(ids)
    path = g.write_archive(tmp_path / "g.npz", codec=codec)
    back = read_gauges(path)
    want = g.data()
    assert list(back) == ids  # ids keep their type: "12" stays a string
    for gid in ids:
        assert set(back[gid]) == set(want[gid]) == {"t", "x", "y", "h", "surface"}
        for k, v in want[gid].items():
            assert np.array_equal(back[gid][k].view(np.uint64), v.view(np.uint64)), (gid, k)
    csv = tmp_path / "g.csv"
    g.write(csv)
    if codec.startswith("lossless"):  # smaller than the CSV
        assert path.stat().st_size < csv.stat().st_size
    empty = Gauges([(0.0, 0.0)], path=tmp_path / "e.npz")
    empty.field_names = ["h"]
    back = read_gauges(empty.write_archive(tmp_path / "e.npz"))
    assert back[0]["t"].size == 0 and back[0]["h"].size == 0


def test_gauge_archive_errors(tmp_path):
    pytest.importorskip("numcodecs")
    with pytest.raises(ValueError, match="gauge archive codec 'dwt53:tol=1'"):
        Gauges([(0.0, 0.0)], codec="dwt53:tol=1")
    with pytest.raises(ValueError, match="gauge archive codec"):
        Gauges([(0.0, 0.0)], codec="lossless:level=99")
    path = _gauges([1, 2]).write_archive(tmp_path / "g.npz")
    data = bytearray(path.read_bytes())
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data[: len(data) // 2]))  # truncated
    with pytest.raises(InputFileError, match="bad.npz"):
        read_gauges(bad)
    with np.load(path) as z:
        members = {k: z[k] for k in z.files}
    blob = members["values"].copy()
    blob[-5] ^= 1  # a flipped bit in the compressed values: the CRC catches it
    np.savez(bad, **{**members, "values": blob})
    with pytest.raises(InputFileError, match="bad.npz"):
        read_gauges(bad)
    np.savez(bad, **{**members, "x": members["x"][:1]})
    with pytest.raises(InputFileError, match="right lengths"):
        read_gauges(bad)
    assert math.isfinite(read_gauges(path)[1]["t"][-1])
