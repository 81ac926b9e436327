"""Refinement criteria of the patch forest: indicators and the thresholds that turn them
into flags, in one place (Trixi.jl's indicator/controller pair).

An *indicator* maps the patches to one non-negative number each
(``indicator(q, aux, geom, t) -> float[npatch]``, on the backend of ``q``); a
*controller* (:func:`threshold_tagging`) compares it with a refine and a coarsen
threshold and gives the two vtable slots ``tag4refinement`` and ``tag4coarsening``
together.  Criteria that are flags from the start (:func:`indicator_wavelet`, GeoClaw's
flagging in ``extensions/geoclaw/refinement.py``) are tagging functions directly.

:func:`indicator_undivided_difference` is the default: the largest jump of one field
across any interior cell face (interior and first ghost layer).

:func:`indicator_wavelet` flags a patch where its normalised Haar details are large: the
patch interior (``mx x my``, both powers of two) is analysed level by level with the
2 x 2 Haar filter bank (parent = mean of four children; x, y and diagonal details), and
a detail at patch level ``n`` (of ``Lp = log2(mx)``) is significant when
``|d| / max(1, max|q[field]|) > 2^(n - Lp) * eps`` -- the criterion of the HWFV1
wavelet-adaptive scheme (solvers/hwfv1).  Works on NumPy and CuPy arrays alike.

:class:`ThresholdFlags` is the controller as one regrid criterion
(:mod:`forestpy.patches.tagging`): both flags of every patch in one pass, the
indicator computed once; for the undivided difference a compiled body per patch (a
CPU ``prange`` loop, one CUDA thread per patch), bitwise the flags of
:func:`threshold_tagging`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .backend import array_module
from .patches.tagging import COARSEN, REFINE, per_patch

__all__ = ["ThresholdFlags", "haar_details", "indicator_undivided_difference",
           "indicator_wavelet", "threshold_tagging", "undivided_difference"]


def undivided_difference(q, field: int, mbc: int):
    """Per patch, the largest jump of ``q[:, field]`` across any interior cell face
    (first ghost layer included; an array of the backend of ``q``)."""
    xp = array_module(q)
    f = q[:, field]
    core = f[:, mbc - 1 : f.shape[1] - mbc + 1, mbc - 1 : f.shape[2] - mbc + 1]
    dx = xp.abs(xp.diff(core[:, 1:-1, :], axis=2)).max(axis=(1, 2))
    dy = xp.abs(xp.diff(core[:, :, 1:-1], axis=1)).max(axis=(1, 2))
    return xp.maximum(dx, dy)


def indicator_undivided_difference(field: int = 0):
    """Indicator: :func:`undivided_difference` of ``q[:, field]``."""

    def indicator(q, aux, geom, t):
        return undivided_difference(q, field, geom.mbc)

    indicator.undivided_difference_of = int(field)  # ThresholdFlags compiles it
    return indicator


@numba.njit(inline="always")
def nan_max(a, b):
    """The larger of ``a`` and ``b``, NaN when ``b`` is (as NumPy's ``max`` of an
    array holding a NaN, once ``a`` is the running maximum)."""
    return b if (b > a or b != b) else a


@numba.njit(inline="always")
def undivided_difference_patch(f, k, m, mbc):
    """:func:`undivided_difference` of ``f[k, m]`` (one patch, one component)."""
    ny, nx = f.shape[2], f.shape[3]
    big = 0.0
    for j in range(mbc, ny - mbc):
        for i in range(mbc - 1, nx - mbc):
            big = nan_max(big, abs(f[k, m, j, i + 1] - f[k, m, j, i]))
    for j in range(mbc - 1, ny - mbc):
        for i in range(mbc, nx - mbc):
            big = nan_max(big, abs(f[k, m, j + 1, i] - f[k, m, j, i]))
    return big


@numba.njit(inline="always")
def _threshold_patch(q, field, mbc, refine_above, coarsen_below, coarsens, bits, k):
    d = undivided_difference_patch(q, k, field, mbc)
    b = 0
    if d > refine_above:
        b = 1
    if coarsens and d < coarsen_below:
        b |= 2
    bits[k] = b


@numba.njit(parallel=True, cache=True)
def _threshold_patches(q, field, mbc, refine_above, coarsen_below, coarsens, bits):
    for k in numba.prange(q.shape[0]):
        _threshold_patch(q, field, mbc, refine_above, coarsen_below, coarsens, bits, k)


class ThresholdFlags:
    """Regrid criterion (:mod:`forestpy.patches.tagging`): refine where ``indicator``
    exceeds ``refine_threshold``, coarsen where it is below ``coarsen_threshold``
    (``None``: never), in one pass -- the flags of :func:`threshold_tagging`.

    An indicator from :func:`indicator_undivided_difference` runs as one compiled body
    per patch; any other is called once and compared on its backend."""

    def __init__(self, indicator, refine_threshold: float, coarsen_threshold: float | None):
        self.tag4refinement, self.tag4coarsening = threshold_tagging(
            indicator, refine_threshold, coarsen_threshold)
        self.indicator = indicator
        self.refine_threshold = float(refine_threshold)
        self.coarsen_threshold = (None if coarsen_threshold is None
                                  else float(coarsen_threshold))
        self.field = getattr(indicator, "undivided_difference_of", None)

    def reads_ghosts(self, t: float) -> bool:
        return True  # indicators see the first ghost layer

    def __call__(self, q, aux, patches, t):
        xp = array_module(q)
        coarsens = self.coarsen_threshold is not None
        if self.field is None:  # compared as threshold_tagging compares
            value = self.indicator(q, aux, patches.geom, t)
            bits = (value > self.refine_threshold).astype(np.uint8) * REFINE
            if coarsens:
                bits |= (value < self.coarsen_threshold).astype(np.uint8) * COARSEN
            return bits
        # the thresholds in q's precision, as an array compared with a Python float is
        up = q.dtype.type(self.refine_threshold)
        down = q.dtype.type(self.coarsen_threshold if coarsens else 0.0)
        bits = xp.zeros(q.shape[0], dtype=np.uint8)
        per_patch(_threshold_patch, _threshold_patches, q.shape[0], q, self.field,
                  patches.geom.mbc, up, down, coarsens, bits, backend=patches.backend)
        return bits


def threshold_tagging(indicator, refine_threshold: float, coarsen_threshold: float | None):
    """Controller: ``(tag4refinement, tag4coarsening)`` flagging the patches whose
    ``indicator`` exceeds ``refine_threshold`` for refinement and those below
    ``coarsen_threshold`` for coarsening (``None``: never coarsen)."""
    refine_threshold = float(refine_threshold)
    if math.isnan(refine_threshold):  # every comparison false: refinement silently off
        raise ValueError("refine_threshold may not be NaN")

    def tag4refinement(q, aux, geom, t):
        return indicator(q, aux, geom, t) > refine_threshold

    if coarsen_threshold is None:
        return tag4refinement, None
    coarsen_threshold = float(coarsen_threshold)
    if math.isnan(coarsen_threshold):
        raise ValueError("coarsen_threshold may not be NaN")

    def tag4coarsening(q, aux, geom, t):
        return indicator(q, aux, geom, t) < coarsen_threshold

    return tag4refinement, tag4coarsening


def haar_details(f):
    """Haar analysis of ``f[npatch, 2^Lp, 2^Lp]``: a list, finest level first, of
    ``(level, |d|max per patch)`` where ``d`` are the three details of each 2 x 2 block."""
    xp = array_module(f)
    n = f.shape[1]
    if f.ndim != 3 or n != f.shape[2] or n < 2 or n & (n - 1):
        raise ValueError(f"Haar details need square power-of-two patches, got {f.shape[1:]}")
    out = []
    level = n.bit_length() - 1
    while f.shape[1] > 1:
        c00, c10 = f[:, 0::2, 0::2], f[:, 1::2, 0::2]
        c01, c11 = f[:, 0::2, 1::2], f[:, 1::2, 1::2]
        d = xp.maximum(xp.maximum(xp.abs((c10 + c11) - (c00 + c01)),
                                  xp.abs((c01 + c11) - (c00 + c10))),
                       xp.abs((c00 + c11) - (c10 + c01))) * 0.25
        level -= 1
        out.append((level, d.reshape(d.shape[0], -1).max(axis=1)))
        f = 0.25 * ((c00 + c01) + (c10 + c11))
    return out


def indicator_wavelet(field: int = 0, eps: float = 1e-3):
    """Return ``tag(q, aux, geom, t) -> bool[npatch]`` for ``Simulation(..., tag=...)``:
    refine patches with a significant normalised Haar detail of ``q[:, field]``."""
    if not eps > 0:
        raise ValueError(f"indicator_wavelet: eps must be > 0, got {eps}")
    if int(field) != field or field < 0:
        raise ValueError(f"indicator_wavelet: field must be a non-negative integer, got {field}")

    def tag(q, aux, geom, t, ctx=None):
        xp = array_module(q)
        if field >= q.shape[1]:
            raise ValueError(f"indicator_wavelet: field {field} out of range for "
                             f"{q.shape[1]} fields")
        mbc = geom.mbc
        f = q[:, field, mbc:q.shape[2] - mbc, mbc:q.shape[3] - mbc]
        biggest = float(xp.abs(f).max()) if f.size else 0.0
        if ctx is not None:  # the domain's maximum, whichever rank holds it
            biggest = float(ctx.allreduce(biggest, "max"))
        norm = max(1.0, biggest)
        top = f.shape[1].bit_length() - 1
        flags = xp.zeros(q.shape[0], dtype=bool)
        if not q.shape[0]:
            return flags
        for level, dmax in haar_details(f):
            flags |= dmax > eps * 2.0 ** (level - top) * norm
        return flags

    # called with a HookContext (``ctx``), on every rank of a distributed run, so that
    # the normalisation is the serial run's
    tag.takes_context = True
    return tag
