"""Checkpoint and restart of the two-layer solver on triangles, bitwise.

A checkpoint is an ``.npz`` (no pickles) with the global state ``W`` (``6 x cells``, the
solver's precision), the time, the step count, the parameters (scheme, precision, g,
r, gamma, h_min) and a fingerprint of the mesh (SHA-256 of its nodes and triangles),
written atomically.  A distributed run gathers its state to rank 0, which writes; a
restart reads the global state and each rank keeps its cells, so a run restarted on
another number of ranks continues bitwise as the uninterrupted one would (the step is
independent of the partition, :mod:`~forestpy.solvers.tworoe.distributed`).

:func:`read_checkpoint` checks the file before using it and raises
:class:`~forestpy.errors.InputFileError` naming the file for anything missing, of the
wrong shape or type, or for another mesh.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

from forestpy.errors import InputFileError
from forestpy.io.checkpoint import text_member
from forestpy.io.summary import atomic_path

__all__ = ["mesh_fingerprint", "read_checkpoint", "write_checkpoint"]

_KEYS = ("W", "H", "mass0", "t", "steps", "scheme", "dtype", "g", "r", "gamma", "h_min",
         "mesh", "cells", "format")
FORMAT = "forestpy.tworoe.checkpoint/1"


def mesh_fingerprint(mesh) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(mesh.nodes, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(mesh.tris, dtype=np.int64).tobytes())
    return h.hexdigest()


def write_checkpoint(path, solver, W=None, H=None) -> Path:
    """Write ``solver``'s state (or the global ``W`` and ``H`` given) to ``path``."""
    W = solver.W if W is None else W
    H = solver.H if H is None else H
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, W=np.ascontiguousarray(W), H=np.ascontiguousarray(H),
                 mass0=np.asarray(solver.mass0, dtype=np.float64), t=np.float64(solver.t),
                 steps=np.int64(solver.steps), scheme=np.str_(solver.scheme),
                 dtype=np.str_(np.dtype(solver.dtype).name), g=np.float64(solver.g),
                 r=np.float64(solver.r), gamma=np.float64(solver.gamma),
                 h_min=np.float64(solver.h_min), mesh=np.str_(mesh_fingerprint(solver.mesh)),
                 cells=np.int64(solver.mesh.num_cells), format=np.str_(FORMAT))
    return path


def read_checkpoint(path, mesh) -> dict:
    """The checkpoint's contents as a dict, checked against ``mesh``."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{path}: no such checkpoint")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in _KEYS if k not in z.files]
            if missing:
                raise InputFileError(f"{path}: not a two-layer checkpoint (missing "
                                     f"{missing})")
            if text_member(z["format"]) != FORMAT:
                raise InputFileError(f"{path}: format {text_member(z['format'])!r}, expected "
                                     f"{FORMAT!r}")
            cells = int(z["cells"])
            if cells != mesh.num_cells:
                raise InputFileError(f"{path}: written for {cells} cells, the mesh has "
                                     f"{mesh.num_cells}")
            if text_member(z["mesh"]) != mesh_fingerprint(mesh):
                raise InputFileError(f"{path}: written for another mesh (fingerprint "
                                     f"differs)")
            dtype = text_member(z["dtype"])
            if dtype not in ("float64", "float32"):
                raise InputFileError(f"{path}: precision {dtype!r}")
            W, H, m0 = z["W"], z["H"], z["mass0"]
            if W.shape != (6, cells) or W.dtype != np.dtype(dtype):
                raise InputFileError(f"{path}: state of shape {W.shape} and type "
                                     f"{W.dtype}, expected (6, {cells}) {dtype}")
            if H.shape != (cells,) or H.dtype != np.dtype(dtype) or m0.shape != (2,):
                raise InputFileError(f"{path}: bottom of shape {H.shape} and type "
                                     f"{H.dtype} or volumes of shape {m0.shape}")
            out = {k: text_member(z[k]) if z[k].dtype.kind == "U" else z[k][()]
                   for k in _KEYS if k not in ("W", "H", "mass0")}
            out.update(W=W, H=H, mass0=(float(m0[0]), float(m0[1])))
    except InputFileError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
        raise InputFileError(f"{path}: not a readable checkpoint ({type(e).__name__}: "
                             f"{e})") from None
    out["scheme"] = str(out["scheme"])
    out["dtype"] = str(out["dtype"])
    return out
