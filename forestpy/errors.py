"""The error of an input file that cannot be read.

Every reader of forestpy and of its plugins (checkpoints, rasters, deformation files,
gauge files, ParaView collections) raises :class:`InputFileError`, or a subclass of
it, for a missing, truncated, corrupt, hostile or foreign file: one message naming
the file and what is wrong, raised before anything large is allocated.  It is a
``ValueError``, so callers that caught that still do; ``forestpy run`` reports it as
one line with exit code 2 and writes nothing.
"""

from __future__ import annotations

__all__ = ["InputFileError", "MAX_ARRAY_BYTES"]

#: the largest array a reader allocates from what a file says (16 GiB); a count or
#: size beyond it, or beyond what the file's length can hold, is refused first
MAX_ARRAY_BYTES = 16 << 30


class InputFileError(ValueError):
    """An input file that cannot be read: the message names the file and the problem."""
