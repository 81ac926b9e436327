"""Wave limiters of the ratio ``r`` (LeVeque 2002, section 6.12; Clawpack's ``philim``).

Each limiter is a ``numba.njit`` function ``phi(r)``; the batched kernels select one
per wave family at run time through :func:`limiter_apply` and the integer codes of
:data:`LIMITERS`.
"""

from __future__ import annotations

import numba

__all__ = [
    "LIMITERS",
    "limiter_code",
    "limiter_none",
    "limiter_minmod",
    "limiter_superbee",
    "limiter_vanleer",
    "limiter_mc",
    "limiter_apply",
]

#: name -> integer code used by the compiled kernels (``limiter_codes`` argument)
LIMITERS = {"none": 0, "minmod": 1, "superbee": 2, "vanleer": 3, "mc": 4}

_jit = numba.njit(cache=True, error_model="numpy", boundscheck=False)


@_jit
def limiter_none(r):
    """No limiting (Lax-Wendroff): phi = 1."""
    return 1.0


@_jit
def limiter_minmod(r):
    """phi = max(0, min(1, r))."""
    return max(0.0, min(1.0, r))


@_jit
def limiter_superbee(r):
    """phi = max(0, min(1, 2r), min(2, r))."""
    return max(0.0, min(1.0, 2.0 * r), min(2.0, r))


@_jit
def limiter_vanleer(r):
    """phi = (r + |r|) / (1 + |r|)."""
    a = abs(r)
    return (r + a) / (1.0 + a)


@_jit
def limiter_mc(r):
    """Monotonized centred: phi = max(0, min((1 + r)/2, 2, 2r))."""
    return max(0.0, min(0.5 * (1.0 + r), 2.0, 2.0 * r))


@_jit
def limiter_apply(code, r):
    """Evaluate the limiter with integer ``code`` (see :data:`LIMITERS`) at ``r``.

    Unknown codes behave like ``"none"``.
    """
    if code == 1:
        return limiter_minmod(r)
    elif code == 2:
        return limiter_superbee(r)
    elif code == 3:
        return limiter_vanleer(r)
    elif code == 4:
        return limiter_mc(r)
    return 1.0


def limiter_code(name) -> int:
    """Integer code of a limiter given by name (case-insensitive) or code."""
    if isinstance(name, (int,)) and not isinstance(name, bool):
        if name not in LIMITERS.values():
            raise ValueError(f"unknown limiter code {name}; valid: {sorted(LIMITERS.values())}")
        return int(name)
    key = str(name).lower().replace("_", "").replace("-", "").replace(" ", "")
    aliases = {"vanleer": "vanleer", "monotonizedcentered": "mc", "monotonizedcentred": "mc"}
    key = aliases.get(key, key)
    if key not in LIMITERS:
        raise ValueError(f"unknown limiter {name!r}; valid: {sorted(LIMITERS)}")
    return LIMITERS[key]
