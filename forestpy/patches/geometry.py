"""Patch geometry: where each leaf's mx x my cells lie, at every level.

Every leaf of the forest carries one patch of ``mx x my`` cells with ``mbc`` ghost
layers.  A patch is addressed by its level ``l`` and its *global quadrant index*
``(gqx, gqy)`` among the ``(nx * 2**l) x (ny * 2**l)`` quadrants of that level over
the whole brick.  Its cells then have global level-``l`` cell indices
``Ix = gqx * mx + i`` (``i`` counted from the first interior cell), and the cell grids
of successive levels nest 2:1, which is what ghost filling, regrid and time sync use.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from forestpy.forest import MAX_LEVEL

__all__ = ["PatchGeometry"]


@dataclass(frozen=True)
class PatchGeometry:
    """Geometry of a batch of patches (host arrays, one entry per leaf).

    Attributes
    ----------
    mx, my, mbc : int
        Interior cells per patch in x and y, and ghost layers.
    level, gqx, gqy : int64 arrays
        Level and global quadrant indices of each patch.
    xlower, ylower, dx, dy : float64 arrays
        Physical lower-left corner of the interior and cell sizes.
    trees_x, trees_y, periodic_x, periodic_y, domain_lower, domain_upper
        The brick the patches tile; :meth:`ncells_at` gives the number of cells
        across the domain at a level.
    """

    mx: int
    my: int
    mbc: int
    level: np.ndarray
    gqx: np.ndarray
    gqy: np.ndarray
    xlower: np.ndarray
    ylower: np.ndarray
    dx: np.ndarray
    dy: np.ndarray
    trees_x: int
    trees_y: int
    periodic_x: bool
    periodic_y: bool
    domain_lower: tuple[float, float]
    domain_upper: tuple[float, float]

    @classmethod
    def from_forest(cls, forest, mx: int, my: int, mbc: int) -> PatchGeometry:
        if mx % 2 or my % 2 or mx < 2 * mbc or my < 2 * mbc:
            raise ValueError(
                f"patch size mx={mx}, my={my} must be even and at least 2*mbc={2 * mbc} "
                "(ghost cells must come from face/corner neighbours only)"
            )
        conn = forest.conn
        level = np.asarray(forest.level, dtype=np.int64)
        gx, gy = forest.global_xy()
        shift = MAX_LEVEL - level
        gqx = np.right_shift(gx, shift)
        gqy = np.right_shift(gy, shift)
        scale = np.ldexp(1.0, level)  # 2.0**level, exactly
        qw = conn.tree_width / scale
        qh = conn.tree_height / scale
        x0, y0 = conn.lower
        return cls(
            mx=mx,
            my=my,
            mbc=mbc,
            level=level,
            gqx=gqx,
            gqy=gqy,
            xlower=x0 + gqx * qw,
            ylower=y0 + gqy * qh,
            dx=qw / mx,
            dy=qh / my,
            trees_x=conn.nx,
            trees_y=conn.ny,
            periodic_x=conn.periodic_x,
            periodic_y=conn.periodic_y,
            domain_lower=tuple(conn.lower),
            domain_upper=tuple(conn.upper),
        )

    @property
    def npatch(self) -> int:
        return len(self.level)

    @property
    def shape(self) -> tuple[int, int]:
        """Padded cell shape ``(my + 2 mbc, mx + 2 mbc)`` of one patch."""
        return (self.my + 2 * self.mbc, self.mx + 2 * self.mbc)

    def ncells_at(self, level):
        """Cells across the whole domain at ``level``: ``(NX, NY)``."""
        return self.trees_x * self.mx * 2**level, self.trees_y * self.my * 2**level

    def cell_centers(self, ghosts: bool = True, backend=None):
        """Cell-centre coordinates ``(xc, yc)``, each ``(npatch, NY, NX)``; host arrays,
        or with ``backend`` its arrays made there from the per-patch corners and cell
        sizes (a few numbers per patch cross the bus, not the centres; the same
        operations, so the same values)."""
        b = self.mbc if ghosts else 0
        i = np.arange(-b, self.mx + b) + 0.5
        j = np.arange(-b, self.my + b) + 0.5
        xp, up = (np, np.asarray) if backend is None else (backend.xp, backend.to_device)
        x0, y0, dx, dy, i, j = (up(a) for a in (self.xlower, self.ylower, self.dx, self.dy,
                                                  i, j))
        xc = x0[:, None, None] + dx[:, None, None] * i[None, None, :]
        yc = y0[:, None, None] + dy[:, None, None] * j[None, :, None]
        ny, nx = len(j), len(i)
        return (
            xp.broadcast_to(xc, (self.npatch, ny, nx)).copy(),
            xp.broadcast_to(yc, (self.npatch, ny, nx)).copy(),
        )

    def subset(self, ids) -> PatchGeometry:
        """The geometry of the patches ``ids`` (host indices, in that order)."""
        return replace(self, level=self.level[ids], gqx=self.gqx[ids], gqy=self.gqy[ids],
                       xlower=self.xlower[ids], ylower=self.ylower[ids], dx=self.dx[ids],
                       dy=self.dy[ids])

    def cell_area(self) -> np.ndarray:
        return self.dx * self.dy

    def on_side(self, side: int) -> np.ndarray:
        """Indices of patches touching physical side 0=-x, 1=+x, 2=-y, 3=+y."""
        if side == 0:
            m = self.gqx == 0
        elif side == 1:
            m = self.gqx == np.left_shift(self.trees_x, self.level) - 1
        elif side == 2:
            m = self.gqy == 0
        else:
            m = self.gqy == np.left_shift(self.trees_y, self.level) - 1
        return np.flatnonzero(m)
