"""forestpy.io.codecs: the container, the simple codecs, and the dwt53 codec's properties
(perfect reconstruction, linear and constant fields, exact totals, per-level thresholds,
the error-bounded mode), each against an exact or brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from forestpy.errors import InputFileError
from forestpy.io.codecs import CodecError, decode, encode, get_codec, info, parse_spec
from forestpy.io.codecs import dwt53 as D
from forestpy.io.codecs import dwt53_kernels as K

RNG = np.random.default_rng(20261127)


# ------------------------------------------------------------------ a NumPy reference
def lift_ref(s):
    """The seed's forward lifting of one level (eqs. 8, 10, 12) on the last axis of
    ``s`` (2**m + 1 samples), vectorised: returns (scaling, details)."""
    even, odd = s[..., 0::2].copy(), s[..., 1::2]
    d = odd - 0.5 * (even[..., :-1] + even[..., 1:])
    nd = d.shape[-1]
    alpha = np.full(nd, 0.25)
    alpha[0] = alpha[-1] = 0.5
    even[..., 1:-1] += alpha[:-1] * d[..., :-1] + alpha[1:] * d[..., 1:]
    return even, d


def pyramid_ref(x, nlev):
    """Padded 2D pyramid of the reference lifting -> the (py, px) coefficient array."""
    w = np.concatenate([x, 2 * x[:, -1:] - x[:, -2:-1]], axis=1)
    w = np.concatenate([w, 2 * w[-1:] - w[-2:-1]], axis=0)
    for t in range(nlev):
        h = 1 << t
        sub = w[::h, ::h]
        s, d = lift_ref(sub)
        sub[:, 0::2], sub[:, 1::2] = s, d
        s, d = lift_ref(sub.T)
        sub.T[:, 0::2], sub.T[:, 1::2] = s, d
        w[::h, ::h] = sub
    return w


def forward(x, nlev):
    """The codec's forward transform of one field (its compiled bodies, run here)."""
    my, mx = x.shape
    px, py = mx + 1, my + 1
    w = np.empty(px * py)
    K.load_padded(w, x[None, None], 0, 0, px, py, 0, 1)
    K.pad_last_row(w, px, py, 0, 1)
    for t in range(nlev):
        K.rows_forward(w, px, py, t, 0, 1)
        K.cols_forward(w, px, py, t, 0, 1)
    return w.reshape(py, px)


def inverse(c, nlev):
    py, px = c.shape
    w = c.reshape(-1).copy()
    for t in range(nlev - 1, -1, -1):
        K.cols_inverse(w, px, py, t, 0, 1)
        K.rows_inverse(w, px, py, t, 0, 1)
    return w.reshape(py, px)[:-1, :-1]


def test_lifting_matches_the_seed_formulas():
    x = RNG.standard_normal((16, 32))
    for nlev in (1, 2, 4):
        np.testing.assert_allclose(forward(x, nlev), pyramid_ref(x, nlev), rtol=0,
                                   atol=1e-13)


def test_details_carry_no_trapezoidal_mass():
    """Seed eq. 11: zeroing the details of one level keeps the trapezoid sum."""
    s = RNG.standard_normal((7, 33))
    trap = (s[:, 1:-1].sum(1) + 0.5 * (s[:, 0] + s[:, -1]))
    even, d = lift_ref(s)
    coarse = 2 * (even[:, 1:-1].sum(1) + 0.5 * (even[:, 0] + even[:, -1]))
    np.testing.assert_allclose(coarse, trap, rtol=1e-13)
    # the codec: one level along x on a row, details dropped, inverse: same trapezoid
    w = s[0].copy()
    K.lift_forward(w, 0, 1, 33)
    w[1::2] = 0.0
    K.lift_inverse(w, 0, 1, 33)
    assert abs((w[1:-1].sum() + 0.5 * (w[0] + w[-1])) - trap[0]) < 1e-12


def test_perfect_reconstruction_at_tau_zero():
    x = RNG.standard_normal((6, 3, 16, 16)) * 10.0 ** RNG.integers(-3, 4, (6, 3, 1, 1))
    y = decode(encode(x, "dwt53"))
    scale = np.abs(x).max(axis=(2, 3), keepdims=True)
    assert np.all(np.abs(y - x) <= 8 * np.finfo(float).eps * scale)
    c = forward(x[0, 0], 4)
    np.testing.assert_allclose(inverse(c, 4), x[0, 0], rtol=0, atol=1e-14 * scale[0, 0, 0, 0])


def test_linear_and_constant_fields_decode_exactly():
    j, i = np.mgrid[0:32, 0:32].astype(float)
    dyadic = np.stack([3.0 + 0.5 * i - 2.25 * j, np.full_like(i, 7.125),
                       -4.0 * i + 1.0])[None].repeat(3, axis=0)
    for spec in ("dwt53:tau=1e3", "dwt53:tau=1e-9", "dwt53:tol=1e-12", "dwt53"):
        assert np.array_equal(decode(encode(dyadic, spec)), dyadic), spec
    # linear with inexact coefficients: exact to round-off, and (details below tau) tiny
    lin = (0.1 + 0.3 * i + 0.7 * j)[None, None] + RNG.standard_normal((4, 1, 1, 1))
    blob = encode(lin, "dwt53:tau=1e-3")
    np.testing.assert_allclose(decode(blob), lin, rtol=0, atol=1e-13)
    assert len(blob) < lin.nbytes / 10
    # a lake at rest in the surface elevation (constant eta over any bottom) and zero
    # momenta: the same bits at any threshold
    eta = np.full((5, 3, 16, 16), 0.0)
    eta[:, 0] = 1.3 + RNG.standard_normal((5, 1, 1)) * 0  # the same still surface
    for spec in ("dwt53:tau=0.5", "dwt53:rtol=1e-6"):
        assert np.array_equal(decode(encode(eta, spec)), eta)


def test_totals_are_exact_after_lossy_coding():
    x = RNG.standard_normal((8, 3, 16, 16)) + np.array([5.0, 0.0, -2.0])[None, :, None, None]
    x[:, 1] *= 1e3
    for spec in ("dwt53:tau=3", "dwt53:tau=100", "dwt53:rtol=0.05", "dwt53:levels=2,tau=1"):
        y = decode(encode(x, spec))
        assert np.max(np.abs(y - x)) > 1e-3  # really lossy
        err = np.abs(y.sum(axis=(2, 3)) - x.sum(axis=(2, 3)))
        assert np.all(err <= 1e-14 * np.abs(x).sum(axis=(2, 3))), spec


def test_per_level_thresholds_are_tau_times_two_to_the_level():
    """One detail at level t survives iff |d| >= tau 2**t (the seed's tau_j)."""
    nlev = 4
    for t in range(nlev):
        h = 1 << t
        c = np.zeros((17, 17))
        c[0, 0] = 1.0  # a coarse coefficient
        c[2 * h, h] = 0.75  # an x detail of level t
        x = inverse(c, nlev)
        assert np.array_equal(forward(x, nlev), c)  # dyadic: exact both ways
        for factor, kept in ((0.99, True), (1.01, False)):
            tau = 0.75 / 2 ** t * factor
            y = decode(encode(x[None, None], f"dwt53:tau={tau!r}"))[0, 0]
            d = forward(y, nlev)
            d[::2 ** nlev, ::2 ** nlev] = 0.0  # the coarse coefficients
            assert (d[2 * h, h] != 0) == kept, (t, factor)
            d[2 * h, h] = 0.0
            assert np.all(d == 0)


def fields(n=6, mx=16):
    """Smooth, random and discontinuous fields of very different magnitudes."""
    j, i = np.mgrid[0:mx, 0:mx] / mx
    k = np.arange(n)[:, None, None]
    smooth = np.sin(2 * np.pi * (i + 0.3 * k)) * np.cos(3 * j) * 1e-3
    rough = RNG.standard_normal((n, mx, mx)) * 50.0
    step = np.where(i + 0.5 * j > 0.2 * k / n + 0.4, 2.0, 0.5) + 0 * k
    return np.stack([smooth, rough, step], axis=1)


@pytest.mark.parametrize("rtol", [1e-2, 1e-4, 1e-7])
def test_error_bounded_mode_respects_its_bound(rtol):
    x = fields()
    blob, rep = encode(x, f"dwt53:rtol={rtol}", report=True)
    y = decode(blob)
    tol = rtol * (x.max(axis=(0, 2, 3)) - x.min(axis=(0, 2, 3)))
    err = np.abs(y - x).max(axis=(0, 2, 3))
    assert np.all(err <= tol)
    np.testing.assert_array_equal([f["max_error"] for f in rep["fields"]], err)
    assert info(blob)["tol_used"] == list(tol)
    # absolute per-field bounds, with thresholds on top
    tol = [1e-6, 2.0, 0.1]
    y = decode(encode(x, "dwt53:tau=0.01,tol=1e-6/2/0.1"))
    assert np.all(np.abs(y - x).max(axis=(0, 2, 3)) <= tol)


def test_error_bounded_fallback_stores_raw_patches():
    """A bound that no step meets within ``tries`` halvings: those fields are stored as
    they are (exact), the others quantised."""
    x = fields(n=4)
    c = D.DWT53(tol=[1e-300, 1e3, 1.0], tries=1)
    nlev, tol, e0 = c.plan(x)
    coef = np.empty((4, 3, 17 * 17))
    meta = np.empty((4, 3, 4), np.int64)
    total = np.empty((4, 3))
    K.analyse_cpu(x, coef, meta, total, nlev, 0.0, e0, 1, tol, np.zeros((4, 3), np.uint8))
    assert np.all(meta[:, 0, 0] == K.RAW) and np.all(meta[:, 1, 0] == K.QUANT)
    y = decode(encode(x, c))
    assert np.array_equal(y[:, 0], x[:, 0])
    assert np.all(np.abs(y - x).max(axis=(0, 2, 3)) <= [0, 1e3, 1.0])
    # chosen fields are stored raw on request
    mask = np.zeros((4, 3), bool)
    mask[2, 1] = True
    y = decode(encode(x, "dwt53:rtol=0.1", raw=mask))
    assert np.array_equal(y[2, 1], x[2, 1]) and not np.array_equal(y[1, 1], x[1, 1])
    with pytest.raises(CodecError, match="raw="):
        encode(x, "fp16", raw=mask)
    # non-finite values are stored raw too
    x[1, 2, 3, 4] = np.nan
    x[2, 1, 0, 0] = np.inf
    y = decode(encode(x, "dwt53:tau=0.1"))
    assert np.array_equal(y[1, 2], x[1, 2], equal_nan=True)
    assert np.array_equal(y[2, 1], x[2, 1])


def test_zstd_stage_is_lossless():
    x = fields(n=8, mx=32)
    a, b = encode(x, "dwt53:rtol=1e-4"), encode(x, "dwt53:rtol=1e-4,zstd=3")
    assert len(b) < len(a) and np.array_equal(decode(a), decode(b))


def test_report_and_ratio():
    x = fields(n=8, mx=32)
    blob, rep = encode(x, "dwt53:rtol=1e-3", report=True)
    assert rep["ratio"] == pytest.approx(x.nbytes / len(blob))
    assert rep["ratio"] > 3
    for f in rep["fields"]:
        assert set(f) == {"max_error", "nmse", "psnr", "range"}
        assert f["psnr"] > 60 and 0 < f["nmse"] < 1e-5
    _, rep = encode(x, "lossless", report=True)
    assert all(f["max_error"] == 0 and f["psnr"] == np.inf for f in rep["fields"])


# ------------------------------------------------------------------ the simple codecs
def test_lossless_and_none_are_bit_for_bit():
    x = RNG.standard_normal((40, 3, 8, 8))
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 0, 1] = -0.0
    x[1, 2] = np.inf
    for spec in ("none", "lossless", "lossless:level=9,chunk=2048"):
        y = decode(encode(x, spec))
        assert y.dtype == x.dtype and np.array_equal(y.view(np.uint64), x.view(np.uint64))
    smooth = np.round(fields(n=16) * 100) / 100
    assert len(encode(smooth, "lossless")) < smooth.nbytes / 2
    f32 = x.astype(np.float32)
    assert np.array_equal(decode(encode(f32, "lossless")).view(np.uint32), f32.view(np.uint32))


def test_fp16_baseline():
    x = RNG.uniform(-100, 100, (64, 2, 16, 16))
    blob = encode(x, "fp16")
    assert len(blob) < x.nbytes / 3.9
    np.testing.assert_array_equal(decode(blob), x.astype(np.float16).astype(float))
    with pytest.raises(CodecError, match="half precision"):
        encode(x * 1e4, "fp16")


@pytest.mark.parametrize("name", ["zfpy", "sz3"])
def test_adapters_respect_their_bound(name):
    x = fields(n=4)
    y = decode(encode(x, f"{name}:tol=1e-3"))
    assert np.abs(y - x).max() <= 1e-3 * (1 + 1e-9)


# ------------------------------------------------------------------ bad input
def test_bad_specifications_and_batches():
    assert parse_spec("dwt53:tol=1e-6, levels=3") == ("dwt53", {"tol": "1e-6", "levels": "3"})
    for spec, match in (("zstd", "unknown codec"), ("dwt53:tol", "not key=value"),
                        ("dwt53:eps=1", "unknown parameter"), ("dwt53:tau=-1", "outside"),
                        ("dwt53:tau=nan", "not finite"), ("lossless:level=x", "not a int"),
                        ("dwt53:tol=1,rtol=1", "not both"), ("zfpy", "needs tol"),
                        ("", "expected name")):
        with pytest.raises(CodecError, match=match):
            get_codec(spec)
    with pytest.raises(CodecError, match="power of two"):
        encode(np.zeros((2, 1, 12, 12)), "dwt53")
    with pytest.raises(CodecError, match="floating-point"):
        encode(np.zeros((2, 1, 8, 8), int), "none")
    with pytest.raises(CodecError, match="npatch"):
        encode(np.zeros((8, 8)), "none")
    with pytest.raises(CodecError, match="2 tolerances for 3 fields"):
        encode(np.zeros((2, 3, 8, 8)), "dwt53:tol=1/2")


@pytest.mark.parametrize("spec", ["none", "lossless", "fp16", "dwt53:rtol=1e-3",
                                  "dwt53:rtol=1e-3,zstd=3"])
def test_corrupt_or_truncated_data_give_one_clear_error(spec):
    x = fields(n=3)
    blob = encode(x, spec)
    assert isinstance(CodecError("x"), InputFileError)
    rng = np.random.default_rng(7)
    cuts = sorted(set(rng.integers(0, len(blob), 40)) | {0, 7, 8, 15, 19, len(blob) - 1})
    for n in cuts:
        with pytest.raises(CodecError, match="ckpt"):
            decode(blob[:n], name="ckpt")
    for pos in rng.integers(0, len(blob), 60):
        bad = bytearray(blob)
        bad[pos] ^= 1 << int(rng.integers(8))
        with pytest.raises(CodecError):
            decode(bytes(bad))
    with pytest.raises(CodecError, match="after the last section"):
        decode(blob + b"\0")
    with pytest.raises(CodecError, match="magic"):
        decode(b"PK\x03\x04" + blob)
    with pytest.raises(CodecError, match="bytes-like"):
        decode(12)


def test_inconsistent_dwt53_data_are_named_by_patch_and_field():
    """Data whose CRCs pass but whose contents are inconsistent (a bug or a hostile
    writer): the decoder's own checks name the patch and field."""
    x = fields(n=3)
    c = D.DWT53(tau=0.01)
    nlev, tol, e0 = c.plan(x)
    f, b, fo, bo = D.encode_host(x, nlev, c.tau, e0, c.tries, tol)
    for pos, val, match in ((bo[1] + 0, 9, "unknown field mode"),
                            (bo[2] + 1, 3, "bad value width"),
                            (bo[1] + 4, 250, "count|past the end")):
        bb = b.copy()
        bb[pos] = val
        out = np.empty(x.shape)
        errs = np.zeros((3, 2), np.int64)
        K.decode_cpu(f, bb, fo.astype(np.int64), bo.astype(np.int64), out, nlev, errs)
        k = int(np.nonzero(errs[:, 0])[0][0])
        err = D.CodecError(f"patch {k} field {errs[k, 1]}: {K.ERRORS[int(errs[k, 0])]}")
        assert k == (1 if pos < bo[2] else 2) and errs[k, 1] == 0
        assert __import__("re").search(match, str(err))


def test_numcodecs_registration():
    numcodecs = pytest.importorskip("numcodecs")
    from forestpy.io.codecs.zarr_codec import ForestpyCodec, register

    register()
    codec = numcodecs.get_codec({"id": "forestpy", "spec": "dwt53:rtol=1e-3,zstd=3"})
    assert isinstance(codec, ForestpyCodec)
    assert codec.get_config() == {"id": "forestpy", "spec": "dwt53:rtol=1e-3,zstd=3"}
    x = fields(n=4)
    blob = codec.encode(x)
    y = codec.decode(blob)
    np.testing.assert_array_equal(y, decode(blob))
    out = np.empty_like(x)
    codec.decode(blob, out=out)
    np.testing.assert_array_equal(out, y)
    with pytest.raises(ValueError, match="npatch"):
        codec.encode(x[0])
    with pytest.raises(CodecError):
        ForestpyCodec("nope")


@pytest.mark.parametrize("spec", ["none", "lossless", "fp16", "dwt53:tau=0.1",
                                  "dwt53:rtol=1e-3,zstd=1"])
def test_empty_batches(spec):
    for shape in ((0, 3, 8, 8), (4, 0, 8, 8)):
        x = np.zeros(shape)
        y = decode(encode(x, spec))
        assert y.shape == shape and y.dtype == x.dtype
