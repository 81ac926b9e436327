"""The dwt53 CUDA kernels (one block per patch, shared memory) against the CPU encoder
and decoder: the same bytes, the same decoded values, the same error reports.  Runs in
Numba's CUDA simulator (tests/conftest.py); ``NUMBA_ENABLE_CUDASIM=0`` runs it on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from forestpy.io.codecs import decode, encode
from forestpy.io.codecs import dwt53 as D
from forestpy.io.codecs import dwt53_gpu as G
from forestpy.io.codecs import dwt53_kernels as K

RNG = np.random.default_rng(34)


def batch(npatch, meqn, n):
    j, i = np.mgrid[0:n, 0:n] / n
    x = RNG.standard_normal((npatch, meqn, n, n)) * 0.01
    x += np.sin(3 * i + np.arange(npatch)[:, None, None, None]) * 2.0
    x[0, 0] = 1.5  # a constant field
    x[-1, -1, 1, 2] = 1e4  # a spike
    return x


def both(x, raw=None, **params):
    c = D.DWT53(**params)
    nlev, tol, e0 = c.plan(x)
    cpu = D.encode_host(x, nlev, c.tau, e0, c.tries, tol, raw)
    gpu = G.encode(x, nlev, c.tau, e0, c.tries, tol, raw)
    return nlev, cpu, gpu


@pytest.mark.parametrize("n, params", [
    (8, {}),                                   # unquantised details (float mode)
    (8, {"rtol": 1e-3, "tau": 0.001}),         # error-bounded, with the seed's thresholds
    # per-field bounds, fewer levels, 16 x 16 (slow: 2 s more in the simulator)
    pytest.param(16, {"tol": [1e-6, 1e-2], "levels": 2}, marks=pytest.mark.slow),
])
def test_gpu_encoder_writes_the_cpu_bytes(n, params):
    x = batch(3, 2, n)
    nlev, cpu, gpu = both(x, **params)
    for a, b in zip(cpu, gpu):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
    # and the device decoder gives the CPU decoder's values
    fd, bd, fo, bo = cpu
    out, errs = G.decode(fd, bd, fo, bo, x.shape, nlev)
    ref = np.empty(x.shape)
    errs2 = np.zeros((x.shape[0], 2), np.int64)
    K.decode_cpu(fd, bd, fo.astype(np.int64), bo.astype(np.int64), ref, nlev, errs2)
    assert not errs.any() and not errs2.any()
    out = out.get() if hasattr(out, "get") else np.asarray(out)
    assert np.array_equal(out, ref)


def test_gpu_raw_fallback_and_nonfinite_fields():
    x = batch(2, 2, 8)
    x[1, 0, 2, 2] = np.nan
    raw = np.array([[False, False], [False, True]])  # and one field stored raw on request
    nlev, cpu, gpu = both(x, raw=raw, tol=[1e-300, 1e-3], tries=2)
    for a, b in zip(cpu, gpu):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
    y = decode(encode(x, "dwt53:tol=1e-300/1e-3,tries=2"), device=True)
    y = y.get() if hasattr(y, "get") else np.asarray(y)
    assert np.array_equal(y[:, 0], x[:, 0], equal_nan=True)
    assert np.nanmax(np.abs(y[:, 1] - x[:, 1])) <= 1e-3


def test_gpu_decoder_reports_inconsistent_data():
    x = batch(2, 1, 8)
    nlev, cpu, _ = both(x, tau=0.01)
    fd, bd, fo, bo = cpu
    bd = bd.copy()
    bd[bo[1]] = 7  # mode byte of patch 1
    _, errs = G.decode(fd, bd, fo, bo, x.shape, nlev)
    assert errs[0, 0] == K.OK and errs[1, 0] == K.E_MODE


_PTX = r'''
from numba import cuda, types as T
from forestpy.io.codecs import dwt53_gpu as G
A = lambda dt, nd: T.Array(dt, nd, "C")
f8, i8, u1 = T.float64, T.int64, T.uint8
an, pk, un = G._kernels(16, 16, 4)
for k, sig in ((an, (A(f8, 4), A(f8, 3), A(i8, 3), A(f8, 2), f8, A(i8, 1), i8, A(f8, 1),
                     A(u1, 2))),
               (pk, (A(f8, 3), A(i8, 3), A(f8, 2), A(i8, 1), A(i8, 1), A(f8, 1), A(u1, 1))),
               (un, (A(f8, 1), A(u1, 1), A(i8, 1), A(i8, 1), A(f8, 4), A(i8, 2)))):
    ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    assert ".entry" in ptx and ".local" not in ptx  # no spills to local memory
print("ok")
'''


# compiles the three kernels for sm_90 with NVVM (no GPU needed): the simulator runs them
# as Python and cannot see a typing error that only the real compiler finds; 5-10 s
@pytest.mark.slow
def test_kernels_compile_for_the_device():
    from testsupport import compile_for_device

    assert compile_for_device(_PTX).strip().endswith("ok")
