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
truncated, corrupt, hostile or foreign file (every member's size and ``.npy`` header is
checked against the archive before its array is allocated, every metadata value by
type and range); ``sim.load_checkpoint(path)`` (or
``sim.restore(read_checkpoint(path))``) replaces the state of a Simulation built by
the same setup, after which ``sim.run()`` continues exactly as the uninterrupted run.

**Compressed checkpoints** (``codec=``, ``forestpy run --checkpoint-codec``): with a
codec of :mod:`forestpy.io.codecs` other than ``none``, ``aux`` and ``aux_setaux`` are
stored through ``lossless`` (members ``aux_codec``, ``aux_setaux_codec``) and ``q``
through the codec (member ``q_codec``; the codec's container, uint8).  ``lossless``
stores the whole padded ``q`` and restarts bit for bit.  A lossy codec (``dwt53``,
``fp16``, ``zfpy``, ``sz3``) stores the patch interiors only (ghost cells are refilled
by the next step; they are set to the nearest interior cell meanwhile); for a depth
over a bottom (``riemann.surface_interp = (i, j)``) it encodes the surface ``q[i] +
aux[j]`` instead of the depth, so that a lake at rest stays at rest, and decodes the
depth as ``max(surface - aux[j], 0)``.  With ``dwt53`` the depth of every patch whose
shallowest cell is not deeper than the surface's bound is stored exactly (shorelines,
dry land), so no other depth can be clipped: each patch field keeps its total (depth:
its volume) to round-off and its error stays within the codec's bound
(``tol``/``rtol``); the restart continues from data within that bound, not bit for
bit.  The other lossy codecs clip.  The codec is named in the metadata (``"codec"``).

**Per-rank checkpoints** (a distributed run, :func:`write_rank_checkpoint`): each rank
writes its own patches to ``<stem>.ranks/<token>.r<rank>.npz`` and rank 0 then writes
``path``, the index (the metadata above, no patch data, plus each rank file's range,
size and CRC-32), atomically and last.  :func:`read_checkpoint` reads either form; a
restore on any number of ranks reads only the rank files holding its patches
(:class:`RankFiles`).  See docs/mpi.md, "Per-rank checkpoints".

Example::

    sim = setup(max_level=3)
    sim.run(max_steps=50)
    sim.save_checkpoint("out/ck.npz")
    ...
    sim = setup(max_level=3)                 # same demo, same options
    sim.load_checkpoint("out/ck.npz").run()  # continues to t_final
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import re
import secrets
import zipfile
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from numpy.lib import format as npformat

from forestpy.errors import MAX_ARRAY_BYTES, InputFileError
from forestpy.forest import Brick, Forest
from forestpy.io.summary import open_atomic, to_jsonable

__all__ = [
    "CheckpointError",
    "write_checkpoint",
    "write_rank_checkpoint",
    "read_checkpoint",
    "remove_checkpoint",
    "rank_folder",
    "RankFiles",
    "FORMAT",
    "VERSION",
]

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


class CheckpointError(InputFileError):
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


def _codec_spec(codec) -> str | None:
    """The codec specification string, or None for no codec (``None`` or ``"none"``)."""
    if codec is None:
        return None
    from forestpy.io.codecs import get_codec, parse_spec

    name = parse_spec(codec)[0] if isinstance(codec, str) else codec.name
    if name == "none":
        return None
    get_codec(codec)  # unknown names and bad parameters raise here, before any work
    return codec if isinstance(codec, str) else name


def _encode_state(sim, arrays: dict, spec: str) -> dict:
    """``q`` (and ``aux``, ``aux_setaux``) of ``sim`` encoded into ``arrays``; returns the
    metadata that :func:`_decode_state` needs.  A device ``q`` is encoded on the device
    where the codec can (``dwt53``): only the compressed bytes cross to the host."""
    from forestpy.io.codecs import encode, parse_spec

    be = sim.backend
    lossless = parse_spec(spec)[0] == "lossless"
    for name in ("aux", "aux_setaux"):
        a = np.ascontiguousarray(be.to_host(getattr(sim, name)))
        arrays[f"{name}_codec"] = np.frombuffer(encode(a, "lossless"), np.uint8)
    info = {"spec": spec, "padded": lossless, "surface": None}
    if lossless:
        q = np.ascontiguousarray(be.to_host(sim.q))
        raw = None
    else:
        b = sim.mbc
        xp = be.xp
        q = xp.ascontiguousarray(sim.q[:, :, b:sim.q.shape[2] - b, b:sim.q.shape[3] - b])
        surf = getattr(sim.riemann, "surface_interp", None)
        raw = None
        if surf is not None:
            i, j = surf
            depth = q[:, i].copy()
            q = q.copy()
            q[:, i] += sim.aux[:, j, b:sim.q.shape[2] - b, b:sim.q.shape[3] - b]
            info["surface"] = [int(i), int(j)]
            raw = _shore_patches(depth, q, i, spec, be)
        if not isinstance(q, np.ndarray) and parse_spec(spec)[0] != "dwt53":
            q = be.to_host(q)
    arrays["q_codec"] = np.frombuffer(encode(q, spec, raw=raw), np.uint8)
    return info


def _shore_patches(depth, q, i, spec: str, be):
    """``raw[npatch, meqn]``: for ``dwt53``, the depth field ``i`` of every patch whose
    shallowest cell is not deeper than the surface's error bound is stored exactly, so
    that no decoded depth can fall below 0 elsewhere and each patch's volume is kept;
    None for the other codecs (their decoded depths are clipped at 0)."""
    from forestpy.io.codecs import get_codec

    codec = get_codec(spec)
    if codec.name != "dwt53":
        return None
    nlev, tol, _ = codec.plan(q)
    bound = tol[i] if tol[i] >= 0 else codec.tau * 2.0 ** nlev  # tau alone: no bound
    shallow = np.asarray(be.to_host(depth.min(axis=(1, 2)))) <= bound
    raw = np.zeros((q.shape[0], q.shape[1]), bool)
    raw[:, i] = shallow
    return raw


def _forest_members(f) -> dict:
    """The format, version and forest members of a checkpoint (or of its index)."""
    return {
        "format": np.array(FORMAT),
        "version": np.array(VERSION, dtype=np.int64),
        "forest_tree": np.asarray(f.tree),
        "forest_level": np.asarray(f.level),
        "forest_x": np.asarray(f.x),
        "forest_y": np.asarray(f.y),
    }


def _run_info(sim, arrays: dict, meta) -> dict:
    """The metadata of a checkpoint (clock, counters, timers, options, callbacks' state;
    callback arrays go into ``arrays``), without ``"codec"``."""
    f = sim.forest
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
        # subcycling: each level's steps and its steps since its last regrid (the cadence)
        "subcycle": None if getattr(sim, "_subcycler", None) is None else {
            name: {str(k): int(v) for k, v in getattr(sim._subcycler, name).items()}
            for name in ("level_steps", "since_regrid")},
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
    return info


def write_checkpoint(sim, path, meta: dict | None = None, codec=None) -> Path:
    """Write the state of ``sim`` to ``path`` (one ``.npz`` file) atomically; return
    the path.  ``meta`` (JSON-able) is stored as is and returned by
    :func:`read_checkpoint` under ``"extra"``.  ``codec`` (a specification of
    :mod:`forestpy.io.codecs`, e.g. ``"lossless"`` or ``"dwt53:rtol=1e-6"``) compresses
    the patch data (see the module docstring)."""
    path = Path(path)
    be = sim.backend
    spec = _codec_spec(codec)
    arrays = _forest_members(sim.forest)
    if spec is None:
        arrays["q"] = np.ascontiguousarray(be.to_host(sim.q))
        arrays["aux"] = np.ascontiguousarray(be.to_host(sim.aux))
        arrays["aux_setaux"] = np.ascontiguousarray(be.to_host(sim.aux_setaux))
        codec_info = None
    else:
        codec_info = _encode_state(sim, arrays, spec)
    info = _run_info(sim, arrays, meta)
    info["codec"] = codec_info
    # float repr round-trips exactly through JSON; inf/nan are written as Infinity/NaN
    arrays["meta_json"] = np.array(json.dumps(info))

    with open_atomic(path, binary=True) as fh:
        np.savez(fh, **arrays)
    return path


def read_checkpoint(path, patches: bool = True) -> dict:
    """Read a checkpoint written by :func:`write_checkpoint` or, its index,
    :func:`write_rank_checkpoint`.

    Returns a dict with ``"path"``, ``"version"``, ``"forest"`` (a :class:`Forest`),
    ``"q"``, ``"aux"``, ``"aux_setaux"`` (host arrays), the scalars and dicts of
    :func:`write_checkpoint` (``"t"``, ``"steps"``, ..., ``"options"``), and
    ``"callbacks"``: a list of ``{"index", "class", "state"}`` with the arrays merged
    back into each state.

    Nothing the file says is trusted: every member's size, array header and dtype is
    checked against the archive before its array is allocated (:func:`_read_members`),
    and every metadata value against its type and range (:func:`_check_meta`).

    A per-rank checkpoint (its index) also returns ``"rank_files"``, a
    :class:`RankFiles`; with ``patches`` (the default) every rank file is read and
    ``"q"``, ``"aux"``, ``"aux_setaux"`` hold every patch, as for a single file;
    with ``patches=False`` they are None and :meth:`forestpy.Simulation.restore` reads
    only the rows its rank needs.  ``patches`` is ignored for a single file.

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
    raw = _read_members(path, err)
    if "q_codec" in raw:
        for name in ("q", "aux", "aux_setaux"):
            if f"{name}_codec" in raw and name not in raw:
                raw[name] = None  # decoded below, once the metadata are checked
    ranks = not any(k in raw for k in ("q", "aux", "aux_setaux"))
    required = [k for k in _REQUIRED if not (ranks and k in ("q", "aux", "aux_setaux"))]
    missing = [k for k in required if k not in raw]
    if missing:
        raise err(f"missing member(s) {missing}: not a forestpy checkpoint")

    fmt = raw["format"]
    if fmt.shape != () or fmt.dtype.kind != "U" or str(fmt) != FORMAT:
        raise err(f"not a forestpy checkpoint (format {fmt!s:.40})")
    vmember = raw["version"]
    if vmember.shape != () or vmember.dtype.kind not in "iu":
        raise err(f"bad version member (a {vmember.dtype} array of shape {vmember.shape})")
    version = int(vmember)
    if version != VERSION:
        raise err(f"format version {version}, this forestpy reads version {VERSION}")
    mj = raw["meta_json"]
    if mj.shape != () or mj.dtype.kind != "U":
        raise err(f"corrupt metadata (a {mj.dtype} array of shape {mj.shape})")
    try:
        info = json.loads(text_member(mj))
    except (TypeError, ValueError, RecursionError) as e:
        raise err(f"corrupt metadata ({type(e).__name__}: {e})") from None
    if not isinstance(info, dict):
        raise err("corrupt metadata (not a JSON object)")
    missing = [k for k in _META_KEYS if k not in info]
    if missing:
        raise err(f"metadata lacks {missing}")
    _check_meta(info, err)
    if ranks and info.get("layout") != "ranks":
        raise err("missing member(s) ['q', 'aux', 'aux_setaux']: not a forestpy checkpoint")

    leaves = [raw[k] for k in ("forest_tree", "forest_level", "forest_x", "forest_y")]
    if any(a.ndim != 1 or a.dtype.kind not in "iu" for a in leaves):
        raise err("invalid forest (leaf arrays must be 1-D integer arrays)")
    b = info["brick"]
    if b["nx"] * b["ny"] > leaves[0].size:  # every tree holds at least one leaf
        raise err(f"invalid forest ({b['nx']}x{b['ny']} trees, {leaves[0].size} leaves)")
    try:
        brick = Brick(nx=b["nx"], ny=b["ny"], periodic_x=b["periodic_x"],
                      periodic_y=b["periodic_y"], lower=tuple(b["lower"]),
                      upper=tuple(b["upper"]))
        forest = Forest(brick, *leaves)
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise err(f"invalid forest ({e})") from None
    if not forest.is_balanced():
        raise err("invalid forest (not 2:1 balanced)")

    mx, my, mbc, meqn = info["mx"], info["my"], info["mbc"], info["num_eqn"]
    shape = (forest.n, meqn, my + 2 * mbc, mx + 2 * mbc)
    reader = None
    if ranks:
        naux = info.get("num_aux")
        if not (_is_int(naux) and 0 <= naux <= 1024):
            raise err(f"metadata num_aux={naux!r:.40} is not an integer in [0, 1024]")
        reader = RankFiles(path, _rank_entries(info, forest.n, err), forest,
                           info["token"], shape, naux, info.get("codec"))
        if patches:
            raw["q"], raw["aux"], raw["aux_setaux"] = reader.rows(np.arange(forest.n))
    elif raw["q"] is None:
        _decode_state(raw, info.get("codec"), shape, err)
    q, aux, aux_setaux = (raw.get(k) for k in ("q", "aux", "aux_setaux"))
    if q is not None:
        _check_patch_arrays(q, aux, aux_setaux, shape, err)

    callbacks = []
    for entry in info["callbacks"]:
        state = dict(entry["state"])
        for key in entry["arrays"]:
            member = f"cb{entry['index']}_{key}"
            if member not in raw:
                raise err(f"missing member {member!r} (state of callback {entry['class']})")
            state[key] = raw[member]
        callbacks.append({"index": entry["index"], "class": entry["class"], "state": state})

    out = {k: v for k, v in info.items() if k not in ("callbacks", "rank_files")}
    out.update(
        path=str(path),
        version=version,
        forest=forest,
        q=q,
        aux=aux,
        aux_setaux=aux_setaux,
        callbacks=callbacks,
        rank_files=reader,
    )
    return out


def _check_patch_arrays(q, aux, aux_setaux, shape, err) -> None:
    for name, a in (("q", q), ("aux", aux), ("aux_setaux", aux_setaux)):
        if a.dtype.kind != "f":
            raise err(f"{name} holds {a.dtype} values, not floating point")
    if q.shape != shape:
        raise err(f"q has shape {q.shape}, expected {shape} from the forest and patch size")
    for name, a in (("aux", aux), ("aux_setaux", aux_setaux)):
        if a.ndim != 4 or a.shape[0] != shape[0] or a.shape[2:] != shape[2:]:
            raise err(f"{name} has shape {a.shape}, inconsistent with q {q.shape}")


def _decode_state(raw: dict, cinfo, shape: tuple, err) -> None:
    """Decode the ``*_codec`` members of a compressed checkpoint into ``raw``."""
    from forestpy.io.codecs import CodecError, decode

    ok = (isinstance(cinfo, dict) and isinstance(cinfo.get("padded"), bool)
          and (cinfo.get("surface") is None
               or (isinstance(cinfo["surface"], list) and len(cinfo["surface"]) == 2
                   and all(isinstance(v, int) and 0 <= v < 1024 for v in cinfo["surface"]))))
    if not ok:
        raise err("metadata codec is not {spec, padded, surface}")
    for name in ("q", "aux", "aux_setaux"):
        member = raw.get(f"{name}_codec")
        if member is None or member.dtype != np.uint8 or member.ndim != 1:
            raise err(f"member {name}_codec is missing or not a byte array")
        try:
            raw[name] = decode(member, name=f"member {name}_codec")
        except CodecError as e:
            raise err(str(e)) from None
    q, aux = raw["q"], raw["aux"]
    if cinfo["padded"]:
        return
    npatch, meqn, ny, nx = shape
    mbc = (ny - q.shape[2]) // 2 if q.ndim == 4 else -1
    if (q.shape[:2] != (npatch, meqn) or mbc < 0 or q.shape[2] + 2 * mbc != ny
            or q.shape[3] + 2 * mbc != nx or aux.ndim != 4 or aux.shape[2:] != (ny, nx)):
        raise err(f"q_codec decodes to shape {q.shape}, not the interiors of {shape}")
    if cinfo["surface"] is not None:
        i, j = cinfo["surface"]
        if i >= meqn or j >= aux.shape[1]:
            raise err(f"metadata codec surface {cinfo['surface']} outside the fields")
        bottom = aux[:, j, mbc:ny - mbc, mbc:nx - mbc]
        q[:, i] = np.maximum(q[:, i] - bottom, 0.0)
    # ghost cells: the nearest interior cell (the next step fills them)
    raw["q"] = np.pad(q, ((0, 0), (0, 0), (mbc, mbc), (mbc, mbc)), mode="edge")


#: members per archive and bytes of one ``.npy`` header that a reader accepts
_MAX_MEMBERS = 4096
_MAX_HEADER = 4096
#: deflate expands at most 1032-fold: a member claiming more is refused unread
_DEFLATE_RATIO = 1032
_KINDS = "biufcUS"  # no object, void or datetime arrays


def _read_members(path: Path, err) -> dict:
    """Every ``.npy`` member of the archive ``path`` as an array, each checked before it
    is allocated: stored or deflated, its uncompressed size within the archive's length
    (times deflate's largest ratio) and :data:`~forestpy.errors.MAX_ARRAY_BYTES`, its
    header parsed with a size limit, its dtype plain, and shape times item size equal
    to the bytes the member holds.  The CRC of every member is checked on reading."""
    size = path.stat().st_size
    out: dict = {}
    try:
        if not zipfile.is_zipfile(path):
            with open(path, "rb") as f:
                head = f.read(6)
            if head == b"\x93NUMPY":
                raise err("not an npz archive (a bare .npy array)")
            raise err("cannot be read, truncated or corrupt (not a zip archive)")
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if len(infos) > _MAX_MEMBERS:
                raise err(f"{len(infos)} members, more than {_MAX_MEMBERS}")
            for info in infos:
                out.update(_read_member(zf, info, size, err))
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile/zlib/OS/EOF/header errors alike
        raise err(f"cannot be read, truncated or corrupt ({type(e).__name__}: {e})") from None
    return out


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, err) -> dict:
    name = info.filename
    if not name.endswith(".npy") or len(name) > 200:
        raise err(f"member {name[:60]!r} is not a .npy array")
    if info.compress_type == zipfile.ZIP_STORED:
        limit = info.compress_size
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        limit = _DEFLATE_RATIO * info.compress_size + 64
    else:
        raise err(f"member {name!r}: compression method {info.compress_type} not supported")
    if info.compress_size > size or info.file_size > min(limit, MAX_ARRAY_BYTES):
        raise err(f"member {name!r} claims {info.file_size} bytes, more than the archive "
                  f"of {size} bytes can hold")
    with zf.open(info) as fp:
        major, _ = npformat.read_magic(fp)
        if major == 1:
            shape, fortran, dtype = npformat.read_array_header_1_0(fp, _MAX_HEADER)
        elif major in (2, 3):
            shape, fortran, dtype = npformat.read_array_header_2_0(fp, _MAX_HEADER)
        else:
            raise err(f"member {name!r}: .npy format version {major}")
        if (dtype.hasobject or dtype.kind not in _KINDS or dtype.fields is not None
                or dtype.itemsize == 0):
            raise err(f"member {name!r}: dtype {dtype} is not a plain array type")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes != info.file_size - fp.tell():
            raise err(f"member {name!r}: shape {shape} of {dtype} needs {nbytes} bytes, "
                      f"the member holds {info.file_size - fp.tell()}")
        arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        view = memoryview(arr.reshape(-1, order="A").view(np.uint8))
        done = 0
        while done < nbytes:
            got = fp.readinto(view[done:])
            if not got:
                raise err(f"member {name!r} ends after {done} of {nbytes} bytes")
            done += got
        if fp.read(1):  # also makes zipfile check the CRC at the member's end
            raise err(f"member {name!r} holds more than its header says")
    # in C order whatever the file's: a Fortran-ordered state would make every kernel
    # that takes it compile again for that layout
    return {name[:-4]: arr if arr.flags.c_contiguous else arr.copy(order="C")}


def text_member(member: np.ndarray) -> str:
    """``str()`` of an npz member; ``ValueError`` where a damaged unicode member holds code
    points beyond U+10FFFF, which ``str()`` of the array would turn into a SystemError."""
    if member.dtype.kind != "U":
        return str(member)
    codes = np.frombuffer(member.tobytes(), dtype=member.dtype.byteorder.replace("|", "=") + "u4")
    if codes.size and int(codes.max()) > 0x10FFFF:
        raise ValueError(f"code point {int(codes.max()):#x} is not Unicode")
    return str(member)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _check_meta(info: dict, err) -> None:
    """Raise ``err`` unless every metadata value has the type and range that
    :func:`write_checkpoint` gives it (JSON admits NaN, strings, null anywhere)."""

    def need(ok: bool, key: str, what: str):
        if not ok:
            raise err(f"metadata {key}={info.get(key)!r:.60} is not {what}")

    need(_is_real(info["t"]) and math.isfinite(info["t"]), "t", "a finite number")
    for key in ("steps", "rejected_steps", "regrids", "cell_updates"):
        need(_is_int(info[key]) and info[key] >= 0, key, "an integer >= 0")
    dt = info["dt"]
    need(dt is None or (_is_real(dt) and 0 < dt < math.inf), "dt", "null or a number > 0")
    if "wall_s" in info:
        w = info["wall_s"]
        need(_is_real(w) and 0 <= w < math.inf, "wall_s", "a number >= 0")
    for key in ("timers", "totals_initial"):
        d = info.get(key, {})
        need(isinstance(d, dict) and all(_is_real(v) for v in d.values()), key,
             "an object of numbers")
    sub = info.get("subcycle")
    ok = sub is None or (isinstance(sub, dict) and all(
        isinstance(sub.get(name, {}), dict)
        and all(isinstance(k, str) and k.isdigit() and int(k) < 64 and _is_int(v) and v >= 0
                for k, v in sub.get(name, {}).items())
        for name in ("level_steps", "since_regrid")))
    need(ok, "subcycle", "null or {level_steps, since_regrid: {level: integer >= 0}}")
    need(isinstance(info["riemann"], str), "riemann", "a string")
    for key, top in (("num_eqn", 1024), ("mx", 1 << 16), ("my", 1 << 16)):
        need(_is_int(info[key]) and 1 <= info[key] <= top, key, f"an integer in [1, {top}]")
    need(_is_int(info["mbc"]) and 0 <= info["mbc"] <= 64, "mbc", "an integer in [0, 64]")
    b = info["brick"]
    ok = isinstance(b, dict) and all(k in b for k in ("nx", "ny", "periodic_x", "periodic_y",
                                                      "lower", "upper"))
    ok = ok and all(_is_int(b[k]) and b[k] >= 1 for k in ("nx", "ny"))
    ok = ok and all(isinstance(b[k], bool) for k in ("periodic_x", "periodic_y"))
    ok = ok and all(isinstance(b[k], list) and len(b[k]) == 2
                    and all(_is_real(v) and math.isfinite(v) for v in b[k])
                    for k in ("lower", "upper"))
    need(ok, "brick", "{nx, ny >= 1, periodic_x, periodic_y, lower, upper: 2 finite numbers}")
    need(isinstance(info["options"], dict), "options", "an object")
    cbs = info["callbacks"]
    ok = isinstance(cbs, list)
    for entry in cbs if ok else ():
        ok = (isinstance(entry, dict) and _is_int(entry.get("index"))
              and entry["index"] >= 0 and isinstance(entry.get("class"), str)
              and isinstance(entry.setdefault("state", {}), dict)
              and isinstance(entry.setdefault("arrays", []), list)
              and all(isinstance(k, str) for k in entry["arrays"]))
        if not ok:
            break
    need(ok, "callbacks", "a list of {index, class, state, arrays}")


# ---------------------------------------------------------------- per-rank checkpoints
#: the ``format`` member of a rank file of a per-rank checkpoint
RANK_FORMAT = "forestpy-checkpoint-rank"
_RANK_FILE = re.compile(r"^[0-9a-f]{16}\.r[0-9]{5}\.npz$")
_CHUNK = 1 << 16  # bytes read at a time for a CRC


def rank_folder(path) -> Path:
    """The folder holding the rank files of the per-rank checkpoint ``path``
    (``out/ck.npz`` -> ``out/ck.ranks``)."""
    path = Path(path)
    return path.with_name(path.stem + ".ranks")


def _file_crc(path: Path) -> tuple[int, int]:
    """(bytes, CRC-32) of the file ``path``, read in chunks."""
    crc = size = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while got := f.readinto(buf):
            crc = zlib.crc32(view[:got], crc)
            size += got
    return size, crc


def write_rank_checkpoint(sim, path, meta: dict | None = None, codec=None) -> Path:
    """Write the state of a distributed ``sim`` as a per-rank checkpoint; return ``path``.

    Collective.  Every rank writes its owned patches (``q``, ``aux``, ``aux_setaux``, each
    through ``codec`` when one is given, their global patch range and forest leaves) to
    its own file ``<stem>.ranks/<token>.r<rank>.npz`` beside ``path``, atomically; then
    rank 0 writes ``path`` itself, the index, atomically and last: the forest, clock,
    counters, options and callbacks' state as :func:`write_checkpoint` does, the rank
    count, and every rank file's name, range, size and CRC-32.  The index is the commit
    point: until it is renamed into place the previous checkpoint of ``path`` (if any)
    stays whole.  Afterwards rank 0 removes the rank files of earlier checkpoints of
    ``path``.  No rank gathers the global state.  An error on any rank is raised on
    every rank."""
    path = Path(path)
    ex, L, be = sim.exchange, sim.layout, sim.backend
    spec = _codec_spec(codec)  # the same on every rank: raises everywhere or nowhere
    token = ex.bcast(secrets.token_hex(8) if ex.rank == 0 else None, 0)
    folder = rank_folder(path)
    name = f"{folder.name}/{token}.r{ex.rank:05d}.npz"
    lo, hi = int(L.lo), int(L.hi)
    rows = slice(lo, hi) if sim._full else slice(0, hi - lo)
    entry = error = None
    try:
        f = sim.forest
        arrays = {
            "format": np.array(RANK_FORMAT),
            "version": np.array(VERSION, dtype=np.int64),
            "forest_tree": np.asarray(f.tree[lo:hi]),
            "forest_level": np.asarray(f.level[lo:hi]),
            "forest_x": np.asarray(f.x[lo:hi]),
            "forest_y": np.asarray(f.y[lo:hi]),
        }
        mine = SimpleNamespace(q=sim.q[rows], aux=sim.aux[rows],
                               aux_setaux=sim.aux_setaux[rows], backend=be,
                               mbc=sim.mbc, riemann=sim.riemann)
        if spec is None:
            for key in ("q", "aux", "aux_setaux"):
                arrays[key] = np.ascontiguousarray(be.to_host(getattr(mine, key)))
            codec_info = None
        else:
            codec_info = _encode_state(mine, arrays, spec)
        arrays["meta_json"] = np.array(json.dumps({
            "token": token, "rank": ex.rank, "nranks": ex.nranks, "lo": lo, "hi": hi,
            "codec": codec_info}))
        target = path.parent / name
        with open_atomic(target, binary=True) as fh:
            np.savez(fh, **arrays)
        size, crc = _file_crc(target)
        entry = {"file": name, "rank": ex.rank, "lo": lo, "hi": hi, "bytes": size,
                 "crc32": crc}
    except Exception as e:  # noqa: BLE001 - raised on every rank below
        error = e
    ex.raise_first(error, CheckpointError)
    entries = ex.allgather(entry)  # a few numbers per rank
    out = error = None
    if ex.rank == 0:
        try:
            arrays = _forest_members(sim.forest)
            info = _run_info(sim, arrays, meta)
            info["codec"] = None if spec is None else {"spec": spec}
            info.update(layout="ranks", token=token, nranks=ex.nranks,
                        num_aux=int(sim.aux.shape[1]), rank_files=entries)
            arrays["meta_json"] = np.array(json.dumps(info))
            with open_atomic(path, binary=True) as fh:
                np.savez(fh, **arrays)
            out = path
            keep = {Path(e["file"]).name for e in entries}
            for old in folder.iterdir():  # earlier checkpoints of this path
                if _RANK_FILE.match(old.name) and old.name not in keep:
                    old.unlink(missing_ok=True)
        except Exception as e:  # noqa: BLE001 - raised on every rank by share_outcome
            error = e
    return ex.share_outcome(out, error, f"write the checkpoint index {path}")


def remove_checkpoint(path) -> None:
    """Remove the checkpoint ``path`` and, for a per-rank one, its rank files."""
    path = Path(path)
    path.unlink(missing_ok=True)
    folder = rank_folder(path)
    if folder.is_dir():
        for old in folder.iterdir():
            if _RANK_FILE.match(old.name):
                old.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()


class RankFiles:
    """The rank files of a per-rank checkpoint, read on demand: :meth:`rows` returns
    the patches asked for, reading only the files that hold them, one file at a time
    (the memory held: the rows asked for plus one rank file's arrays).  Each file is
    checked before use: present, of the size and CRC-32 the index records, a rank file
    of this checkpoint (its token, rank, range and forest leaves), arrays of the shape
    the index implies.  Any problem raises one :class:`CheckpointError` naming the
    file."""

    def __init__(self, index: Path, entries: list, forest: Forest, token: str,
                 shape: tuple, num_aux: int, codec):
        self.index, self.entries, self.forest = index, entries, forest
        self.token, self.shape, self.num_aux, self.codec = token, shape, num_aux, codec

    def _err(self, name: str):
        def err(problem: str) -> CheckpointError:
            return CheckpointError(f"checkpoint {self.index}: rank file {name}: {problem}")
        return err

    def read(self, entry: dict) -> dict:
        """The checked arrays ``q``, ``aux``, ``aux_setaux`` of one rank file."""
        name = entry["file"]
        err = self._err(name)
        path = self.index.parent / name
        if not path.is_file():
            raise err("missing")
        size, crc = _file_crc(path)
        if size != entry["bytes"]:
            raise err(f"{size} bytes, the index says {entry['bytes']} (truncated or "
                      "replaced)")
        if crc != entry["crc32"]:
            raise err(f"CRC-32 {crc:08x}, the index says {entry['crc32']:08x} (corrupt, "
                      "or from another checkpoint)")
        raw = _read_members(path, err)
        fmt = raw.get("format")
        if fmt is None or fmt.shape != () or str(fmt) != RANK_FORMAT:
            raise err("not a forestpy rank file")
        if "meta_json" not in raw or raw["meta_json"].dtype.kind != "U":
            raise err("missing metadata")
        try:
            meta = json.loads(text_member(raw["meta_json"]))
        except (TypeError, ValueError, RecursionError) as e:
            raise err(f"corrupt metadata ({type(e).__name__})") from None
        lo, hi = entry["lo"], entry["hi"]
        want = {"token": self.token, "rank": entry["rank"], "lo": lo, "hi": hi}
        if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in want.items()):
            raise err(f"belongs to another checkpoint ({meta!r:.120}, expected {want})")
        f = self.forest
        for key, a in (("tree", f.tree), ("level", f.level), ("x", f.x), ("y", f.y)):
            got = raw.get(f"forest_{key}")
            if got is None or not np.array_equal(got, a[lo:hi]):
                raise err(f"its leaves ({key}) differ from the index's forest")
        shape = (hi - lo,) + self.shape[1:]
        if meta.get("codec") is not None:
            _decode_state(raw, meta["codec"], shape, err)
        for key in ("q", "aux", "aux_setaux"):
            a = raw.get(key)
            if a is None:
                raise err(f"missing member {key!r}")
            if a.dtype.kind != "f":
                raise err(f"{key} holds {a.dtype} values, not floating point")
            expect = shape if key == "q" else (shape[0], self.num_aux) + shape[2:]
            if a.shape != expect:
                raise err(f"{key} has shape {a.shape}, expected {expect}")
        return raw

    def rows(self, ids) -> tuple:
        """Host arrays ``(q, aux, aux_setaux)`` of the global patches ``ids``, in that
        order."""
        ids = np.asarray(ids, dtype=np.int64)
        out = None
        for entry in self.entries:
            sel = np.flatnonzero((ids >= entry["lo"]) & (ids < entry["hi"]))
            if not len(sel):
                continue
            raw = self.read(entry)
            if out is None:
                out = [np.empty((len(ids),) + raw[k].shape[1:], raw[k].dtype)
                       for k in ("q", "aux", "aux_setaux")]
            src = ids[sel] - entry["lo"]
            for o, k in zip(out, ("q", "aux", "aux_setaux")):
                o[sel] = raw[k][src]
            del raw
        if out is None:  # no rows asked for
            out = [np.empty((0,) + self.shape[1:]),
                   np.empty((0, self.num_aux) + self.shape[2:]),
                   np.empty((0, self.num_aux) + self.shape[2:])]
        return tuple(out)


def _rank_entries(info: dict, n: int, err) -> list:
    """The checked ``rank_files`` of a per-rank index: contiguous ranges covering the
    ``n`` patches, plain names inside the rank folder."""
    entries, nranks = info.get("rank_files"), info.get("nranks")
    token = info.get("token")
    if not (isinstance(token, str) and re.fullmatch(r"[0-9a-f]{16}", token)):
        raise err(f"metadata token={token!r:.40} is not 16 hex digits")
    if not (_is_int(nranks) and 1 <= nranks <= 1 << 20 and isinstance(entries, list)
            and len(entries) == nranks):
        raise err("metadata rank_files is not one entry per rank")
    at = 0
    for r, e in enumerate(entries):
        ok = (isinstance(e, dict) and all(_is_int(e.get(k)) and e[k] >= 0 for k in
                                          ("rank", "lo", "hi", "bytes", "crc32"))
              and e["rank"] == r and e["lo"] == at and e["hi"] >= e["lo"]
              and isinstance(e.get("file"), str) and "/" in e["file"])
        if ok:
            folder, fname = e["file"].split("/", 1)
            ok = (not folder.startswith(".") and "\\" not in folder
                  and _RANK_FILE.match(fname) is not None
                  and fname.startswith(token) and fname.endswith(f".r{r:05d}.npz"))
        if not ok:
            raise err(f"metadata rank_files[{r}] is not a rank file entry "
                      f"({e!r:.120})")
        at = e["hi"]
    if at != n:
        raise err(f"the rank files hold {at} patches, the forest {n}")
    return entries
