"""Checkpoints: one ``.npz`` file holding everything a run needs to continue bitwise.

A checkpoint holds the forest (leaf arrays and brick parameters), the padded patch
arrays ``q``, ``aux`` and ``aux_setaux`` (on the host), the clock and counters (``t``,
``steps``, ``rejected_steps``, ``regrids``, ``cell_updates``, the next trial ``dt``,
``wall_s`` and the phase timers), ``totals_initial`` of the original run, the
Simulation's JSON-able options and the state of every callback that has a
``state_dict()`` method.  Arrays are stored as ``.npy`` members; everything else as
one JSON string (``allow_pickle=False`` throughout, so loading never runs code).

Write with :func:`write_checkpoint` (or ``sim.save_checkpoint(path)``): the file is
written under a temporary name in the destination folder and renamed into place, so
a crash never leaves half a checkpoint.  Read with :func:`read_checkpoint`, which
raises one :class:`CheckpointError` naming the file and the problem for a missing,
truncated, corrupt or foreign file; ``sim.load_checkpoint(path)`` (or
``sim.restore(read_checkpoint(path))``) replaces the state of a Simulation built by
the same setup, after which ``sim.run()`` continues exactly as the uninterrupted run.

Example::

    sim = setup(max_level=3)
    sim.run(max_steps=50)
    sim.save_checkpoint("out/ck.npz")
    ...
    sim = setup(max_level=3)                 # same demo, same options
    sim.load_checkpoint("out/ck.npz").run()  # continues to t_final
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from forestpy.forest import Brick, Forest
from forestpy.io.summary import open_atomic, to_jsonable

__all__ = ["CheckpointError", "write_checkpoint", "read_checkpoint", "FORMAT", "VERSION"]

FORMAT = "forestpy-checkpoint"
VERSION = 1

_REQUIRED = (
    "format",
    "version",
    "meta_json",
    "forest_tree",
    "forest_level",
    "forest_x",
    "forest_y",
    "q",
    "aux",
    "aux_setaux",
)
_META_KEYS = (
    "t",
    "steps",
    "rejected_steps",
    "regrids",
    "cell_updates",
    "dt",
    "totals_initial",
    "riemann",
    "num_eqn",
    "mx",
    "my",
    "mbc",
    "brick",
    "options",
    "callbacks",
)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or does not fit the Simulation."""


def _options_jsonable(options: dict) -> dict:
    """The options without callables and callback objects, as plain JSON types."""
    kept = {
        k: v
        for k, v in options.items()
        if k != "callbacks" and not callable(v)
    }
    return to_jsonable(kept)


def _callback_states(sim, arrays: dict) -> list:
    """``[{"index", "class", "state", "arrays"}]`` for every callback with
    ``state_dict()``; array values move into ``arrays`` under ``cb<i>_<name>``."""
    out = []
    for i, cb in enumerate(sim.callbacks):
        if not callable(getattr(cb, "state_dict", None)):
            continue
        state = cb.state_dict()
        plain, names = {}, []
        for key, value in state.items():
            if isinstance(value, np.ndarray):
                arrays[f"cb{i}_{key}"] = np.ascontiguousarray(value)
                names.append(key)
            else:
                plain[key] = value
        out.append(
            {"index": i, "class": type(cb).__name__, "state": plain, "arrays": names}
        )
    return out


def write_checkpoint(sim, path, meta: dict | None = None) -> Path:
    """Write the state of ``sim`` to ``path`` (one ``.npz`` file) atomically; return
    the path.  ``meta`` (JSON-able) is stored as is and returned by
    :func:`read_checkpoint` under ``"extra"``."""
    path = Path(path)
    be = sim.backend
    f = sim.forest
    arrays: dict = {
        "format": np.array(FORMAT),
        "version": np.array(VERSION, dtype=np.int64),
        "forest_tree": np.asarray(f.tree),
        "forest_level": np.asarray(f.level),
        "forest_x": np.asarray(f.x),
        "forest_y": np.asarray(f.y),
        "q": np.ascontiguousarray(be.to_host(sim.q)),
        "aux": np.ascontiguousarray(be.to_host(sim.aux)),
        "aux_setaux": np.ascontiguousarray(be.to_host(sim.aux_setaux)),
    }
    c = f.conn
    info = {
        "t": float(sim.t),
        "steps": int(sim.steps),
        "rejected_steps": int(sim.rejected_steps),
        "regrids": int(sim.regrids),
        "cell_updates": int(sim.cell_updates),
        "dt": None if sim.dt is None else float(sim.dt),
        # wall_s grows when run() returns; a checkpoint written during a run holds the
        # phase timers of this run already: at least their sum, so that a restarted
        # run's timer table never shows shares above 100 %
        "wall_s": max(float(sim.wall_s), float(sum(
            v for k, v in sim.timers.seconds.items() if "." not in k))),
        "timers": {k: float(v) for k, v in sim.timers.seconds.items()},
        "totals_initial": {k: float(v) for k, v in sim.totals_initial.items()},
        "riemann": sim.riemann.name,
        "num_eqn": int(sim.riemann.num_eqn),
        "field_names": list(sim.riemann.field_names),
        "mx": int(sim.mx),
        "my": int(sim.my),
        "mbc": int(sim.mbc),
        "dtype": str(np.dtype(sim.dtype).name),
        "backend": sim.backend.name,
        "name": sim.name,
        "brick": {
            "nx": c.nx,
            "ny": c.ny,
            "periodic_x": c.periodic_x,
            "periodic_y": c.periodic_y,
            "lower": list(c.lower),
            "upper": list(c.upper),
        },
        "options": _options_jsonable(sim.options),
        "callbacks": _callback_states(sim, arrays),
        "extra": to_jsonable(meta) if meta is not None else None,
    }
    # float repr round-trips exactly through JSON; inf/nan are written as Infinity/NaN
    arrays["meta_json"] = np.array(json.dumps(info))

    with open_atomic(path, binary=True) as fh:
        np.savez(fh, **arrays)
    return path


def read_checkpoint(path) -> dict:
    """Read a checkpoint written by :func:`write_checkpoint`.

    Returns a dict with ``"path"``, ``"version"``, ``"forest"`` (a :class:`Forest`),
    ``"q"``, ``"aux"``, ``"aux_setaux"`` (host arrays), the scalars and dicts of
    :func:`write_checkpoint` (``"t"``, ``"steps"``, ..., ``"options"``), and
    ``"callbacks"``: a list of ``{"index", "class", "state"}`` with the arrays merged
    back into each state.

    Raises
    ------
    CheckpointError
        Missing file, not an npz archive (truncated or corrupt), missing members,
        another format or version, or inconsistent contents.
    """
    path = Path(path)

    def err(problem: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {path}: {problem}")

    if not path.exists():
        raise err("no such file")
    if not path.is_file():
        raise err("not a file")
    raw: dict = {}
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise err("not an npz archive (a bare .npy array)")
        with loaded as npz:
            missing = [k for k in _REQUIRED if k not in npz.files]
            if missing:
                raise err(f"missing member(s) {missing}: not a forestpy checkpoint")
            for key in npz.files:
                raw[key] = npz[key]  # reads (and CRC-checks) every member now
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile/zlib/pickle/OS/EOF/value errors alike
        raise err(
            f"cannot be read, truncated or corrupt ({type(e).__name__}: {e})"
        ) from e

    if raw["format"].shape != () or str(raw["format"]) != FORMAT:
        raise err(f"not a forestpy checkpoint (format {raw['format']!s:.40})")
    try:
        version = int(raw["version"])
    except (TypeError, ValueError) as e:
        raise err(f"bad version member ({e})") from e
    if version != VERSION:
        raise err(f"format version {version}, this forestpy reads version {VERSION}")
    try:
        info = json.loads(str(raw["meta_json"]))
    except (TypeError, ValueError) as e:
        raise err(f"corrupt metadata ({e})") from e
    if not isinstance(info, dict):
        raise err("corrupt metadata (not a JSON object)")
    missing = [k for k in _META_KEYS if k not in info]
    if missing:
        raise err(f"metadata lacks {missing}")

    try:
        b = info["brick"]
        brick = Brick(
            nx=b["nx"],
            ny=b["ny"],
            periodic_x=b["periodic_x"],
            periodic_y=b["periodic_y"],
            lower=tuple(b["lower"]),
            upper=tuple(b["upper"]),
        )
        forest = Forest(
            brick, raw["forest_tree"], raw["forest_level"], raw["forest_x"], raw["forest_y"]
        )
    except (KeyError, TypeError, ValueError) as e:
        raise err(f"invalid forest ({e})") from e

    q, aux, aux_setaux = raw["q"], raw["aux"], raw["aux_setaux"]
    mx, my, mbc, meqn = info["mx"], info["my"], info["mbc"], info["num_eqn"]
    shape = (forest.n, meqn, my + 2 * mbc, mx + 2 * mbc)
    if q.shape != shape:
        raise err(f"q has shape {q.shape}, expected {shape} from the forest and patch size")
    for name, a in (("aux", aux), ("aux_setaux", aux_setaux)):
        if a.ndim != 4 or a.shape[0] != forest.n or a.shape[2:] != shape[2:]:
            raise err(f"{name} has shape {a.shape}, inconsistent with q {q.shape}")

    callbacks = []
    for entry in info["callbacks"]:
        state = dict(entry.get("state", {}))
        for key in entry.get("arrays", []):
            member = f"cb{entry['index']}_{key}"
            if member not in raw:
                raise err(f"missing member {member!r} (state of callback {entry['class']})")
            state[key] = raw[member]
        callbacks.append({"index": entry["index"], "class": entry["class"], "state": state})

    out = {k: v for k, v in info.items() if k != "callbacks"}
    out.update(
        path=str(path),
        version=version,
        forest=forest,
        q=q,
        aux=aux,
        aux_setaux=aux_setaux,
        callbacks=callbacks,
    )
    return out
