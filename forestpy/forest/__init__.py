"""The quadtree forest: connectivity, quadrant algebra, and the vectorised Forest.

Public API: :class:`Brick` (connectivity), :class:`Forest` (leaves as sorted arrays),
``MAX_LEVEL`` (finest level; coordinates are integers in ``[0, 2**MAX_LEVEL)``), and the
neighbour-table records :class:`FaceNeighbors`, :class:`CornerNeighbors`.  Array-level
quadrant algebra lives in :mod:`forestpy.forest.quadrants`.
"""

from .connectivity import Brick
from .forest import CornerNeighbors, FaceNeighbors, Forest
from .quadrants import MAX_LEVEL

__all__ = ["Brick", "Forest", "MAX_LEVEL", "FaceNeighbors", "CornerNeighbors"]
