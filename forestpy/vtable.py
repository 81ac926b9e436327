"""Solver vtables and the Riemann-solver registry.

A *Riemann solver* is a record of pointwise functions plus the metadata that travels
with them (ForestClaw's ``rpn2``/``rpt2`` pair, clawpack/riemann's ``num_eqn`` and
``num_waves``).  The pointwise functions are plain Python written once; the batched
kernels of :mod:`forestpy.solvers.clawpack` compile them with Numba.

Pointwise contract
------------------
``rpn2(ixy, ql, qr, auxl, auxr, params, wave, s, amdq, apdq)``
    Normal Riemann problem at one interface.  ``ixy`` is 1 when the interface normal is
    x and 2 when it is y (Clawpack's convention).  ``ql``/``qr`` (``num_eqn``) are the
    states left/below and right/above, ``auxl``/``auxr`` (``num_aux``) their aux values,
    ``params`` a float64 array in the order of ``param_names``.  Outputs (written in
    place): ``wave[num_eqn, num_waves]`` (f-waves when ``fwave`` is true), speeds
    ``s[num_waves]``, and the fluctuations ``amdq``, ``apdq`` (``num_eqn``).  For a
    conservative solver ``amdq + apdq = f(qr) - f(ql)``.

``rpt2(ixy, imp, ql, qr, aux1, aux2, aux3, params, asdq, bmasdq, bpasdq)``
    Transverse split of the fluctuation ``asdq`` produced by the normal solve at the
    same interface: ``imp == 1`` when ``asdq`` is the left-going part (it enters the
    cell of ``ql``), ``imp == 2`` for the right-going part (cell of ``qr``).
    ``aux1``/``aux2``/``aux3`` are the aux values of that cell's transverse neighbours
    at offsets -1, 0, +1.  Outputs ``bmasdq`` and ``bpasdq`` (``num_eqn``): the parts
    moving in the negative and positive transverse direction.

Functions must not use globals other than constants and other ``numba.njit`` functions,
must not allocate, and must treat ``params`` as read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

__all__ = [
    "RiemannSolver",
    "register_riemann",
    "get_riemann",
    "available_riemann",
    "SolverVtable",
]


@dataclass(frozen=True)
class RiemannSolver:
    """A pointwise Riemann solver and its metadata (see the module docstring).

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"shallow_roe"``.
    num_eqn, num_waves, num_aux : int
        Sizes of the state, of the wave fan, and of the aux vector per cell.
    rpn2, rpt2 : callable
        Pointwise normal and transverse solvers; ``rpt2`` may be ``None`` (then only
        ``transverse_waves=0`` is possible).
    field_names : tuple of str
        Name of every component of ``q``.
    param_names : tuple of str
        Names of the entries of ``params``; ``default_params`` gives their defaults.
    fwave : bool
        True when ``wave`` holds f-waves (flux-difference splitting).
    conserved : tuple of bool
        Which components are conserved quantities (totals reported and kept).
    description : str
        One line for listings.
    """

    name: str
    num_eqn: int
    num_waves: int
    rpn2: Callable
    rpt2: Callable | None = None
    num_aux: int = 0
    field_names: tuple[str, ...] = ()
    param_names: tuple[str, ...] = ()
    default_params: Mapping[str, float] = field(default_factory=dict)
    fwave: bool = False
    conserved: tuple[bool, ...] = ()
    description: str = ""

    def __post_init__(self):
        if not self.field_names:
            object.__setattr__(self, "field_names", tuple(f"q{m}" for m in range(self.num_eqn)))
        if len(self.field_names) != self.num_eqn:
            raise ValueError(
                f"Riemann solver {self.name!r}: {len(self.field_names)} field names "
                f"for num_eqn={self.num_eqn}"
            )
        if not self.conserved:
            object.__setattr__(self, "conserved", (True,) * self.num_eqn)
        unknown = set(self.default_params) - set(self.param_names)
        if unknown:
            raise ValueError(
                f"Riemann solver {self.name!r}: default_params has unknown names "
                f"{sorted(unknown)}; param_names are {list(self.param_names)}"
            )

    def params_array(self, overrides: Mapping[str, float] | None = None) -> np.ndarray:
        """Return ``params`` as a float64 array in ``param_names`` order.

        Every name needs a value, from ``overrides`` or ``default_params``; unknown
        names in ``overrides`` raise ``ValueError``.
        """
        overrides = dict(overrides or {})
        unknown = set(overrides) - set(self.param_names)
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {sorted(unknown)} for Riemann solver {self.name!r}; "
                f"valid: {list(self.param_names)}"
            )
        values = []
        for p in self.param_names:
            if p in overrides:
                values.append(float(overrides[p]))
            elif p in self.default_params:
                values.append(float(self.default_params[p]))
            else:
                raise ValueError(f"Riemann solver {self.name!r} needs parameter {p!r}")
        return np.array(values if values else [0.0], dtype=np.float64)


_REGISTRY: dict[str, RiemannSolver] = {}
_ENTRY_POINTS_LOADED = False


def register_riemann(solver: RiemannSolver, *, replace: bool = False) -> RiemannSolver:
    """Add ``solver`` to the registry under ``solver.name`` and return it.

    Registering a different solver under a taken name raises unless ``replace``.
    """
    if not isinstance(solver, RiemannSolver):
        raise TypeError(f"expected a RiemannSolver, got {type(solver).__name__}")
    old = _REGISTRY.get(solver.name)
    if old is not None and old is not solver and not replace:
        raise ValueError(f"a Riemann solver named {solver.name!r} is already registered")
    _REGISTRY[solver.name] = solver
    return solver


def _load_builtin_and_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    import forestpy.extensions.riemann  # noqa: F401  (registers the built-in solvers)

    for ep in metadata.entry_points(group="forestpy.riemann"):
        obj = ep.load()
        solver = obj() if callable(obj) and not isinstance(obj, RiemannSolver) else obj
        register_riemann(solver)


def get_riemann(name: str | RiemannSolver) -> RiemannSolver:
    """Look up a Riemann solver by name (a ``RiemannSolver`` passes through)."""
    if isinstance(name, RiemannSolver):
        return name
    _load_builtin_and_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"no Riemann solver named {name!r}; registered: {sorted(_REGISTRY)}"
        ) from None


def available_riemann() -> list[str]:
    """Names of all registered Riemann solvers (built-in and entry points)."""
    _load_builtin_and_entry_points()
    return sorted(_REGISTRY)


@dataclass
class SolverVtable:  # filled in with the Simulation (placeholder for the helpers' imports)
    name: str = ""
