"""Fuzzing of the file readers: seeded mutations of valid files, read in a child process
under a memory and a time limit.

A test calls :func:`fuzz` with a reader (``"module:function"``), the valid files to
start from, a mutation kind per file and a count.  One child process (this file run as
a script) caps its address space (``RLIMIT_AS``) and CPU time, then for each mutation
``i`` builds the damaged file from ``random.Random(seed, i)``, reads it and classifies
the outcome: a result that passes the checker (``"module:function"``, raising on a
wrong shape), or the project's error (:class:`forestpy.errors.InputFileError`) with
one line that names the file.  Anything else is a finding: another exception (a
traceback), ``MemoryError`` (an allocation beyond the limit), a read slower than
``per_read_s`` (a hang), or the child dying or running past its time limit.  The child
prints one JSON line; :func:`fuzz` fails the test with the first findings, each with
the seed and mutation index that replays it (``replay()``).
"""

from __future__ import annotations

import importlib
import json
import os
import random
import struct
import subprocess
import sys
import time
import traceback
import zipfile
from pathlib import Path

INTERESTING32 = (0, 1, 2, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                 0xFF000001, 0x10000, 0x1000000)
TOKENS = ("nan", "NaN", "inf", "-inf", "-1", "0", "1", "1e308", "-1e308", "1e-320",
          "2147483648", "9" * 40, "abc", "", "1.5", "0x10", "\xff\xfe", "1 2", "3.0",
          "1e9", "-0")
JSON_VALUES = ("abc", None, float("nan"), float("inf"), -1, 0, 1, 2.5, 10**9, 10**30, True,
               [], {}, [1, 2], {"a": 1}, "", -1e300)


# ----------------------------------------------------------------------------- mutations
def _bytes_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Truncation, bit flips or an interesting 16/32-bit value, biased to the head."""
    b = bytearray(data)
    n = len(b)
    head = min(n, 1024)
    kind = rng.randrange(4)
    if kind == 0 or n < 8:
        cut = rng.choice([rng.randrange(16), rng.randrange(max(n, 1))])
        return bytes(b[:cut]), f"truncate to {cut}"
    if kind == 1:
        flips = [(rng.randrange(head if rng.random() < 0.7 else n), rng.randrange(8))
                 for _ in range(rng.randint(1, 6))]
        for i, bit in flips:
            b[i] ^= 1 << bit
        return bytes(b), f"flip bits {flips}"
    if kind == 2:
        i = rng.randrange(max(1, (head if rng.random() < 0.8 else n) - 4)) & ~rng.choice([0, 1, 3])
        value = rng.choice(INTERESTING32 + (n, n - 1, n + 1))
        width = rng.choice(["<I", "<H", ">I", ">H"])
        raw = struct.pack(width, value & (0xFFFF if width[1] == "H" else 0xFFFFFFFF))
        b[i:i + len(raw)] = raw
        return bytes(b), f"put {width} {value:#x} at {i}"
    i = rng.randrange(n)
    j = min(n, i + rng.randint(1, 64))
    if rng.random() < 0.5:
        del b[i:j]
        return bytes(b), f"delete [{i}:{j}]"
    b[i:i] = b[i:j]
    return bytes(b), f"duplicate [{i}:{j}]"


def _text_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Token and line mutations of a text file (half the time), else bytes."""
    if rng.random() < 0.4:
        return _bytes_mutation(rng, data)
    text = data.decode("latin-1")
    lines = text.split("\n")
    kind = rng.randrange(4)
    k = rng.randrange(len(lines))
    if kind == 0:  # replace one token, mostly in the first lines (headers)
        k = rng.randrange(min(len(lines), 12)) if rng.random() < 0.6 else k
        words = lines[k].split(" ")
        w = rng.randrange(len(words))
        words[w] = rng.choice(TOKENS)
        lines[k] = " ".join(words)
        what = f"line {k} token {w} -> {words[w]!r}"
    elif kind == 1:
        del lines[k]
        what = f"delete line {k}"
    elif kind == 2:
        lines.insert(k, lines[rng.randrange(len(lines))])
        what = f"duplicate a line at {k}"
    else:
        lines[k] = lines[k] + " " + rng.choice(TOKENS)
        what = f"append a token to line {k}"
    return "\n".join(lines).encode("latin-1"), what


def _tiff_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A field of one directory entry (type, count or value) set to an interesting
    value (half the time), else bytes."""
    if rng.random() < 0.5 or len(data) < 16:
        return _bytes_mutation(rng, data)
    off = struct.unpack_from("<I", data, 4)[0]
    n = struct.unpack_from("<H", data, off)[0]
    k = rng.randrange(n)
    e = off + 2 + 12 * k
    field = rng.choice([(2, "<H", "type"), (4, "<I", "count"), (8, "<I", "value")])
    value = rng.choice(INTERESTING32 + (len(data), rng.randrange(20)))
    b = bytearray(data)
    mask = 0xFFFF if field[1] == "<H" else 0xFFFFFFFF
    struct.pack_into(field[1], b, e + field[0], value & mask)
    tag = struct.unpack_from("<H", data, e)[0]
    return bytes(b), f"tag {tag} {field[2]} -> {value:#x}"


def _npz_mutation(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A member of the archive changed and the archive rewritten (CRCs right, so the
    change reaches the reader): the metadata JSON, a ``.npy`` header, the array bytes,
    a member dropped; else bytes (mostly caught by the CRC)."""
    import io

    import numpy as np

    if rng.random() < 0.25:
        return _bytes_mutation(rng, data)
    with zipfile.ZipFile(io.BytesIO(data)) as zin:
        members = {i.filename: zin.read(i) for i in zin.infolist()}
    names = sorted(members)
    kind = rng.randrange(5)
    name = rng.choice(names)
    if kind == 0 or (kind == 1 and "meta_json.npy" in members and rng.random() < 0.5):
        name = "meta_json.npy"
        arr = np.load(io.BytesIO(members[name]))
        info = json.loads(str(arr))
        path = []
        node = info
        for _ in range(rng.randint(1, 3)):  # descend into a random key
            if isinstance(node, dict) and node:
                key = rng.choice(sorted(node))
            elif isinstance(node, list) and node:
                key = rng.randrange(len(node))
            else:
                break
            path.append(key)
            parent, node = node, node[key]
        if path:
            parent[path[-1]] = rng.choice(JSON_VALUES)
        else:
            info = rng.choice(JSON_VALUES)
        buf = io.BytesIO()
        np.save(buf, np.array(json.dumps(info)))
        members[name] = buf.getvalue()
        what = f"meta {path} -> {parent[path[-1]] if path else info!r}"
    elif kind == 1:  # the .npy header: shape or dtype
        raw = members[name]
        hlen = struct.unpack_from("<H", raw, 8)[0]
        header = raw[10:10 + hlen].decode("latin-1")
        choice = rng.choice(["'shape': (1000000, 1000000), ", "'shape': (), ",
                             "'shape': (-1,), ", "'shape': (3,), ",
                             "'descr': '|O', ", "'descr': '<f2', ", "'descr': 'V8', ",
                             "'descr': '<i8', ", "'fortran_order': True, "])
        key = choice.split(":")[0]
        start = header.index(key)
        end = header.index(", ", header.index(")", start) if "shape" in key else start) + 2
        header = (header[:start] + choice + header[end:]).rstrip()
        header = header.ljust(hlen - 1) + "\n"
        header = header[:hlen] if len(header) > hlen else header
        members[name] = raw[:8] + struct.pack("<H", len(header)) + header.encode() \
            + raw[10 + hlen:]
        what = f"{name} header -> {choice!r}"
    elif kind == 2:  # bytes of the array data
        raw = bytearray(members[name])
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(raw))
            raw[i] = rng.randrange(256)
        members[name] = bytes(raw)
        what = f"{name} bytes changed"
    elif kind == 3:
        del members[name]
        what = f"{name} dropped"
    else:  # the value of a forest array or a whole array
        raw = bytearray(members[name])
        hlen = struct.unpack_from("<H", raw, 8)[0]
        body = 10 + hlen
        if len(raw) - body >= 8:
            i = body + 8 * rng.randrange((len(raw) - body) // 8)
            struct.pack_into("<q", raw, i, rng.choice([-1, 0, 1, 2**20, 2**40, 2**62]))
        members[name] = bytes(raw)
        what = f"{name}: an 8-byte value changed"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zout:
        for n, raw in members.items():
            zout.writestr(n, raw)
    return buf.getvalue(), what


MUTATORS = {"bytes": _bytes_mutation, "text": _text_mutation, "tiff": _tiff_mutation,
            "npz": _npz_mutation}


# ----------------------------------------------------------------------------- child
def _load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _child(cfg: dict) -> dict:
    import resource
    import warnings

    limit = int(cfg["mem_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cpu = int(cfg["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    warnings.simplefilter("error", RuntimeWarning)  # as pytest's configuration

    from forestpy.errors import InputFileError

    read = _load(cfg["reader"])
    check = _load(cfg["checker"]) if cfg.get("checker") else None
    work = Path(cfg["work"])
    seeds = [(Path(p), kind, Path(p).read_bytes()) for p, kind in cfg["files"]]
    for src, _, _ in seeds:  # untimed: the valid files pass (and compile what they use)
        result = read(src)
        if check is not None:
            check(result)
    counts = {"ok": 0, "refused": 0}
    findings = []
    slowest = 0.0
    for i in range(cfg["start"], cfg["start"] + cfg["count"]):
        rng = random.Random(cfg["seed"] * 1_000_003 + i)
        src, kind, good = seeds[i % len(seeds)]
        data, what = MUTATORS[kind](rng, good)
        path = work / f"m{i}{src.suffix}"
        path.write_bytes(data)
        (work / "current").write_text(f"#{i} of {src.name}, {what}")  # if the child dies
        t0 = time.perf_counter()
        problem = None
        try:
            result = read(path)
            if check is not None:
                check(result)
            counts["ok"] += 1
        except InputFileError as e:
            msg = str(e)
            if str(path) not in msg or "\n" in msg:
                problem = f"error message without the file name or on several lines: {msg!r}"
            counts["refused"] += 1
        except MemoryError:
            problem = f"MemoryError: an allocation beyond {limit >> 20} MiB"
        except Exception as e:  # noqa: BLE001 - every other exception is a finding
            problem = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-4:])
        dt = time.perf_counter() - t0
        slowest = max(slowest, dt)
        if problem is None and dt > cfg["per_read_s"]:
            problem = f"read took {dt:.2f} s"
        if problem is not None:
            findings.append({"index": i, "seed_file": src.name, "mutation": what,
                             "problem": problem[-1500:]})
        path.unlink()
    return {"counts": counts, "findings": findings, "slowest_s": slowest}


# ----------------------------------------------------------------------------- parent
def fuzz(reader: str, files, *, count: int, seed: int, work: Path, checker: str | None = None,
         mem_mb: int = 1536, timeout_s: float = 240.0, per_read_s: float = 5.0,
         start: int = 0) -> dict:
    """Read ``count`` mutations of ``files`` (``[(path, kind), ...]``, kind one of
    :data:`MUTATORS`) with ``reader`` in one child process; fail on any finding."""
    import pytest

    work.mkdir(parents=True, exist_ok=True)
    cfg = {"reader": reader, "checker": checker, "files": [[str(p), k] for p, k in files],
           "count": count, "seed": seed, "start": start, "work": str(work),
           "mem_bytes": mem_mb << 20, "cpu_s": int(timeout_s), "per_read_s": per_read_s}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    current = work / "current"
    try:
        proc = subprocess.run([sys.executable, __file__, json.dumps(cfg)], capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fuzzing {reader}: the child ran past {timeout_s} s (a hang) at "
                    f"{current.read_text() if current.exists() else 'the start'}")
    if proc.returncode != 0:
        pytest.fail(f"fuzzing {reader}: the child died (exit code {proc.returncode}, a "
                    f"crash or a resource limit) at "
                    f"{current.read_text() if current.exists() else 'the start'} "
                    f"(seed {seed}):\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if report["findings"]:
        lines = [f"{len(report['findings'])} of {count} mutations of {reader} went wrong "
                 f"(seed {seed}); first ones:"]
        for f in report["findings"][:5]:
            lines.append(f"  #{f['index']} of {f['seed_file']}, {f['mutation']}:\n"
                         f"    {f['problem']}")
        pytest.fail("\n".join(lines))
    assert sum(report["counts"].values()) == count
    return report


def replay(reader: str, files, seed: int, index: int, out: Path) -> Path:
    """Write mutation ``index`` of a :func:`fuzz` run to ``out`` (to debug a finding)."""
    cfg_files = [(Path(p), k) for p, k in files]
    src, kind = cfg_files[index % len(cfg_files)]
    data, _ = MUTATORS[kind](random.Random(seed * 1_000_003 + index), src.read_bytes())
    out.write_bytes(data)
    return out


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))


# ----------------------------------------------------------------------------- checkers
# Each raises AssertionError (a finding) where an accepted file gave a wrong result.
def _finite(*values) -> bool:
    import math

    return all(math.isfinite(v) for v in values)


def check_raster(r) -> None:
    import numpy as np
    from forestpy.extensions.geoclaw.rasters import Raster

    assert isinstance(r, Raster), type(r)
    assert r.z.ndim == 2 and min(r.z.shape) >= 1 and r.z.dtype == np.float64, r.z.shape
    assert not np.isinf(r.z).any(), "infinite values"
    assert _finite(r.x0, r.y0, r.dx, r.dy) and r.dx > 0 and r.dy > 0, (r.x0, r.y0, r.dx, r.dy)
    assert r.registration in ("node", "cell")


def check_dtopo(d) -> None:
    import numpy as np

    mt, my, mx = d.dz.shape
    assert d.t.shape == (mt,) and my >= 2 and mx >= 2, (d.dz.shape, d.t.shape)
    assert np.isfinite(d.dz).all() and np.isfinite(d.t).all() and np.all(np.diff(d.t) > 0)
    assert _finite(d.x0, d.y0, d.dx, d.dy) and d.dx > 0 and d.dy > 0
    x0, x1, y0, y1 = d.extent
    out = d.cell_averages(float(d.t[-1]), 0.5 * (x0 + x1), 0.5 * (y0 + y1), d.dx, d.dy)
    assert np.isfinite(out).all()


def check_gauges(g) -> None:
    import numpy as np

    assert isinstance(g, dict)
    for record in g.values():
        assert {"t", "x", "y"} <= set(record)
        lengths = {a.shape for a in record.values()}
        assert len(lengths) == 1 and all(a.dtype == np.float64 for a in record.values())


def check_pvd(entries) -> None:
    assert all(isinstance(t, float) and isinstance(f, str) for t, f in entries)


_SIM = None


def restore_radial_dam(data) -> None:
    """Check the shapes of a read checkpoint, then restore it into the simulation that
    ``checkpoint_simulation`` builds (once per child) and fill its ghost cells: an
    accepted forest must be one the ghost-fill kernels can work on."""
    global _SIM
    import numpy as np

    n = data["forest"].n
    assert data["q"].shape[0] == n and data["q"].ndim == 4
    assert isinstance(data["t"], float | int) and isinstance(data["steps"], int)
    if _SIM is None:
        _SIM = checkpoint_simulation()
    _SIM.restore(data)  # a CheckpointError (does not fit) counts as a refusal
    _SIM.fill_ghosts()
    assert _SIM.q.shape[0] == _SIM.forest.n == n
    assert np.isfinite(_SIM.t)


#: the run whose checkpoints are fuzzed (tests/driver/io/test_fuzz_readers.py)
CHECKPOINT_OPTIONS = dict(mx=8, min_level=1, max_level=3, t_final=1.0)
CHECKPOINT_GAUGES = [(0.0, 0.0), (1.0, 0.3)]


def checkpoint_simulation(gauge_path=None):
    from testsupport import load_demo

    from forestpy.callbacks import Gauges, OutputTimes, Totals

    sim = load_demo("radial_dam").setup(**CHECKPOINT_OPTIONS)
    sim.callbacks += [Gauges(CHECKPOINT_GAUGES, path=gauge_path), Totals(),
                      OutputTimes(0.25, _nothing)]
    return sim


def _nothing(sim) -> None:
    pass


def fuzz_case(case, seed_file, *, count: int, seed: int, work: Path,
              need_ok: bool = False) -> dict:
    """One fuzz test case ``(reader, checker, [(file, kind), ...], fast count)``: its
    seed files at ``seed_file(file)``; the mutations must reach a refusal (and, with
    ``need_ok``, an accepted read too), or they test nothing."""
    reader, checker, files, _ = case
    report = fuzz(reader, [(seed_file(f), kind) for f, kind in files], count=count,
                  seed=seed, work=work, checker=checker)
    counts = report["counts"]
    assert counts["refused"] > 0 and (counts["ok"] > 0 or not need_ok), counts
    return report

