"""JSON output of runs: conversion to plain JSON types and atomic writes.

``summary.json`` and ``options_used.json`` are written with :func:`write_json_atomic`:
the text goes to a temporary file in the destination folder which then replaces the
destination in one ``os.replace``, so a crash never leaves half a file behind.
:func:`open_atomic` (a file object) and :func:`atomic_path` (a file name) are that
write for any writer: checkpoints, VTK point files, gauge files.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["to_jsonable", "atomic_path", "open_atomic", "write_json_atomic", "write_text_atomic",
           "read_json"]


def to_jsonable(obj):
    """Return ``obj`` as plain JSON types (dict with str keys, list, str, int, float,
    bool, None).

    NumPy scalars become Python scalars and arrays nested lists; tuples and sets become
    lists; dict keys become strings; dataclass instances become dicts; paths become
    strings; non-finite floats become the strings ``"inf"``, ``"-inf"``, ``"nan"`` (so
    the output is strict JSON); anything else (callables included) becomes its
    ``repr``.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, np.bool_):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else repr(v)
    if isinstance(obj, (complex, np.complexfloating)):
        return repr(complex(obj))
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        items = [to_jsonable(v) for v in obj]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        try:
            return to_jsonable(dataclasses.asdict(obj))
        except Exception:  # noqa: BLE001 - fall back to repr for odd dataclasses
            return repr(obj)
    return repr(obj)


def _umask() -> int:
    """The process's umask (read without changing it where the system allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and put back at once
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path):
    """``with atomic_path(path) as tmp:`` -- write the file named ``tmp``; when the block
    ends it replaces ``path`` atomically (for writers that take a file name).

    The parent folder is created when missing; ``tmp`` is a new empty file in the same
    folder with the mode an ordinary new file gets (``0666`` less the process's umask;
    ``mkstemp`` alone would make it ``0600``).  When the block ends, ``os.replace``
    moves it onto ``path``, so readers see either the old file or the complete new one;
    if the block raises, ``tmp`` is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: as open() would
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@contextmanager
def open_atomic(path, binary: bool = False):
    """``with open_atomic(path) as f:`` -- a file object (UTF-8 text, or ``binary``)
    that replaces ``path`` atomically when the block ends, after it is flushed to disk
    (:func:`atomic_path`)."""
    mode = {"mode": "wb"} if binary else {"mode": "w", "encoding": "utf-8", "newline": ""}
    with atomic_path(path) as tmp, open(tmp, **mode) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`open_atomic`); return the path."""
    with open_atomic(path) as f:
        f.write(text)
    return Path(path)


def write_json_atomic(path, obj, indent: int = 2) -> Path:
    """Write ``to_jsonable(obj)`` as strict JSON to ``path`` atomically (see
    :func:`write_text_atomic`); return the path."""
    text = json.dumps(to_jsonable(obj), indent=indent, allow_nan=False) + "\n"
    return write_text_atomic(path, text)


def read_json(path) -> dict:
    """Read a JSON file written by :func:`write_json_atomic`."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)
