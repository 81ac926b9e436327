"""Regrid flags of the patches, computed where the patches live.

A *regrid criterion* (``Simulation(regrid_flags=...)``; the default is the undivided
difference with thresholds, :class:`forestpy.indicators.ThresholdFlags`; GeoClaw's is
:class:`~forestpy.extensions.geoclaw.refinement.GeoClawRefinement`) flags every patch in
one pass: ``criterion(q, aux, patches, t) -> uint8[npatch]`` on the backend of ``q``,
bit :data:`REFINE` (1) asks for refinement, bit :data:`COARSEN` (2) for coarsening.
``patches`` is a :class:`TaggedPatches`.  A criterion may have a method
``reads_ghosts(t) -> bool`` (default True): whether the flags at time ``t`` read ghost
cells; when not, a regrid that changes nothing fills no ghost cells.

:func:`regrid_flags` turns the criterion's bits into the flags the forest operations
take (refinement below ``max_level``, coarsening above the lowest level that may
coarsen, never both) and answers on the device whether they can change the forest:
a refinement flag, or a complete family of four leaf siblings all flagged for
coarsening (:func:`~forestpy.forest.quadrants.family_starts`).  Only that answer, one
number, crosses to the host on a tagging pass that changes nothing; the flags cross
only when something may change.  The masking and the test are one compiled body per
patch (a CPU ``prange`` loop, one CUDA thread per patch on the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

__all__ = ["COARSEN", "REFINE", "TaggedPatches", "per_patch", "regrid_flags"]

REFINE = np.uint8(1)
COARSEN = np.uint8(2)


@dataclass(frozen=True)
class TaggedPatches:
    """What a regrid criterion sees of the patches it flags (made once per regrid, so
    a criterion may key per-forest data on it: it is a new object after every change
    of the forest or the layout).

    ``geom``: their :class:`~forestpy.patches.geometry.PatchGeometry` (host arrays);
    ``level``: their levels, a backend int64 array; ``backend``: where ``q`` lives."""

    geom: object
    level: object
    backend: object

    @property
    def npatch(self) -> int:
        return self.geom.npatch


def per_patch(body, cpu_loop, n: int, *args, backend=None) -> None:
    """``body(*args, k)`` for every patch ``k < n``: ``cpu_loop(*args)`` (the body's
    ``prange`` driver) on the CPU, one CUDA thread per patch on the GPU backend."""
    if n == 0:
        return
    if backend is not None and backend.is_gpu:
        from forestpy.patches.launch import launch

        launch(body, n, *args, backend=backend)
    else:
        cpu_loop(*args)


@numba.njit(inline="always")
def _masked(bits, level, k, max_level, refine_from, coarsen_above):
    """The flags of patch ``k`` the forest operations take (refinement wins)."""
    lv = level[k]
    refine = (bits[k] & 1) != 0 and lv < max_level and lv >= refine_from
    coarsen = (bits[k] & 2) != 0 and lv > coarsen_above and not refine
    return (1 if refine else 0) | (2 if coarsen else 0)


@numba.njit(inline="always")
def _mask_patch(bits, level, family, whole, max_level, refine_from, coarsen_above, out,
                change, k):
    """Masked flags of patch ``k`` into ``out[k]``; ``change[k]`` = 1 where they can
    change the forest: a refinement, or ``k`` the first of a family (``family[k]``)
    whose four leaves are all flagged for coarsening (``whole`` false: every coarsening
    flag counts, as a distributed rank cannot see whole families)."""
    f = _masked(bits, level, k, max_level, refine_from, coarsen_above)
    out[k] = f
    c = 0
    if f & 1:
        c = 1
    elif f & 2:
        if not whole:
            c = 1
        elif family[k] and k + 3 < bits.shape[0]:
            c = 1
            for d in range(1, 4):
                if not _masked(bits, level, k + d, max_level, refine_from, coarsen_above) & 2:
                    c = 0
    change[k] = c


@numba.njit(parallel=True, cache=True)
def _mask_patches(bits, level, family, whole, max_level, refine_from, coarsen_above, out,
                  change):
    for k in numba.prange(bits.shape[0]):
        _mask_patch(bits, level, family, whole, max_level, refine_from, coarsen_above, out,
                    change, k)


def regrid_flags(bits, level, family, max_level: int, refine_from: int, coarsen_above: int,
                 backend):
    """``(flags, change)``: the masked flags (uint8, backend array: bit 0 refine, bit 1
    coarsen) of the patches whose criterion bits are ``bits`` and levels ``level``
    (backend arrays), and the number of patches that can change the forest (a backend
    0-d array; see the module docstring).  Refinement only where ``refine_from <= level
    < max_level``, coarsening only where ``level > coarsen_above``.  ``family``: uint8
    backend array, 1 at the first leaf of each family of four leaf siblings (empty:
    every coarsening flag counts as a change)."""
    xp = backend.xp
    n = bits.shape[0]
    out = xp.zeros(n, dtype=np.uint8)
    change = xp.zeros(n, dtype=np.uint8)
    whole = family.shape[0] > 0
    if not whole:  # a placeholder: a kernel is not handed an empty array
        family = xp.zeros(1, dtype=np.uint8)
    per_patch(_mask_patch, _mask_patches, n, bits, level, family, whole, int(max_level),
              int(refine_from), int(coarsen_above), out, change, backend=backend)
    return out, change.sum(dtype=np.int64)
