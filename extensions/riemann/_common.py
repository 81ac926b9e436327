"""Small Numba helpers shared by the pointwise Riemann solvers.

Every helper is a module-level ``numba.njit`` function so that the pointwise solvers
that call them compile in nopython mode.  None of them raises: invalid input gives
NaN, which the time stepper detects after the step.
"""

from __future__ import annotations

import math

import numba

__all__ = [
    "fill_nan_normal",
    "fill_nan_transverse",
    "fill_zero_normal",
    "harten_hyman_left",
    "sqrt_or_nan",
    "transverse_split",
    "transverse_split_h",
    "velocity",
]


@numba.njit
def sqrt_or_nan(x):
    """``sqrt(x)`` for ``x >= 0`` and NaN otherwise (also for NaN input)."""
    if x >= 0.0:
        return math.sqrt(x)
    return math.nan


@numba.njit
def velocity(h, hu):
    """``hu / h`` for ``h > 0``, ``0`` for a dry state ``h == 0``, NaN otherwise."""
    if h > 0.0:
        return hu / h
    if h == 0.0:
        return 0.0
    return math.nan


@numba.njit
def harten_hyman_left(s, lam_l, lam_r):
    """Coefficient of the left-going part of the fluctuation ``s * W`` of one wave.

    Harten and Hyman (1983): when the characteristic speed crosses zero across the
    wave (``lam_l < 0 < lam_r``, a transonic rarefaction) the wave is split at the
    sonic point, giving ``lam_l (lam_r - s) / (lam_r - lam_l)``; otherwise the usual
    ``min(s, 0)``.  The right-going coefficient is ``s`` minus this value, so the
    fluctuations still add up to ``s * W``.
    """
    if lam_l < 0.0 and lam_r > 0.0:
        return lam_l * (lam_r - s) / (lam_r - lam_l)
    return min(s, 0.0)


@numba.njit
def fill_zero_normal(wave, s, amdq, apdq):
    """Set every output of a normal solve to zero."""
    for m in range(wave.shape[0]):
        amdq[m] = 0.0
        apdq[m] = 0.0
        for p in range(wave.shape[1]):
            wave[m, p] = 0.0
    for p in range(s.shape[0]):
        s[p] = 0.0


@numba.njit
def fill_nan_normal(wave, s, amdq, apdq):
    """Set every output of a normal solve to NaN (non-physical input states)."""
    for m in range(wave.shape[0]):
        amdq[m] = math.nan
        apdq[m] = math.nan
        for p in range(wave.shape[1]):
            wave[m, p] = math.nan
    for p in range(s.shape[0]):
        s[p] = math.nan


@numba.njit
def fill_nan_transverse(bmasdq, bpasdq):
    """Set both outputs of a transverse solve to NaN (non-physical input states)."""
    for m in range(bmasdq.shape[0]):
        bmasdq[m] = math.nan
        bpasdq[m] = math.nan


@numba.njit
def transverse_split(un, ut, c, asdq, mn, mt):
    """Shallow-water transverse splitting of ``asdq`` at the state ``(un, ut, c)``
    (velocity across and along the interface's transverse direction, wave speed
    ``c > 0``): the eigen-decomposition on the speeds ``un - c, un, un + c``, returned
    as ``bmasdq`` (entries 0, ``mn``, ``mt``) then ``bpasdq``.  Roe, HLLE and the
    GeoClaw solver's ``rpt2`` share it (through :func:`transverse_split_h`)."""
    return transverse_split_h(un, ut, c, 0.5 / c, asdq, mn, mt)


@numba.njit
def transverse_split_h(un, ut, c, half_ic, asdq, mn, mt):
    """:func:`transverse_split` given ``half_ic = 0.5 / c`` (an interface state that
    the normal solve has computed already)."""
    b1 = ((un + c) * asdq[0] - asdq[mn]) * half_ic
    b2 = asdq[mt] - ut * asdq[0]
    b3 = (asdq[mn] - (un - c) * asdq[0]) * half_ic
    s1 = un - c
    s2 = un
    s3 = un + c
    c1m = min(s1, 0.0) * b1
    c2m = min(s2, 0.0) * b2
    c3m = min(s3, 0.0) * b3
    c1p = max(s1, 0.0) * b1
    c2p = max(s2, 0.0) * b2
    c3p = max(s3, 0.0) * b3
    return (c1m + c3m, c1m * s1 + c3m * s3, (c1m + c3m) * ut + c2m,
            c1p + c3p, c1p * s1 + c3p * s3, (c1p + c3p) * ut + c2p)


@numba.njit
def fill_trivial_normal(hl, hr, drytol, wave, s, amdq, apdq):
    """The two cases every shallow-water normal solve settles first: a negative (or NaN)
    depth gives NaN (:func:`fill_nan_normal`), two dry states (depth <= ``drytol``)
    give nothing (:func:`fill_zero_normal`).  Returns True when it filled the outputs
    (the solver then returns)."""
    if not (hl >= 0.0 and hr >= 0.0):
        fill_nan_normal(wave, s, amdq, apdq)
        return True
    if hl <= drytol and hr <= drytol:
        fill_zero_normal(wave, s, amdq, apdq)
        return True
    return False
