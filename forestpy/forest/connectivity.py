"""Connectivity of a forest: a brick of ``nx * ny`` unit trees.

All trees have the same orientation, so a face of one tree meets the opposite face of
its neighbour without any coordinate transform.  Tree ``t = j * nx + i`` sits in column
``i`` and row ``j``; the brick is mapped affinely onto the physical rectangle
``[lower, upper]``.  Periodic directions wrap the last column (row) onto the first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Brick"]


@dataclass(frozen=True)
class Brick:
    """A rectangular brick of ``nx * ny`` unit trees, optionally periodic.

    Parameters
    ----------
    nx, ny : int
        Number of tree columns and rows; both must be positive.
    periodic_x, periodic_y : bool
        Whether the brick wraps around in x (y).
    lower, upper : tuple of float
        Physical corners of the brick; ``upper`` must exceed ``lower`` in both
        coordinates.

    Notes
    -----
    Immutable (a frozen dataclass); two bricks with equal parameters compare equal.

    Examples
    --------
    >>> b = Brick(3, 2, periodic_x=True, upper=(3.0, 2.0))
    >>> b.ntrees, b.tree_width, b.tree_height
    (6, 1.0, 1.0)
    >>> b.tree_ij(4)
    (1, 1)
    """

    nx: int = 1
    ny: int = 1
    periodic_x: bool = False
    periodic_y: bool = False
    lower: tuple[float, float] = (0.0, 0.0)
    upper: tuple[float, float] = (1.0, 1.0)

    def __post_init__(self):
        for name in ("nx", "ny"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"Brick: {name} must be an integer, got {v!r}")
            if v <= 0:
                raise ValueError(f"Brick: {name} must be positive, got {v}")
            object.__setattr__(self, name, int(v))
        for name in ("periodic_x", "periodic_y"):
            object.__setattr__(self, name, bool(getattr(self, name)))
        for name in ("lower", "upper"):
            v = getattr(self, name)
            try:
                t = tuple(float(c) for c in v)
            except TypeError as err:
                raise ValueError(f"Brick: {name} must be a pair of numbers, got {v!r}") from err
            if len(t) != 2 or not all(np.isfinite(t)):
                raise ValueError(f"Brick: {name} must be a pair of finite numbers, got {v!r}")
            object.__setattr__(self, name, t)
        if not (self.upper[0] > self.lower[0] and self.upper[1] > self.lower[1]):
            raise ValueError(
                f"Brick: upper {self.upper} must exceed lower {self.lower} in both coordinates"
            )

    @property
    def ntrees(self) -> int:
        """Number of trees, ``nx * ny``."""
        return self.nx * self.ny

    @property
    def tree_width(self) -> float:
        """Physical width of one tree."""
        return (self.upper[0] - self.lower[0]) / self.nx

    @property
    def tree_height(self) -> float:
        """Physical height of one tree."""
        return (self.upper[1] - self.lower[1]) / self.ny

    def tree_ij(self, t):
        """Column and row ``(i, j)`` of tree ``t`` (an int or an integer array).

        Raises
        ------
        ValueError
            If any ``t`` lies outside ``[0, ntrees)``.
        """
        ta = np.asarray(t, dtype=np.int64)
        if ta.size and (ta.min() < 0 or ta.max() >= self.ntrees):
            raise ValueError(f"Brick.tree_ij: tree index out of range [0, {self.ntrees})")
        i, j = ta % self.nx, ta // self.nx
        if ta.ndim == 0:
            return int(i), int(j)
        return i, j

    def tree_index(self, i, j):
        """Tree index ``j * nx + i`` of column ``i``, row ``j`` (ints or arrays)."""
        t = np.asarray(j, dtype=np.int64) * self.nx + np.asarray(i, dtype=np.int64)
        return int(t) if t.ndim == 0 else t
