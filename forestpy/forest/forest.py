"""The forest of quadtrees: leaves as sorted NumPy arrays, every operation vectorised.

A :class:`Forest` holds its leaves as four int64 arrays ``tree, level, x, y`` sorted by the
global space-filling-curve key ``tree * 4**MAX_LEVEL + morton(x, y)``.  Because each leaf
covers one contiguous key interval and the leaves tile every tree, point location is a
single ``searchsorted`` and every neighbour query is a point location of a few points
just outside each leaf.  No Python object exists per leaf and no Python loop runs over
leaves; loops run over the 4 faces / 4 corners or over balance sweeps.  The operations
a regrid makes (refinement, coarsening, the balance check, :meth:`Forest.adapt`) run on
compiled one-pass loops over the leaves (:mod:`forestpy.forest.kernels`).

A Forest is immutable: its arrays are read-only and every operation (refine, coarsen,
balance) returns a new Forest.  Results of expensive queries (neighbour tables) are
cached on the instance.  All operations are serial, on the host, and blocking.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from . import kernels
from .connectivity import Brick
from .quadrants import (
    MAX_LEVEL,
    ROOT_LEN,
    TREE_KEYS,
    family_starts,
    is_aligned,
    key_span,
    morton_decode,
    quadrant_key,
    quadrant_len,
)

__all__ = ["Forest", "FaceNeighbors", "CornerNeighbors"]

# Face directions 0=-x, 1=+x, 2=-y, 3=+y and corner directions 0=(-x,-y), 1=(+x,-y),
# 2=(-x,+y), 3=(+x,+y) as (dx, dy) signs.
_FACES = ((-1, 0), (1, 0), (0, -1), (0, 1))
_CORNERS = ((-1, -1), (1, -1), (-1, 1), (1, 1))


def _readonly(a):
    a = np.ascontiguousarray(a, dtype=np.int64)
    a.flags.writeable = False
    return a


def _outside(g, s, h):
    """Coordinate just outside a leaf at ``g`` of side ``h`` in direction sign ``s``."""
    if s < 0:
        return g - 1
    if s > 0:
        return g + h
    return g


@dataclass(frozen=True)
class FaceNeighbors:
    """Face-neighbour table of a forest with ``n`` leaves.

    Attributes
    ----------
    kind : numpy.ndarray of int8, shape (n, 4)
        Per face (0 = -x, 1 = +x, 2 = -y, 3 = +y): -1 physical boundary, 0 one
        same-level neighbour, 1 one coarser neighbour, 2 two finer neighbours.
    index : numpy.ndarray of int64, shape (n, 4, 2)
        Neighbour leaf indices.  Kinds 0 and 1 repeat the one neighbour in both
        entries; kind 2 lists the two finer neighbours by increasing coordinate along
        the face; -1 at a physical boundary.

    Notes
    -----
    Kind 2 assumes a face-balanced (2:1) forest.  On an unbalanced forest the two entries
    are the leaves touching the face at the start of each half of the face.
    """

    kind: np.ndarray
    index: np.ndarray


@dataclass(frozen=True)
class CornerNeighbors:
    """Corner-neighbour table of a forest with ``n`` leaves.

    Attributes
    ----------
    kind : numpy.ndarray of int8, shape (n, 4)
        Per corner (0 = (-x,-y), 1 = (+x,-y), 2 = (-x,+y), 3 = (+x,+y)): -1 physical
        boundary, 0 same level, 1 coarser, 2 finer.
    index : numpy.ndarray of int64, shape (n, 4)
        The leaf covering the region diagonally beyond the corner (the leaf containing
        the finest cell diagonally adjacent to the corner); -1 at a physical boundary.
    face_adjacent : numpy.ndarray of bool, shape (n, 4)
        True where that leaf (always coarser then) also shares a segment of a face with
        this leaf: the corner is a hanging node in the interior of the coarser leaf's
        face, and no leaf touches this leaf at that corner only.  False everywhere
        else, in particular wherever ``kind`` is 0 or 2.
    """

    kind: np.ndarray
    index: np.ndarray
    face_adjacent: np.ndarray


def _wrap(conn: Brick, gx, gy):
    """Wrap global coordinates in periodic directions; return ``(gx, gy, inside)``."""
    gx = np.asarray(gx, dtype=np.int64)
    gy = np.asarray(gy, dtype=np.int64)
    wx, wy = conn.nx * ROOT_LEN, conn.ny * ROOT_LEN
    if conn.periodic_x:
        gx = gx % wx
    if conn.periodic_y:
        gy = gy % wy
    inside = (gx >= 0) & (gx < wx) & (gy >= 0) & (gy < wy)
    return gx, gy, inside


def _locate_global(conn: Brick, keys, gx, gy):
    """Leaf index containing each global finest-unit point, -1 outside the brick."""
    gx, gy, inside = _wrap(conn, gx, gy)
    gx = np.where(inside, gx, 0)
    gy = np.where(inside, gy, 0)
    i, x = gx >> MAX_LEVEL, gx & (ROOT_LEN - 1)
    j, y = gy >> MAX_LEVEL, gy & (ROOT_LEN - 1)
    pk = quadrant_key(j * conn.nx + i, x, y)
    idx = np.searchsorted(keys, pk, side="right") - 1
    return np.where(inside, idx, -1)


def _global_xy(conn: Brick, tree, x, y):
    return (tree % conn.nx) * ROOT_LEN + x, (tree // conn.nx) * ROOT_LEN + y


def _coarse_neighbors(conn, keys, tree, level, x, y, sel):
    """Balance violations seen from the leaves ``sel`` (an index array).

    Returns ``(coarse, fine)``: index arrays of leaves that are two or more levels coarser
    than a leaf of ``sel`` they touch (across a face or a corner), and of the leaves of
    ``sel`` that see such a neighbour.  One point per face and per corner suffices: a
    coarser leaf touching a face covers all of it, one touching only a corner covers the
    finest cell diagonally beyond it.  Compiled (:func:`~forestpy.forest.kernels.
    coarse_neighbors`).
    """
    return kernels.coarse_neighbors(conn, keys, tree, level, x, y, sel)


def _refine_arrays(tree, level, x, y, keys, flags):
    """Replace each flagged leaf by its 4 children; also return the is-new mask and the
    per-old-leaf output counts.  Compiled (:func:`~forestpy.forest.kernels.
    refine_arrays`)."""
    return kernels.refine_arrays(tree, level, x, y, keys, np.ascontiguousarray(flags, dtype=bool))


def _balance_arrays(conn, t, lv, x, y, k, sel):
    """Balance sweeps from the leaves ``sel`` (every violation must have its finer leaf
    among them): each sweep refines once the leaves two or more levels coarser than a
    leaf of ``sel`` they touch; the next sweep looks from the new leaves and those that
    saw a violation.  Returns the arrays (the same objects when nothing changed)."""
    while sel.size:
        coarse, fine = _coarse_neighbors(conn, k, t, lv, x, y, sel)
        if coarse.size == 0:
            break
        flags = np.zeros(t.shape[0], dtype=bool)
        flags[coarse] = True
        seen = np.zeros(t.shape[0], dtype=bool)
        seen[fine] = True
        t, lv, x, y, k, new, counts = _refine_arrays(t, lv, x, y, k, flags)
        # Only new leaves and leaves that saw a violation can see one next sweep.
        sel = np.flatnonzero(new | np.repeat(seen, counts))
    return t, lv, x, y, k


class Forest:
    """An immutable forest of quadtrees over a :class:`~forestpy.forest.Brick`.

    Parameters
    ----------
    conn : Brick
        The connectivity.
    tree, level, x, y : array_like of int
        One entry per leaf, in any order: the constructor sorts them along the global
        space-filling curve.
    check : bool, optional
        Validate the result (default) and raise ``ValueError`` if the leaves do not tile
        the brick exactly.  ``check=False`` is for tests that build corrupted forests.

    Attributes
    ----------
    conn : Brick
    tree, level, x, y : numpy.ndarray of int64, read-only
        Leaves sorted by :attr:`keys`.
    keys : numpy.ndarray of int64, read-only
        ``tree * 4**MAX_LEVEL + morton(x, y)``, strictly increasing in a valid forest.

    Notes
    -----
    Host-side, serial, blocking.  All methods are vectorised over leaves.  Leaf ``i``
    covers the key interval ``[keys[i], keys[i] + 4**(MAX_LEVEL - level[i]))``.

    Examples
    --------
    >>> f = Forest.new(Brick(2, 1), min_level=1)
    >>> f.n
    8
    >>> g = f.refine(f.level == 1).coarsen(np.ones(32, dtype=bool))
    >>> g == f
    True
    """

    def __init__(self, conn: Brick, tree, level, x, y, *, check: bool = True):
        if not isinstance(conn, Brick):
            raise TypeError(f"Forest: conn must be a Brick, got {type(conn).__name__}")
        arrs = [np.asarray(a) for a in (tree, level, x, y)]
        for a in arrs:
            if a.ndim != 1 or a.shape[0] != arrs[0].shape[0]:
                raise ValueError("Forest: tree, level, x, y must be 1-D of equal length")
            if a.size and not np.issubdtype(a.dtype, np.integer):
                raise ValueError("Forest: tree, level, x, y must be integer arrays")
        tree, level, x, y = (a.astype(np.int64) for a in arrs)
        keys = quadrant_key(tree, x, y)
        order = np.argsort(keys, kind="stable")
        self._set(conn, tree[order], level[order], x[order], y[order], keys[order])
        if check:
            reason = self._invalid_reason()
            if reason is not None:
                raise ValueError(f"Forest: invalid leaves: {reason}")

    # -- construction ------------------------------------------------------------------

    def _set(self, conn, tree, level, x, y, keys):
        d = self.__dict__
        d["conn"] = conn
        d["tree"], d["level"] = _readonly(tree), _readonly(level)
        d["x"], d["y"], d["keys"] = _readonly(x), _readonly(y), _readonly(keys)
        d["_cache"] = {}

    @classmethod
    def _from_sorted(cls, conn, tree, level, x, y, keys):
        """Trusted constructor: arrays already sorted and valid."""
        f = cls.__new__(cls)
        f._set(conn, tree, level, x, y, keys)
        return f

    def __setattr__(self, name, value):
        raise AttributeError("Forest is immutable")

    @classmethod
    def new(cls, conn: Brick, min_level: int = 0) -> Forest:
        """Uniform forest: every tree refined to ``min_level``.

        Parameters
        ----------
        conn : Brick
        min_level : int
            In ``[0, MAX_LEVEL - 1]``; the forest has ``ntrees * 4**min_level`` leaves.

        Examples
        --------
        >>> Forest.new(Brick(3, 2), 2).n
        96
        """
        if not isinstance(conn, Brick):
            raise TypeError(f"Forest.new: conn must be a Brick, got {type(conn).__name__}")
        lvl = int(min_level)
        if not 0 <= lvl <= MAX_LEVEL - 1:
            raise ValueError(f"Forest.new: min_level must be in [0, {MAX_LEVEL - 1}], got {lvl}")
        per = 1 << (2 * lvl)
        m = np.arange(per, dtype=np.int64)
        h = 1 << (MAX_LEVEL - lvl)
        qx, qy = morton_decode(m)
        tree = np.repeat(np.arange(conn.ntrees, dtype=np.int64), per)
        x = np.tile(qx * h, conn.ntrees)
        y = np.tile(qy * h, conn.ntrees)
        keys = tree * TREE_KEYS + np.tile(m * (h * h), conn.ntrees)
        level = np.full(tree.shape[0], lvl, dtype=np.int64)
        return cls._from_sorted(conn, tree, level, x, y, keys)

    # -- basic properties --------------------------------------------------------------

    @property
    def n(self) -> int:
        """Number of leaves."""
        return int(self.tree.shape[0])

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        lv = f"levels {self.level.min()}..{self.level.max()}" if self.n else "empty"
        return f"Forest(n={self.n}, {lv}, conn={self.conn!r})"

    def __eq__(self, other):
        if not isinstance(other, Forest):
            return NotImplemented
        return (
            self.conn == other.conn
            and self.n == other.n
            and bool(np.array_equal(self.keys, other.keys))
            and bool(np.array_equal(self.level, other.level))
        )

    def __hash__(self):
        return hash((self.conn, self.checksum()))

    def levels_count(self) -> np.ndarray:
        """Number of leaves per level: int64 array of length ``MAX_LEVEL + 1``."""
        return np.bincount(self.level, minlength=MAX_LEVEL + 1).astype(np.int64)

    def checksum(self) -> int:
        """CRC-32 of the leaves' ``(tree, level, x, y)`` arrays (little-endian int64).

        Equal leaf sets give equal checksums; the connectivity does not enter.
        """
        c = zlib.crc32(np.int64(self.n).astype("<i8").tobytes())
        for a in (self.tree, self.level, self.x, self.y):
            c = zlib.crc32(np.ascontiguousarray(a, dtype="<i8").tobytes(), c)
        return int(c)

    # -- validity ----------------------------------------------------------------------

    def _invalid_reason(self):
        c = self.conn
        t, lv, x, y, k = self.tree, self.level, self.x, self.y, self.keys
        if self.n == 0:
            return "no leaves"
        if t.min() < 0 or t.max() >= c.ntrees:
            return f"tree index outside [0, {c.ntrees})"
        ok = is_aligned(lv, x, y)
        if not ok.all():
            i = int(np.argmin(ok))
            return f"leaf {i} (level {lv[i]}, x {x[i]}, y {y[i]}) out of range or misaligned"
        if not np.array_equal(k, quadrant_key(t, x, y)):
            return "keys do not match coordinates"
        if np.any(np.diff(k) <= 0):
            return "leaves not strictly sorted by key (duplicates or wrong order)"
        end = k + key_span(lv)
        if np.any(end[:-1] > k[1:]):
            return "overlapping leaves"
        # Area: every tree must be covered exactly (with no overlap this means no gaps).
        area = np.zeros(c.ntrees, dtype=np.int64)
        np.add.at(area, t, key_span(lv))
        if np.any(area != TREE_KEYS):
            return "leaves do not cover every tree exactly"
        if k[0] != 0 or np.any(end[:-1] != k[1:]):
            return "gap between leaves"
        return None

    def is_valid(self) -> bool:
        """Whether the leaves are sorted by key without duplicates, aligned to their level,
        inside their trees, non-overlapping, and tile every tree exactly."""
        return self._invalid_reason() is None

    # -- geometry ----------------------------------------------------------------------

    def global_xy(self):
        """Leaf lower-left corners in global finest units over the brick:
        ``gx = i_tree * 2**MAX_LEVEL + x`` (likewise ``gy``); int64 arrays."""
        return _global_xy(self.conn, self.tree, self.x, self.y)

    def leaf_lower(self):
        """Physical lower-left corners ``(xlo, ylo)`` of the leaves, float64 arrays."""
        c = self.conn
        gx, gy = self.global_xy()
        xlo = c.lower[0] + (gx / (c.nx * ROOT_LEN)) * (c.upper[0] - c.lower[0])
        ylo = c.lower[1] + (gy / (c.ny * ROOT_LEN)) * (c.upper[1] - c.lower[1])
        return xlo, ylo

    def leaf_size(self):
        """Physical sizes ``(w, h)`` of the leaves, float64 arrays."""
        s = np.ldexp(1.0, -self.level.astype(np.int32))
        return s * self.conn.tree_width, s * self.conn.tree_height

    # -- point location ----------------------------------------------------------------

    def locate(self, tree, x, y):
        """Index of the leaf containing each finest-unit point ``(tree, x, y)``.

        Vectorised over broadcast arrays; points outside ``[0, 2**MAX_LEVEL)`` or with an
        invalid tree give -1.

        Examples
        --------
        >>> f = Forest.new(Brick(), 1)
        >>> f.locate([0, 0], [0, 2**19], [2**19, 2**19]).tolist()
        [2, 3]
        """
        tree, x, y = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in (tree, x, y)))
        ok = (tree >= 0) & (tree < self.conn.ntrees)
        ok &= (x >= 0) & (x < ROOT_LEN) & (y >= 0) & (y < ROOT_LEN)
        pk = quadrant_key(np.where(ok, tree, 0), np.where(ok, x, 0), np.where(ok, y, 0))
        idx = np.searchsorted(self.keys, pk, side="right") - 1
        return np.where(ok, idx, -1)

    def locate_global(self, gx, gy):
        """Index of the leaf containing each global finest-unit point ``(gx, gy)``.

        ``gx`` ranges over ``[0, nx * 2**MAX_LEVEL)`` (likewise ``gy``); points outside
        wrap in periodic directions and give -1 otherwise.
        """
        return _locate_global(self.conn, self.keys, gx, gy)

    # -- adaptation --------------------------------------------------------------------

    def _flags(self, flags, name):
        f = np.asarray(flags)
        if f.shape != (self.n,):
            raise ValueError(f"Forest.{name}: flags must have shape ({self.n},), got {f.shape}")
        return f.astype(bool)

    def refine(self, flags, max_level: int | None = None) -> Forest:
        """Replace each flagged leaf by its 4 children (in Morton order, in place along the
        curve).

        Parameters
        ----------
        flags : array_like of bool, shape (n,)
        max_level : int, optional
            Flags on leaves at ``max_level`` or deeper are ignored.

        Returns
        -------
        Forest
            Leaf ``i`` becomes leaves ``off[i]:off[i] + 4`` (flagged) or ``off[i]``, with
            ``off = cumsum(where(flags, 4, 1)) - where(flags, 4, 1)``.

        Raises
        ------
        ValueError
            If a flagged leaf (not excluded by ``max_level``) has level
            ``>= MAX_LEVEL - 1``.
        """
        f = self._flags(flags, "refine")
        if max_level is not None:
            f &= self.level < int(max_level)
        if not f.any():
            return self
        if np.any(self.level[f] >= MAX_LEVEL - 1):
            raise ValueError(f"Forest.refine: cannot refine leaves at level >= {MAX_LEVEL - 1}")
        t, lv, x, y, k, _, _ = _refine_arrays(self.tree, self.level, self.x, self.y, self.keys, f)
        return Forest._from_sorted(self.conn, t, lv, x, y, k)

    def coarsen(self, flags) -> Forest:
        """Replace every family of 4 Morton siblings that are all leaves and all flagged by
        their parent; all other flags are ignored (level-0 leaves never coarsen).

        Parameters
        ----------
        flags : array_like of bool, shape (n,)

        Returns
        -------
        Forest
            The parent takes the place of its first child along the curve.
        """
        f = self._flags(flags, "coarsen")
        if self.n < 4:
            return self
        fam = family_starts(self.tree, self.level, self.x, self.y)
        m = self.n - 3
        fam[:m] &= f[:m] & f[1 : m + 1] & f[2 : m + 2] & f[3:]
        if not fam.any():
            return self
        starts = np.flatnonzero(fam)
        keep = np.ones(self.n, dtype=bool)
        for d in (1, 2, 3):
            keep[starts + d] = False
        level = self.level.copy()
        level[starts] -= 1  # the first child's corner is the parent's corner
        return Forest._from_sorted(
            self.conn, self.tree[keep], level[keep], self.x[keep], self.y[keep], self.keys[keep]
        )

    def balance(self) -> Forest:
        """Smallest refinement that is 2:1 balanced across faces and corners.

        Works across tree boundaries and periodic boundaries, refining only.  Each sweep
        locates, for the leaves changed by the previous sweep, the leaves touching them
        that are two or more levels coarser, and refines those once; sweeps repeat until
        none is found.  Every refinement is forced, so the result is the unique smallest
        balanced refinement.
        """
        if self._cache.get("balanced"):
            return self
        t, lv, x, y, k = self.tree, self.level, self.x, self.y, self.keys
        t2, lv2, x2, y2, k2 = _balance_arrays(self.conn, t, lv, x, y, k, np.arange(t.shape[0]))
        out = self if t2 is t else Forest._from_sorted(self.conn, t2, lv2, x2, y2, k2)
        out._cache["balanced"] = True
        return out

    def adapt(self, refine, coarsen, max_level: int | None = None):
        """A regrid's forest operations in one call: refine the leaves flagged in
        ``refine``, coarsen the families of leaves left as they were and all flagged in
        ``coarsen``, then 2:1 balance.

        Parameters
        ----------
        refine, coarsen : array_like of bool, shape (n,)
        max_level : int, optional
            As in :meth:`refine`.

        Returns
        -------
        forest : Forest
            ``self.refine(refine, max_level).coarsen(c).balance()`` where ``c`` is
            ``coarsen`` carried to the refined forest's leaves that were not refined
            (the same leaves, bit for bit).
        source : numpy.ndarray of int64, shape (forest.n,)
            For each new leaf, the leaf of ``self`` containing its lower-left corner
            (``self.locate_global(*forest.global_xy())``): the same leaf, its parent
            (refined) or the first of its four children (coarsened).

        Notes
        -----
        When ``self`` is known to be balanced (it came from :meth:`balance`, or
        :meth:`is_balanced` said so), the balance looks only where the forest changed:
        a violation needs a new leaf, either as its finer side or as a coarsened
        parent whose old neighbours, one level finer than its children, are found by
        twenty points around it.  Otherwise every leaf is checked, as :meth:`balance`
        does.  Host-side, serial, blocking.
        """
        old_balanced = bool(self._cache.get("balanced"))
        r = self._flags(refine, "adapt")
        c = self._flags(coarsen, "adapt")
        if max_level is not None:
            r &= self.level < int(max_level)
        if np.any(self.level[r] >= MAX_LEVEL - 1):
            raise ValueError(f"Forest.adapt: cannot refine leaves at level >= {MAX_LEVEL - 1}")
        conn = self.conn
        if r.any():
            t, lv, x, y, k, new, counts = _refine_arrays(self.tree, self.level, self.x,
                                                         self.y, self.keys, r)
            c = np.repeat(c, counts) & ~new
        else:
            t, lv, x, y, k = self.tree, self.level, self.x, self.y, self.keys
            new = np.zeros(self.n, dtype=bool)
        if c.any():  # as Forest.coarsen on the refined leaves
            t, lv, x, y, k, new, parents = kernels.coarsen_arrays(t, lv, x, y, k, new, c)
        else:
            parents = np.zeros(0, dtype=np.int64)
        if old_balanced:
            sel = [np.flatnonzero(new)]
            if len(parents):  # old leaves two levels finer than a coarsened parent
                gx, gy = _global_xy(conn, t[parents], x[parents], y[parents])
                h = quadrant_len(lv[parents])
                q = h >> 2
                pts = [(gx - 1, gy - 1), (gx + h, gy - 1), (gx - 1, gy + h), (gx + h, gy + h)]
                for s in range(4):
                    pts += [(gx - 1, gy + s * q), (gx + h, gy + s * q),
                            (gx + s * q, gy - 1), (gx + s * q, gy + h)]
                px = np.concatenate([p[0] for p in pts])
                py = np.concatenate([p[1] for p in pts])
                m = _locate_global(conn, k, px, py)
                bad = m >= 0
                bad[bad] = lv[m[bad]] >= np.tile(lv[parents], len(pts))[bad] + 2
                sel.append(m[bad])
            sel = np.unique(np.concatenate(sel))
        else:
            sel = np.arange(t.shape[0])
        t, lv, x, y, k = _balance_arrays(conn, t, lv, x, y, k, sel)
        out = Forest._from_sorted(conn, t, lv, x, y, k)
        if out == self:
            out = self
        out._cache["balanced"] = True
        source = kernels.locate_sorted(self.keys, out.keys)
        return out, source

    def is_balanced(self) -> bool:
        """Whether every two leaves touching across a face or a corner (also across tree
        and periodic boundaries) differ by at most one level."""
        if "balanced" not in self._cache:
            coarse, _ = _coarse_neighbors(
                self.conn, self.keys, self.tree, self.level, self.x, self.y, np.arange(self.n)
            )
            self._cache["balanced"] = coarse.size == 0
        return self._cache["balanced"]

    # -- partition ---------------------------------------------------------------------

    def partition(self, nparts: int, weights=None) -> np.ndarray:
        """Split the leaf sequence into ``nparts`` contiguous ranges of nearly equal weight.

        Parameters
        ----------
        nparts : int
            Positive number of parts.
        weights : array_like, shape (n,), optional
            Non-negative finite weights (default 1 per leaf).  If they sum to 0, the
            leaves are split by count.

        Returns
        -------
        numpy.ndarray of int64, shape (nparts + 1,)
            Offsets: part ``p`` owns leaves ``offsets[p]:offsets[p + 1]``.  With prefix
            sums ``S_i = w_0 + ... + w_i`` and total ``W``, leaf ``i`` goes to the first
            part ``p`` with ``S_i <= (p + 1) * W / nparts``; unit weights give
            ``offsets[p] = (p * n) // nparts`` like p4est.  Every part's weight lies
            within ``max(w)`` of ``W / nparts``.  Parts may be empty.
        """
        p = int(nparts)
        if p < 1:
            raise ValueError(f"Forest.partition: nparts must be positive, got {nparts}")
        n = self.n
        ks = np.arange(p + 1, dtype=np.int64)
        if weights is not None:
            w = np.asarray(weights)
            if w.shape != (n,):
                raise ValueError(f"Forest.partition: weights must have shape ({n},)")
            if not np.issubdtype(w.dtype, np.integer):
                w = w.astype(np.float64)
                if not np.all(np.isfinite(w)):
                    raise ValueError("Forest.partition: weights must be finite")
            else:
                w = w.astype(np.int64)
            if np.any(w < 0):
                raise ValueError("Forest.partition: weights must be non-negative")
            cum = np.cumsum(w)
            total = cum[-1] if n else 0
            if total > 0:
                off = np.searchsorted(cum * p, ks * total, side="right").astype(np.int64)
                off[0], off[-1] = 0, n
                return off
        return (ks * n) // p

    # -- neighbour tables --------------------------------------------------------------

    def face_neighbors(self) -> FaceNeighbors:
        """Face-neighbour table (see :class:`FaceNeighbors`), cached on the instance.

        Works across tree and periodic boundaries.  Kind 2 assumes 2:1 face balance.
        """
        if "face" in self._cache:
            return self._cache["face"]
        n = self.n
        gx, gy = self.global_xy()
        h = quadrant_len(self.level)
        hh = h >> 1
        kind = np.empty((n, 4), dtype=np.int8)
        index = np.empty((n, 4, 2), dtype=np.int64)
        for f, (dx, dy) in enumerate(_FACES):
            px, py = _outside(gx, dx, h), _outside(gy, dy, h)
            m1 = self.locate_global(px, py)
            m2 = self.locate_global(px + (dy != 0) * hh, py + (dx != 0) * hh)
            k = self._kind(m1)
            kind[:, f] = k
            index[:, f, 0] = m1
            index[:, f, 1] = np.where(k == 2, m2, m1)
        kind.flags.writeable = False
        index.flags.writeable = False
        out = FaceNeighbors(kind=kind, index=index)
        self._cache["face"] = out
        return out

    def _kind(self, m):
        """-1 for m < 0, else 0/1/2 for neighbour same/coarser/finer."""
        lm = self.level[np.maximum(m, 0)]
        k = np.where(lm == self.level, 0, np.where(lm < self.level, 1, 2))
        return np.where(m < 0, -1, k).astype(np.int8)

    def corner_neighbors(self) -> CornerNeighbors:
        """Corner-neighbour table (see :class:`CornerNeighbors`), cached on the instance.

        Works across tree and periodic boundaries.
        """
        if "corner" in self._cache:
            return self._cache["corner"]
        n = self.n
        gx, gy = self.global_xy()
        h = quadrant_len(self.level)
        c = self.conn
        wx, wy = c.nx * ROOT_LEN, c.ny * ROOT_LEN
        kind = np.empty((n, 4), dtype=np.int8)
        index = np.empty((n, 4), dtype=np.int64)
        fadj = np.zeros((n, 4), dtype=bool)
        for q, (dx, dy) in enumerate(_CORNERS):
            px, py = _outside(gx, dx, h), _outside(gy, dy, h)
            m = self.locate_global(px, py)
            k = self._kind(m)
            kind[:, q] = k
            index[:, q] = m
            # Box of the neighbour's periodic copy that contains the unwrapped point.
            sel = np.flatnonzero(k == 1)
            ms = m[sel]
            mgx, mgy = _global_xy(c, self.tree[ms], self.x[ms], self.y[ms])
            mh = quadrant_len(self.level[ms])
            px_s, py_s = px[sel], py[sel]
            mgx = mgx + (px_s - px_s % wx if c.periodic_x else 0)
            mgy = mgy + (py_s - py_s % wy if c.periodic_y else 0)
            qx, qy, qh = gx[sel], gy[sel], h[sel]
            over_x = (mgx + mh > qx) if dx < 0 else (mgx < qx + qh)
            over_y = (mgy + mh > qy) if dy < 0 else (mgy < qy + qh)
            fadj[sel, q] = over_x | over_y
        for a in (kind, index, fadj):
            a.flags.writeable = False
        out = CornerNeighbors(kind=kind, index=index, face_adjacent=fadj)
        self._cache["corner"] = out
        return out
