"""Physical boundary conditions on the ghost cells outside the domain.

Applied after the ghost plan (which fills everything inside the domain, periodic
sides included), in Clawpack's order: the x sides on all rows, then the y sides on all
columns, so corner ghost cells take the y side's value.  Each side is one vectorised
assignment over the patches touching it.

Kinds
-----
``"extrap"``   zero-order extrapolation (outflow).
``"wall"``     mirror image with the normal component(s) negated (``reflect`` lists them).
``"periodic"`` handled by the forest's connectivity; nothing to do here.
callable       ``fn(side, q, aux, x, y, t)`` receives copies of the padded arrays of the
               patches on that side (``q``: (n, meqn, NY, NX), ``x``/``y`` cell centres)
               and fills the ghost cells of ``side`` in ``q``; they are copied back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def apply_physical_bc(
    q,
    geom,
    bc: Sequence,
    reflect: Sequence[Sequence[int]],
    t: float = 0.0,
    aux=None,
    centers: Callable | None = None,
) -> None:
    """Fill ghost cells outside the domain in place (see the module docstring).

    ``reflect[0]`` lists the components negated at walls normal to x, ``reflect[1]`` at
    walls normal to y.  ``centers`` returns cell centres for user callbacks.
    """
    mbc = geom.mbc
    for side in range(4):
        kind = bc[side]
        if kind == "periodic":
            continue
        idx = geom.on_side(side)
        if len(idx) == 0:
            continue
        axis = 3 if side < 2 else 2
        n = q.shape[axis]
        g = np.arange(mbc)
        if side in (0, 2):
            ghost, mirror, edge = mbc - 1 - g, mbc + g, np.full(mbc, mbc)
        else:
            ghost, mirror, edge = n - mbc + g, n - mbc - 1 - g, np.full(mbc, n - mbc - 1)
        if callable(kind):
            sub = q[idx]
            x, y = centers(idx) if centers is not None else (None, None)
            kind(side, sub, None if aux is None else aux[idx], x, y, t)
            for k in range(mbc):
                if axis == 3:
                    q[idx, :, :, ghost[k]] = sub[:, :, :, ghost[k]]
                else:
                    q[idx, :, ghost[k], :] = sub[:, :, ghost[k], :]
            continue
        src = mirror if kind == "wall" else edge
        for k in range(mbc):
            if axis == 3:
                q[idx, :, :, ghost[k]] = q[idx, :, :, src[k]]
            else:
                q[idx, :, ghost[k], :] = q[idx, :, src[k], :]
        if kind == "wall":
            for c in reflect[0 if axis == 3 else 1]:
                for k in range(mbc):
                    if axis == 3:
                        q[idx, c, :, ghost[k]] *= -1.0
                    else:
                        q[idx, c, ghost[k], :] *= -1.0
