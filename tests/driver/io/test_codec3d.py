"""The 3D block codec (forestpy.io.codecs.dwt53_3d): reconstruction, exact fields,
exact totals, the error bound, the GPU (CUDA simulator) against the CPU byte for byte."""

import numpy as np
import pytest

from forestpy.io.codecs import CodecError
from forestpy.io.codecs.dwt53_3d import DWT53Blocks, decode


def _fields(shape=(8, 16, 8), seed=0):
    rng = np.random.default_rng(seed)
    i, j, k = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    smooth = np.sin(0.4 * i) * np.cos(0.3 * j) + 0.1 * k
    step = np.where(i + j > 10, 1.0, -0.5)  # a discontinuity
    noise = rng.standard_normal(shape)
    return np.stack([smooth, step, noise, 1e-3 * smooth + 1.0])


def test_perfect_reconstruction_and_exact_fields():
    x = _fields()
    y = decode(DWT53Blocks().encode(x))  # tau = 0, no bound: lossless up to lifting
    assert np.abs(y - x).max() <= 4e-15 * np.abs(x).max()
    i, j, k = np.meshgrid(np.arange(8), np.arange(16), np.arange(8), indexing="ij")
    lin = np.stack([1.0 + 0.5 * i - 0.25 * j + 2.0 * k, np.full(i.shape, 3.0),
                    0.125 * i + 0.375 * j + 0.75 * k])
    for codec in (DWT53Blocks(tau=10.0), DWT53Blocks(tol=1e-9), DWT53Blocks(tau=1e-3,
                                                                             block=(4, 8, 2))):
        enc = codec.encode(lin)
        y = decode(enc)
        # dyadic linear data: every lifting step is exact, details vanish
        np.testing.assert_array_equal(y, lin)
        assert enc.ratio > (5 if codec.block == (8, 8, 8) else 1.5)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_totals_exact_and_bound_respected(dtype):
    x = _fields().astype(dtype)
    tot = x.astype(np.float64).reshape(4, 1, 8, 2, 8, 1, 8).sum(axis=(2, 4, 6))
    for tau in (1e-4, 1e-2, 1.0):
        enc = DWT53Blocks(tau=tau, block=8).encode(x)
        y = decode(enc).astype(np.float64)
        got = y.reshape(4, 1, 8, 2, 8, 1, 8).sum(axis=(2, 4, 6))
        mag = np.abs(x).astype(np.float64).reshape(4, 1, 8, 2, 8, 1, 8).sum(axis=(2, 4, 6))
        eps = 1e-14 if dtype == "float64" else 1e-7
        assert np.all(np.abs(got - tot) <= eps * mag)
    for tol in (1e-6, 1e-3, 1e-1):
        enc = DWT53Blocks(tol=tol, block=(8, 4, 4)).encode(x)
        y = decode(enc)
        slack = 0 if dtype == "float64" else np.spacing(np.float32(2.0))
        assert np.abs(y.astype(np.float64) - x.astype(np.float64)).max() <= tol + slack
    # per-field bounds; the write-back is the decoder's output, bit for bit
    xw = x.copy()
    enc = DWT53Blocks(tol=[1e-2, 1e-3, 1e-1, 1e-8]).encode(xw, write_back=True)
    np.testing.assert_array_equal(decode(enc), xw)
    err = np.abs(xw.astype(np.float64) - x).max(axis=(1, 2, 3))
    assert np.all(err <= np.array([1e-2, 1e-3, 1e-1, 1e-8]) + (0 if dtype == "float64"
                                                             else 2.4e-7))


def test_bad_input_and_corrupt_streams():
    with pytest.raises(CodecError, match="powers of two"):
        DWT53Blocks(block=(6, 8, 8))
    with pytest.raises(CodecError, match="multiple of the block"):
        DWT53Blocks(block=8).encode(np.zeros((1, 8, 12, 8)))
    with pytest.raises(CodecError, match="tolerances"):
        DWT53Blocks(tol=[1e-3, 1e-3]).encode(np.zeros((3, 8, 8, 8)))
    x = _fields()
    enc = DWT53Blocks(tol=1e-3).encode(x)
    enc.bdata[0] = 7  # an unknown mode
    with pytest.raises(CodecError, match="block 0 field 0: unknown field mode"):
        decode(enc)
    enc = DWT53Blocks(tol=1e-3).encode(x)
    enc.boff[-1] -= 3  # truncated
    with pytest.raises(CodecError, match="block 1"):
        decode(enc)
    # non-finite values: the field is stored raw and comes back exactly
    x[2, 0, 0, 0] = np.inf
    y = decode(DWT53Blocks(tau=1e-2).encode(x))
    np.testing.assert_array_equal(y[2, :8, :8], x[2, :8, :8])


def test_gpu_same_bytes_as_cpu():
    from numba import cuda

    from forestpy.io.codecs.dwt53_3d_gpu import to_host

    rng = np.random.default_rng(3)
    x = rng.random((2, 4, 8, 4))
    x[1] = np.round(x[1] * 4) / 4
    for kw in (dict(block=4), dict(tau=1e-2, block=4), dict(tol=1e-3, block=(4, 4, 4))):
        codec = DWT53Blocks(**kw)
        cpu = codec.encode(x)
        dx = cuda.to_device(x.copy())
        gpu = to_host(codec.encode(dx, write_back=True))
        for a in ("fdata", "bdata", "foff", "boff"):
            np.testing.assert_array_equal(getattr(cpu, a), getattr(gpu, a))
        y = decode(cpu)
        np.testing.assert_array_equal(dx.copy_to_host(), y)
        yg = decode(codec.encode(cuda.to_device(x)))
        np.testing.assert_array_equal(yg.copy_to_host(), y)
