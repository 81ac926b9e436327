r"""FP16 storage of the distributions: ``h_q = f_q - w_q`` kept as IEEE binary16,
arithmetic in float64 (the kernel's, unchanged).

The idea is FluidX3D's "FP16S" (Lehmann et al., "Accuracy and performance of the
lattice Boltzmann method with 64-bit, 32-bit, and customized 16-bit number formats",
Phys. Rev. E 106, 015308, 2022): the deviations from the rest populations are small, so
a 16-bit float of them, scaled into the well-resolved range of the format, keeps enough
digits while halving the memory traffic of FP32.  Here the stored number is
``half(SCALE * h_q)`` with ``SCALE = 2^15`` (exact: a power of two), so

* values with ``|h| < 2^-29 ~ 1.9e-9`` are subnormal (absolute spacing ``2^-39``);
  above that each stored value has a relative rounding error of at most ``2^-11``
  (round to nearest even);
* the largest storable ``|h|`` is ``65504 / 2^15 ~ 2.0`` (beyond it the value becomes
  infinite: a run that far from rest has blown up anyway).

Numba has no float16 type on the CPU, so the array is ``uint16`` holding the binary16
bits, and :func:`half_bits` / :func:`half_value` convert with integer and power-of-two
arithmetic only (no ``frexp``): the same source runs on the CPU and, through
:func:`forestpy.cuda_device.cuda_device`, on the GPU, and gives the bits NumPy's
``float64 -> float16`` conversion gives (tested on every binary16 value, the ties
between them, overflow and signed zeros).

The kernels for this storage are :mod:`.kernels`' sources with the two memory accessors
``load`` and ``store`` swapped for :func:`load16` and :func:`store16`
(:func:`fp16_kernels`); nothing else in the cell update differs.
"""

from __future__ import annotations

import math
import types

import numba
import numpy as np

__all__ = ["SCALE", "half_bits", "half_value", "load16", "store16", "encode", "decode",
           "fp16_kernels", "gpu_step_kernel16"]

#: the stored binary16 number is ``half(SCALE * h)``
SCALE = 32768.0
_INV_SCALE = 1.0 / SCALE
#: 2^(e - 25) for the biased exponents e = 0..31 (e = 0: subnormals use 2^-24 = [1])
_POW2 = np.array([2.0 ** (e - 25) for e in range(32)])


@numba.njit(cache=True, inline="always")
def _round_even(y):
    """``y >= 0`` rounded to the nearest integer, ties to even (an int)."""
    i = int(math.floor(y))  # (math.floor is a float in CUDA)
    d = y - i
    if d > 0.5 or (d == 0.5 and (i & 1) == 1):
        i += 1
    return i


@numba.njit(cache=True)
def half_bits(x):
    """The binary16 bits (an int in ``[0, 65535]``) of the float ``x``, rounded to the
    nearest, ties to even; beyond the largest finite half (65504) infinity, NaN the
    quiet NaN ``0x7E00``."""
    if x != x:
        return 0x7E00
    s = 0
    a = x
    if x < 0.0 or (x == 0.0 and math.copysign(1.0, x) < 0.0):
        s = 0x8000
        a = -x
    if a >= 65520.0:  # 65504 + half an ulp rounds (to even) to infinity
        return s | 0x7C00
    if a < 6.103515625e-05:  # 2^-14: subnormal, spacing 2^-24
        return s | _round_even(a * 16777216.0)
    # the exponent e with 2^e <= a < 2^(e + 1), -14 <= e <= 15, by bisection
    e = -14
    p = 6.103515625e-05
    if a >= p * 65536.0:
        e += 16
        p *= 65536.0
    if a >= p * 256.0:
        e += 8
        p *= 256.0
    if a >= p * 16.0:
        e += 4
        p *= 16.0
    if a >= p * 4.0:
        e += 2
        p *= 4.0
    if a >= p * 2.0:
        e += 1
        p *= 2.0
    sig = _round_even(a * (1024.0 / p))  # 1024 <= sig <= 2048, exact scaling
    if sig == 2048:
        sig = 1024
        e += 1
    if e > 15:
        return s | 0x7C00
    return s | ((e + 15) << 10) | (sig - 1024)


@numba.njit(cache=True)
def half_value(b):
    """The float64 value of the binary16 bits ``b``."""
    b = int(b)
    e = (b >> 10) & 0x1F
    m = b & 0x3FF
    if e == 0:
        v = m * _POW2[1]
    elif e == 31:
        v = math.inf if m == 0 else math.nan
    else:
        v = (1024 + m) * _POW2[e]
    if b & 0x8000:
        return -v
    return v


@numba.njit(cache=True, inline="always")
def load16(h, q, n):
    """``h_q`` of cell ``n`` from the uint16 store."""
    return half_value(h[q, n]) * _INV_SCALE


@numba.njit(cache=True, inline="always")
def store16(h, q, n, v):
    """Store ``h_q = v`` of cell ``n`` as binary16 of ``SCALE * v``."""
    h[q, n] = half_bits(v * SCALE)


def encode(h) -> np.ndarray:
    """Host: float array of ``h`` -> the uint16 store (NumPy's float16 rounding, which
    :func:`half_bits` reproduces bit for bit)."""
    with np.errstate(over="ignore"):
        return (np.asarray(h, dtype=np.float64) * SCALE).astype(np.float16).view(np.uint16)


def decode(bits) -> np.ndarray:
    """Host: the uint16 store -> float64 ``h``."""
    return np.asarray(bits).view(np.float16).astype(np.float64) * _INV_SCALE


# ---------------------------------------------------------------- the kernel variants
def _variant(func, subs: dict, suffix: str = "_fp16"):
    """A copy of the Python function under ``func`` (a dispatcher or a function) whose
    module globals named in ``subs`` are replaced; its own qualified name (so that
    Numba's disk cache keeps it apart from the original)."""
    py = getattr(func, "py_func", func)
    g = dict(py.__globals__)
    g.update(subs)
    f = types.FunctionType(py.__code__, g, py.__name__ + suffix, py.__defaults__,
                           py.__closure__)
    f.__qualname__ = py.__qualname__ + suffix
    f.__module__ = py.__module__
    f.__doc__ = py.__doc__
    return f


_KERNELS: dict = {}


def fp16_kernels():
    """``(cell, run_cpu, run_cpu_serial)`` of :mod:`.kernels` for the uint16 store:
    the same sources with ``load``/``store`` swapped for :func:`load16` /
    :func:`store16` (compiled once per process, cached on disk)."""
    if "cpu" not in _KERNELS:
        from . import kernels

        cell = numba.njit(cache=True)(_variant(kernels.lbm_cell,
                                               {"load": load16, "store": store16}))
        run = numba.njit(cache=True, parallel=True)(_variant(kernels.run_cpu,
                                                             {"lbm_cell": cell}))
        serial = numba.njit(cache=True)(_variant(kernels.run_cpu_serial,
                                                 {"lbm_cell": cell}))
        _KERNELS["cpu"] = (cell, run, serial)
    return _KERNELS["cpu"]


def gpu_step_kernel16():
    """The CUDA step kernel (:func:`.gpu.gpu_step_kernel`) for the uint16 store."""
    if "gpu" not in _KERNELS:
        from numba import cuda

        from forestpy.cuda_device import cuda_device

        from . import gpu

        cell = fp16_kernels()[0]
        _KERNELS["gpu"] = cuda.jit(_variant(gpu._step, {"_cell": cuda_device(cell)}))
    return _KERNELS["gpu"]
