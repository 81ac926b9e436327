"""Physical boundary conditions on the ghost cells outside the domain.

Applied after the ghost plan (which fills everything inside the domain, periodic
sides included), in Clawpack's order: the x sides on all rows, then the y sides on all
columns, so corner ghost cells take the y side's value.  Each side is one launch of
:func:`_bc_side_entry` over the patches touching it (:func:`forestpy.patches.launch.
for_each_entry`: a ``prange`` loop on the CPU, a CUDA kernel on the GPU backend).  The patches
on each side are index arrays (``geom.on_side``) that the caller uploads once per
regrid and passes as ``sides``.

Kinds
-----
``"extrap"``   zero-order extrapolation (outflow).
``"wall"``     mirror image with the normal component(s) negated (``reflect`` lists them).
``"periodic"`` handled by the forest's connectivity; nothing to do here.
callable       ``fn(side, q, aux, x, y, t)`` receives copies of the padded arrays of the
               patches on that side (``q``: (n, meqn, NY, NX), ``x``/``y`` cell centres)
               and fills the ghost cells of ``side`` in ``q``; they are copied back.
               The arrays are the backend's: NumPy on the CPU, **CuPy arrays on the GPU
               backend** (write the function with ``cupy.get_array_module(q)``, or with
               operations that both array modules share, to run on both); on the GPU the
               gather and the copy back stay on the device.  ``centers(idx)``, which
               supplies ``x``/``y``, receives the backend index array ``idx``.  This is
               the slow path (a gather, the function's array operations, a scatter).
pointwise      a hook with ``apply_side(side, q, aux, idx, context)``
               (:func:`forestpy.hooks.pointwise_boundary`, e.g. GeoClaw's
               ``IncidentWave``): a function of one ghost cell compiled for both
               backends, one launch per side, in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
import numpy as np

__all__ = ["BOUNDARY_KINDS", "normalize_bc", "apply_physical_bc"]

BOUNDARY_KINDS = ("extrap", "wall", "periodic")
SIDE_NAMES = ("x_lower", "x_upper", "y_lower", "y_upper")


def normalize_bc(bc, periodic_x: bool, periodic_y: bool) -> tuple:
    """Return a 4-tuple of boundary kinds (or callables), validated against periodicity.

    ``bc`` is a single kind for all sides, a sequence of 4, or a mapping by side name.
    """
    if isinstance(bc, str) or callable(bc):
        sides = [bc] * 4
    elif isinstance(bc, dict):
        unknown = set(bc) - set(SIDE_NAMES)
        if unknown:
            raise ValueError(f"unknown boundary side(s) {sorted(unknown)}; valid: {SIDE_NAMES}")
        sides = [bc.get(s, "extrap") for s in SIDE_NAMES]
    else:
        sides = list(bc)
        if len(sides) != 4:
            raise ValueError(f"bc needs 4 entries {SIDE_NAMES}, got {len(sides)}")
    periodic = (periodic_x, periodic_x, periodic_y, periodic_y)
    for name, kind, per in zip(SIDE_NAMES, sides, periodic):
        if callable(kind):
            if per:
                raise ValueError(f"side {name} is periodic and cannot take a user boundary")
            continue
        if kind not in BOUNDARY_KINDS:
            raise ValueError(
                f"unknown boundary condition {kind!r} on {name}; valid: {BOUNDARY_KINDS} "
                "or a callable"
            )
        if (kind == "periodic") != per:
            raise ValueError(
                f"boundary {name}={kind!r} disagrees with the domain's periodicity "
                f"(periodic={per}); set periodic in the domain and 'periodic' on both sides"
            )
    return tuple(sides)


def _side_indices(geom, backend, sides):
    if sides is not None:
        return sides
    idx = [geom.on_side(side) for side in range(4)]
    return idx if backend is None else [backend.to_device(i) for i in idx]


def apply_physical_bc(
    q,
    geom,
    bc: Sequence,
    reflect: Sequence[Sequence[int]],
    t: float = 0.0,
    aux=None,
    centers: Callable | None = None,
    backend=None,
    sides: Sequence | None = None,
    context=None,
) -> None:
    """Fill ghost cells outside the domain in place (see the module docstring).

    ``reflect[0]`` lists the components negated at walls normal to x, ``reflect[1]`` at
    walls normal to y.  ``centers(idx)`` returns the cell centres ``(x, y)`` of the
    patches ``idx`` for user callbacks.  ``sides``: the four per-side patch index
    arrays (``geom.on_side(side)`` as backend int64 arrays), built once per regrid;
    computed (and uploaded) here when None.  ``backend``: None or a CPU backend for
    host arrays; a GPU backend runs ``"extrap"`` and ``"wall"`` as one CUDA kernel
    launch per side.  ``context``: the :class:`~forestpy.hooks.HookContext` of the
    rows of ``q`` that pointwise boundaries receive (made from ``geom`` when None).
    """
    gpu = backend is not None and backend.is_gpu
    sides = _side_indices(geom, backend, sides)
    mbc = geom.mbc
    for side in range(4):
        kind = bc[side]
        if kind == "periodic":
            continue
        idx = sides[side]
        if len(idx) == 0:
            continue
        axis = 3 if side < 2 else 2
        n = q.shape[axis]
        if getattr(kind, "takes_context", False):
            if context is None:
                from forestpy.backend import CPUBackend
                from forestpy.hooks import HookContext

                context = HookContext.of_geometry(geom, backend or CPUBackend(), t)
            kind.apply_side(side, q, aux, idx, context)
            continue
        if callable(kind):
            sub = q[idx]
            x, y = centers(idx) if centers is not None else (None, None)
            kind(side, sub, None if aux is None else aux[idx], x, y, t)
            # the ghost layers of ``side`` are contiguous: copy them back in one piece
            g = slice(0, mbc) if side in (0, 2) else slice(n - mbc, n)
            if axis == 3:
                q[idx, :, :, g] = sub[:, :, :, g]
            else:
                q[idx, :, g, :] = sub[:, :, g, :]
            continue
        from forestpy.patches.launch import component_mask, for_each_entry

        negate = reflect[0 if axis == 3 else 1]
        if gpu:
            mask = component_mask(backend, q.shape[1], negate)
        else:
            mask = np.zeros(q.shape[1], dtype=np.bool_)
            mask[list(negate)] = True
        L = q.shape[2] if side < 2 else q.shape[3]
        for_each_entry(_bc_side_entry, len(idx) * L, q, np.asarray(idx) if not gpu else idx,
                       side < 2, side in (0, 2), kind == "wall", mask, mbc,
                       backend=backend if gpu else None)


@numba.njit(inline="always")
def _bc_side_entry(q, idx, x_side, lower, wall, negate, mbc, t):
    """GPU thread ``t`` of one side: patch ``idx[t // L]``, cell position ``t % L`` along
    the side (all ``L`` rows of the padded patch for an x side, all ``L`` columns for a
    y side, ghost rows/columns included, as the CPU path does); every ghost layer and
    component, components of ``negate`` negated at a wall."""
    L = q.shape[2] if x_side else q.shape[3]
    p = idx[t // L]
    pos = t % L
    n = q.shape[3] if x_side else q.shape[2]
    for g in range(mbc):
        if lower:
            ghost = mbc - 1 - g
            src = mbc + g if wall else mbc
        else:
            ghost = n - mbc + g
            src = n - mbc - 1 - g if wall else n - mbc - 1
        for m in range(q.shape[1]):
            if x_side:
                v = q[p, m, pos, src]
            else:
                v = q[p, m, src, pos]
            if wall and negate[m]:
                v = -v
            if x_side:
                q[p, m, pos, ghost] = v
            else:
                q[p, m, ghost, pos] = v
