"""forestpy's codecs as a ``numcodecs`` codec, so zarr (and anything that reads the
numcodecs registry) stores and reads batches of patches with them.

The codec id is ``"forestpy"``; its one parameter is the specification string of
:func:`forestpy.io.codecs.get_codec`::

    import numcodecs, zarr
    codec = numcodecs.get_codec({"id": "forestpy", "spec": "dwt53:rtol=1e-6,zstd=3"})
    z = zarr.create(shape=q.shape, chunks=(1024,) + q.shape[1:], dtype="f8",
                    compressor=codec)        # zarr v2 API; v3: compressors=[...]
    z[:] = q

A chunk must be a 4-D ``[npatch, meqn, my, mx]`` block (the layout of ``sim.q``'s
interiors); the encoded chunk is the self-describing container of
:mod:`forestpy.io.codecs`, so it can also be decoded without zarr.  With forestpy
installed the codec is found through the ``numcodecs.codecs`` entry point group
(``pyproject.toml``); :func:`register` adds it by hand.
"""

from __future__ import annotations

import numpy as np

from . import decode, encode, get_codec

__all__ = ["ForestpyCodec", "register"]

try:
    from numcodecs.abc import Codec as _Base
except ImportError:  # numcodecs is optional: the class still exists, register() says why
    _Base = object


class ForestpyCodec(_Base):
    """numcodecs codec ``{"id": "forestpy", "spec": "<codec specification>"}``."""

    codec_id = "forestpy"

    def __init__(self, spec: str = "lossless"):
        get_codec(spec)  # check it now: a bad specification fails where it is given
        self.spec = spec

    def encode(self, buf):
        a = np.asarray(buf)
        if a.ndim != 4:
            raise ValueError(f"codec forestpy encodes [npatch, meqn, my, mx] chunks, got "
                             f"shape {a.shape}")
        return encode(np.ascontiguousarray(a), self.spec)

    def decode(self, buf, out=None):
        a = decode(bytes(memoryview(buf).cast("B")), name="zarr chunk")
        if out is not None:
            from numcodecs.compat import ndarray_copy

            return ndarray_copy(a, out)
        return a

    def get_config(self):
        return {"id": self.codec_id, "spec": self.spec}

    def __repr__(self):
        return f"ForestpyCodec(spec={self.spec!r})"


def register() -> None:
    """Add :class:`ForestpyCodec` to the numcodecs registry (needs numcodecs)."""
    import numcodecs

    numcodecs.register_codec(ForestpyCodec)
