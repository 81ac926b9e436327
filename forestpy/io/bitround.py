"""Bit rounding ("bit grooming") of floating-point fields to an absolute error bound.

ParaView frames stay plain VTK files when they are compressed this way: every value is
rounded, to nearest (ties to even), to the fewest mantissa bits that keep its error
within the field's bound, and the zeroed low bits are then squeezed out by the XML
writers' own lossless compressor (zlib, lz4 or lzma, :func:`forestpy.io.vtk.write_frame`).
Any VTK reader decodes the frame; nothing forestpy-specific is needed to open it.

The number of bits kept is chosen per value from its binary exponent: a float64
``x = m 2**E`` (``0.5 <= |m| < 1``, :func:`numpy.frexp`) rounded to ``k`` explicit
mantissa bits moves by at most half its last kept unit, ``2**(E - 2 - k)``.  With
``p = floor(log2 tol)`` (exact, from ``frexp(tol)``) the choice
``k = clip(E - 2 - p, 0, 52)`` gives an error of at most ``2**p <= tol``.  Values with
``|x| <= tol`` become a zero of the same sign (error ``|x| <= tol``; this also covers
subnormal numbers).  NaN and infinities are kept as they are.  Tolerance 0 returns the
values bit for bit.  After rounding, :func:`round_to_tolerance` measures the error and
raises if the bound is not met (it cannot be, short of a bug: the check is the
guarantee).

Tolerances are absolute per field; :func:`field_tolerances` turns the forms a user gives
(one number relative to each field's range, or ``{name: absolute}``) into them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["bitround", "field_tolerances", "parse_tolerance", "round_to_tolerance"]

_LAYOUT = {  # dtype -> (unsigned view, explicit mantissa bits)
    np.dtype(np.float64): (np.uint64, 52),
    np.dtype(np.float32): (np.uint32, 23),
}


def bitround(x: np.ndarray, keepbits) -> np.ndarray:
    """``x`` rounded to nearest (ties to even) at ``keepbits`` explicit mantissa bits
    (a number, or an array broadcast against ``x``; clipped to ``[0, 52]`` for
    float64, ``[0, 23]`` for float32).  Non-finite values are returned unchanged."""
    x = np.asarray(x)
    if x.dtype not in _LAYOUT:
        raise TypeError(f"bit rounding needs float32 or float64 values, not {x.dtype}")
    uint, mbits = _LAYOUT[x.dtype]
    keep = np.clip(np.broadcast_to(np.asarray(keepbits), x.shape), 0, mbits)
    drop = (mbits - keep).astype(uint)
    bits = np.ascontiguousarray(x).view(uint)
    one = uint(1)
    lsb = (bits >> drop) & one  # the last kept bit: ties go to the even neighbour
    half = (one << drop) >> one
    up = bits + (lsb + half - np.where(drop > 0, one, lsb))  # +lsb-1+half, or +0
    rounded = up & ~((one << drop) - one)
    out = rounded.view(x.dtype).reshape(x.shape)
    return np.where(np.isfinite(x), out, x)


def round_to_tolerance(x: np.ndarray, tol: float) -> tuple[np.ndarray, float]:
    """``(rounded, max_error)``: ``x`` with every finite value rounded to the fewest
    mantissa bits that keep ``|rounded - x| <= tol`` (see the module docstring);
    ``tol = 0`` returns a copy of ``x``.  The bound is checked after rounding."""
    x = np.asarray(x)
    tol = check_tolerance(tol)
    if tol == 0 or x.size == 0:
        return x.copy(), 0.0
    if x.dtype not in _LAYOUT:
        raise TypeError(f"bit rounding needs float32 or float64 values, not {x.dtype}")
    p = int(np.frexp(tol)[1]) - 1  # 2**p <= tol < 2**(p + 1)
    _, e = np.frexp(x)
    out = bitround(x, e.astype(np.int64) - 2 - p)
    small = np.abs(x) <= tol
    out = np.where(small, np.copysign(np.zeros((), x.dtype), x), out)
    finite = np.isfinite(x)
    out = np.where(np.isfinite(out) | ~finite, out, x)  # a carry past the largest float
    err = np.abs(out[finite].astype(np.float64) - x[finite].astype(np.float64))
    max_err = float(err.max()) if err.size else 0.0
    if not max_err <= tol:
        raise RuntimeError(f"bit rounding missed its bound: error {max_err!r} > {tol!r}")
    return out, max_err


def math_isfinite(v: float) -> bool:
    return v == v and abs(v) != float("inf")


def parse_tolerance(text: str):
    """The ``--frame-tolerance`` forms: ``R`` (a number, relative to each field's range)
    or ``name=T,name=T`` (absolute per field) -> a float or a ``{name: float}`` dict.
    Raises ``ValueError`` with one message for anything else."""
    text = str(text).strip()
    if "=" not in text:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"frame tolerance {text!r}: expected a number (relative to "
                             "each field's range) or name=T,... (absolute per field)") from None
        return check_tolerance(value, "frame tolerance")
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, value = item.partition("=")
        try:
            v = float(value)
        except ValueError:
            v = None
        if not eq or not name.strip() or v is None:
            raise ValueError(f"frame tolerance {text!r}: {item!r} is not name=number")
        out[name.strip()] = check_tolerance(v, f"frame tolerance of {name.strip()!r}")
    return out


def check_tolerance(value, what: str = "tolerance") -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number >= 0, got {value!r}") from None
    if not (math_isfinite(v) and v >= 0):
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return v


def field_tolerances(tolerance, names, values: np.ndarray) -> list[float]:
    """Absolute tolerances for the fields ``names`` of ``values`` (``[..., nfield, ...]``
    with the fields on axis 1): a number is relative to each field's range (max - min
    of its finite values; a constant field gets 0: exact), a mapping gives absolute
    tolerances by name (fields not named: 0, exact; an unknown name is an error)."""
    names = list(names)
    if isinstance(tolerance, Mapping):
        unknown = sorted(set(tolerance) - set(names))
        if unknown:
            raise ValueError(f"frame tolerance for unknown field(s) {unknown}; the frame's "
                             f"fields: {names}")
        return [check_tolerance(tolerance.get(n, 0.0), f"frame tolerance of {n!r}")
                for n in names]
    rel = check_tolerance(tolerance, "frame tolerance")
    out = []
    for k in range(len(names)):
        v = values[:, k]
        v = v[np.isfinite(v)]
        out.append(rel * float(v.max() - v.min()) if v.size else 0.0)
    return out
