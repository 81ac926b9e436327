"""Checkpoint and restart: a run restarted half way is bitwise the uninterrupted run;
unreadable or unfitting checkpoints give one clear CheckpointError (CLI: exit code 2).

Ghost cells of the state after a step are unset memory (``empty_like``) in any run, so
final states are compared after ``fill_ghosts()`` (every ghost then has a defined
value) and, separately, on the interiors.
"""

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from testsupport import ROOT

from forestpy.callbacks import CheckpointEvery, Gauges, OutputTimes, Totals
from forestpy.cli import main
from forestpy.io.checkpoint import CheckpointError, read_checkpoint, write_checkpoint

DEMO = ROOT / "demos" / "radial_dam.py"
OPTS = dict(mx=8, min_level=1, max_level=3, t_final=1.0, subcycle=False)
SETS = [a for k, v in OPTS.items() for a in ("--set", f"{k}={v}")]
GAUGES = [(0.0, 0.0), (1.0, 0.3), (-2.0, 1.5)]


def _build(radial_dam, gauge_path=None, **kw):
    sim = radial_dam.setup(**{**OPTS, **kw})
    gauges, totals = Gauges(GAUGES, path=gauge_path), Totals()
    outputs = OutputTimes(0.25, lambda s: None)
    sim.callbacks += [gauges, totals, outputs]
    return sim, gauges, totals, outputs


def _interior(sim):
    b = sim.mbc
    return sim.backend.to_host(sim.q)[:, :, b:-b, b:-b]


@pytest.fixture(scope="module")
def reference(radial_dam, tmp_path_factory):
    """The uninterrupted run, its callbacks and its gauge file."""
    path = tmp_path_factory.mktemp("ref") / "gauges.csv"
    sim, gauges, totals, outputs = _build(radial_dam, gauge_path=path)
    sim.run()
    assert sim.steps >= 10 and sim.regrids >= 1  # the restart crosses a regrid
    sim.fill_ghosts()
    return sim, gauges, totals, outputs, path


def test_restart_half_way_is_bitwise(radial_dam, reference, tmp_path):
    ref, ref_gauges, ref_totals, ref_outputs, ref_csv = reference
    half = ref.steps // 2
    first, *_ = _build(radial_dam, gauge_path=tmp_path / "first.csv")
    first.run(max_steps=half)
    assert first.steps == half and first.t < ref.t and first.regrids < ref.regrids
    ck = first.save_checkpoint(tmp_path / "ck.npz")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ck.npz", "first.csv", "first.vtp"]  # no temporary file left behind

    sim, gauges, totals, outputs = _build(radial_dam, gauge_path=tmp_path / "gauges.csv")
    sim.load_checkpoint(ck)
    assert sim.t == first.t and sim.dt == first.dt and sim.forest == first.forest
    sim.run()
    sim.fill_ghosts()

    assert np.array_equal(sim.backend.to_host(sim.q), ref.backend.to_host(ref.q))
    assert np.array_equal(_interior(sim), _interior(ref))
    assert np.array_equal(sim.aux, ref.aux)
    assert sim.forest == ref.forest and np.array_equal(sim.forest.x, ref.forest.x)
    for key in ("t", "steps", "rejected_steps", "regrids", "cell_updates", "dt"):
        assert getattr(sim, key) == getattr(ref, key), key
    s, r = sim.summary(), ref.summary()
    for key in ("totals_initial", "totals_final", "patches_per_level", "steps", "t_final"):
        assert s[key] == r[key], key
    assert gauges.times == ref_gauges.times
    assert all(np.array_equal(a, b) for a, b in zip(gauges._values, ref_gauges._values))
    assert (tmp_path / "gauges.csv").read_bytes() == ref_csv.read_bytes()
    assert totals.times == ref_totals.times and totals.history == ref_totals.history
    assert outputs.fired == ref_outputs.fired and outputs.calls == ref_outputs.calls


def test_restart_of_a_subcycled_run_is_bitwise(radial_dam, tmp_path):
    """Checkpoints are written between coarse steps (all levels at one time); the
    regrid cadence of each level is stored, so the restart is bitwise."""
    opts = dict(OPTS, subcycle=True, t_final=1.0, regrid_interval=1)
    ref = radial_dam.setup(**opts).run()
    assert ref.subcycling and ref.regrids >= 2
    first = radial_dam.setup(**opts)
    first.run(max_steps=ref.steps // 2)
    ck = first.save_checkpoint(tmp_path / "ck.npz")
    sim = radial_dam.setup(**opts).load_checkpoint(ck)
    sim.run()
    assert np.array_equal(_interior(sim), _interior(ref))
    assert sim.forest == ref.forest and sim.level_steps == ref.level_steps
    for key in ("t", "steps", "regrids", "cell_updates", "dt"):
        assert getattr(sim, key) == getattr(ref, key), key


def test_checkpoint_contents(radial_dam, tmp_path):
    sim, gauges, _, _ = _build(radial_dam)
    sim.run(max_steps=3)
    path = write_checkpoint(sim, tmp_path / "sub" / "ck.npz", meta={"note": "x"})
    data = read_checkpoint(path)
    assert data["version"] == 1 and data["extra"] == {"note": "x"}
    assert data["riemann"] == "shallow_roe" and data["steps"] == 3 and data["t"] == sim.t
    assert data["forest"] == sim.forest and np.array_equal(data["q"], sim.q)
    assert data["options"]["mx"] == 8 and "callbacks" not in data["options"]
    assert [c["class"] for c in data["callbacks"]] == ["Gauges", "Totals", "OutputTimes"]
    assert np.array_equal(data["callbacks"][0]["state"]["times"], gauges.times)
    with zipfile.ZipFile(path) as z:  # plain npy members, no pickles
        assert all(n.endswith(".npy") for n in z.namelist())


def test_checkpoint_every_keeps_last_and_latest(radial_dam, tmp_path):
    sim = radial_dam.setup(**OPTS)
    every = CheckpointEvery(tmp_path, 4)
    sim.callbacks.append(every)
    sim.run(max_steps=13)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["checkpoint_000012.npz", "checkpoint_000013.npz", "checkpoint_latest.npz"]
    assert read_checkpoint(tmp_path / "checkpoint_latest.npz")["steps"] == 13
    assert read_checkpoint(tmp_path / "checkpoint_000012.npz")["steps"] == 12


# --------------------------------------------------------------------------- bad files
@pytest.fixture(scope="module")
def good_checkpoint(radial_dam, tmp_path_factory):
    sim = radial_dam.setup(**OPTS)
    return sim.save_checkpoint(tmp_path_factory.mktemp("good") / "ck.npz")


def _corrupt(kind, good: Path, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.npz"
    raw = good.read_bytes()
    if kind == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif kind == "random":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "missing_key":
        with np.load(good) as z:
            arrays = {k: z[k] for k in z.files if k != "q"}
        np.savez(path, **arrays)
    elif kind == "version":
        with np.load(good) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["version"] = np.array(99)
        np.savez(path, **arrays)
    elif kind == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
    elif kind == "missing":
        pass
    elif kind in META:  # a valid archive (CRCs right) whose metadata has a wrong type
        with np.load(good) as z:
            arrays = {k: z[k] for k in z.files}
        info = json.loads(str(arrays["meta_json"]))
        key, value = META[kind]
        info[key] = value
        arrays["meta_json"] = np.array(json.dumps(info))
        np.savez(path, **arrays)
    elif kind == "meta_not_unicode":  # UCS-4 code units beyond U+10FFFF, CRC intact
        with np.load(good) as z:
            arrays = {k: z[k] for k in z.files}
        raw = bytearray(arrays["meta_json"].tobytes())
        raw[4:8] = (0x110041).to_bytes(4, "little")
        arrays["meta_json"] = np.frombuffer(bytes(raw), arrays["meta_json"].dtype).reshape(())
        np.savez(path, **arrays)
    elif kind in ARRAYS:
        with np.load(good) as z:
            arrays = {k: z[k] for k in z.files}
        key, value = ARRAYS[kind]
        arrays[key] = value(arrays[key])
        np.savez(path, **arrays)
    elif kind == "huge_header":  # a .npy header claiming 10**12 floats, CRC intact
        with zipfile.ZipFile(good) as zin, zipfile.ZipFile(path, "w") as zout:
            for info in zin.infolist():
                data = zin.read(info)
                if info.filename == "q.npy":
                    head = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, " \
                           b"1000000), }"
                    head = head.ljust(118) + b"\n"
                    data = b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head
                zout.writestr(info, data)
    return path


META = {  # kind: (metadata key, bad value), each refused with the key named
    "t_str": ("t", "abc"),
    "t_nan": ("t", float("nan")),
    "steps_null": ("steps", None),
    "steps_float": ("steps", 2.5),
    "dt_negative": ("dt", -1.0),
    "mx_bool": ("mx", True),
    "brick_str": ("brick", "x"),
    "brick_huge": ("brick", {"nx": 10**9, "ny": 10**9, "periodic_x": False,
                             "periodic_y": False, "lower": [0, 0], "upper": [1, 1]}),
    "callbacks_dict": ("callbacks", {"a": 1}),
    "totals_str": ("totals_initial", {"h": "x"}),
}
ARRAYS = {  # kind: (member, what it becomes)
    "q_int": ("q", lambda a: a.astype(np.int32)),
    "tree_float": ("forest_tree", lambda a: a.astype(np.float64)),
    "level_deep": ("forest_level", lambda a: a + 40),
    "object_array": ("q", lambda a: np.array([{"x": 1}], dtype=object)),  # pickled
}


BAD = {
    "truncated": "truncated or corrupt",
    "random": "truncated or corrupt",
    "empty": "truncated or corrupt",
    "missing_key": "missing member(s) ['q']",
    "version": "format version 99",
    "meta_not_unicode": "corrupt metadata (ValueError: code point 0x110041 is not Unicode)",
    "missing": "no such file",
    "npy": "not an npz archive",
    "t_str": "metadata t='abc' is not a finite number",
    "t_nan": "metadata t=nan is not a finite number",
    "steps_null": "metadata steps=None is not an integer >= 0",
    "steps_float": "metadata steps=2.5 is not an integer >= 0",
    "dt_negative": "metadata dt=-1.0 is not null or a number > 0",
    "mx_bool": "metadata mx=True is not an integer",
    "brick_str": "metadata brick='x' is not",
    "brick_huge": "invalid forest (1000000000x1000000000 trees",
    "callbacks_dict": "metadata callbacks=",
    "totals_str": "metadata totals_initial=",
    "q_int": "q holds int32 values, not floating point",
    "tree_float": "invalid forest (leaf arrays must be 1-D integer arrays)",
    "level_deep": "invalid forest",
    "object_array": "member 'q.npy': dtype object is not a plain array type",
    "huge_header": "member 'q.npy': shape (1000000, 1000000) of float64 needs 8000000000000",
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_checkpoint_files(kind, good_checkpoint, tmp_path):
    path = _corrupt(kind, good_checkpoint, tmp_path)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    msg = str(info.value)
    assert str(path) in msg and BAD[kind] in msg and "\n" not in msg
    assert isinstance(info.value, ValueError)


def test_a_fortran_ordered_member_reads_in_c_order(good_checkpoint, tmp_path):
    # a valid .npy may store its array in Fortran order: the state must come back in C
    # order, or every kernel that takes it would compile again for that layout
    path = tmp_path / "fortran.npz"
    with zipfile.ZipFile(good_checkpoint) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            raw = zin.read(info)
            if info.filename == "q.npy":
                buf = io.BytesIO()
                np.save(buf, np.asfortranarray(np.load(io.BytesIO(raw))))
                raw = buf.getvalue()
                assert b"'fortran_order': True" in raw
            zout.writestr(info, raw)
    data = read_checkpoint(path)
    assert data["q"].flags.c_contiguous
    assert np.array_equal(data["q"], read_checkpoint(good_checkpoint)["q"])


def test_mismatched_simulation(radial_dam, good_checkpoint):
    data = read_checkpoint(good_checkpoint)
    other = radial_dam.setup(**{**OPTS, "solver": "hlle"})
    with pytest.raises(CheckpointError, match="riemann='shallow_roe'.*shallow_hlle"):
        other.restore(data)
    with pytest.raises(CheckpointError, match="mx=8"):
        radial_dam.setup(**{**OPTS, "mx": 4}).load_checkpoint(good_checkpoint)
    assert data["forest"].level.max() == 3
    with pytest.raises(CheckpointError, match="levels 2 to 3, this simulation 1 to 2"):
        radial_dam.setup(**{**OPTS, "max_level": 2}).restore(data)
    sim, *_ = _build(radial_dam)  # stateful callbacks the checkpoint does not have
    t, forest = sim.t, sim.forest
    with pytest.raises(CheckpointError, match="stateful callbacks differ"):
        sim.restore(data)
    assert sim.t == t and sim.forest is forest  # left unchanged


# --------------------------------------------------------------------------- CLI
def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_cli_checkpoint_and_restart(tmp_path, capsys):
    full, a, b = tmp_path / "full", tmp_path / "A", tmp_path / "B"
    assert main(["run", DEMO, *SETS, "--quiet", "--out", full]) == 0
    ref = _summary(full)
    assert main(["run", DEMO, *SETS, "--quiet", "--out", a, "--checkpoint-interval", "3",
                 "--checkpoint-keep", "100"]) == 0
    steps = sorted(int(p.stem.split("_")[1]) for p in a.glob("checkpoint_0*.npz"))
    assert steps[:3] == [3, 6, 9] and steps[-1] == ref["steps"]
    mid = min(steps, key=lambda s: abs(s - ref["steps"] // 2))
    capsys.readouterr()
    assert main(["run", DEMO, *SETS, "--quiet", "--out", b,
                 "--restart", a / f"checkpoint_{mid:06d}.npz"]) == 0
    assert "restarting from" in capsys.readouterr().err
    for out in (a, b):
        got = _summary(out)
        for key in ("steps", "rejected_steps", "regrids", "cell_updates", "t_final",
                    "totals_initial", "totals_final", "patches_per_level"):
            assert got[key] == ref[key], (out.name, key)
    assert _summary(b)["restart"]["steps"] == mid
    assert not list(b.glob("checkpoint_*"))


def test_cli_default_keep(tmp_path):
    assert main(["run", DEMO, *SETS, "--quiet", "--out", tmp_path,
                 "--checkpoint-interval", "4"]) == 0
    assert len(list(tmp_path.glob("checkpoint_0*.npz"))) == 2
    assert (tmp_path / "checkpoint_latest.npz").is_file()


@pytest.mark.parametrize("kind", ["truncated", "random", "missing", "solver", "t_str",
                                  "steps_null", "huge_header"])
def test_cli_bad_restart(kind, good_checkpoint, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text('{"keep": true}')
    sets = SETS
    if kind == "solver":
        path, sets = good_checkpoint, [*SETS, "--set", "solver=hlle"]
    else:
        path = _corrupt(kind, good_checkpoint, tmp_path)
    capsys.readouterr()
    assert main(["run", DEMO, *sets, "--quiet", "--out", out, "--restart", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --restart: checkpoint" in err[0], err
    assert str(path) in err[0]
    assert (out / "summary.json").read_text() == '{"keep": true}'
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_cli_bad_checkpoint_interval(tmp_path):
    assert main(["run", DEMO, *SETS, "--out", tmp_path, "--checkpoint-interval", "0"]) == 2


def test_cli_restart_with_changed_options_needs_the_flag(tmp_path, capsys):
    a, b = tmp_path / "A", tmp_path / "B"
    assert main(["run", DEMO, *SETS, "--quiet", "--out", a, "--checkpoint-interval", "3"]) == 0
    ckpt = sorted(a.glob("checkpoint_0*.npz"))[0]
    capsys.readouterr()
    changed = [*SETS, "--set", "cfl=0.5"]
    assert main(["run", DEMO, *changed, "--quiet", "--out", b, "--restart", ckpt]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-changed-options" in err[0] and "cfl" in err[0], err
    assert not b.exists() or not list(b.iterdir())  # nothing written
    assert main(["run", DEMO, *changed, "--quiet", "--out", b, "--restart", ckpt,
                 "--allow-changed-options"]) == 0
    assert "continuing with changed options (cfl: 'default' -> 0.5)" in capsys.readouterr().err
    assert _summary(b)["status"] == "ok"


def test_cli_restart_of_a_finished_run(tmp_path, capsys):
    a = tmp_path / "A"
    assert main(["run", DEMO, *SETS, "--quiet", "--out", a, "--checkpoint-interval", "1000"]) == 0
    before = {p.name: p.read_bytes() for p in a.iterdir()}
    capsys.readouterr()
    assert main(["run", DEMO, *SETS, "--quiet", "--out", a, "--restart",
                 a / "checkpoint_latest.npz"]) == 0
    captured = capsys.readouterr()
    assert "nothing to do" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "phase" not in captured.out and "%" not in captured.out  # no timer table
    assert {p.name: p.read_bytes() for p in a.iterdir()} == before  # nothing rewritten


def test_restart_timer_shares_stay_below_100_percent(tmp_path, capsys):
    # a checkpoint written during a run holds that run's phase timers: its wall time
    # must cover them, or the restarted run's table shows shares above 100 %
    a, b = tmp_path / "A", tmp_path / "B"
    assert main(["run", DEMO, *SETS, "--quiet", "--out", a, "--checkpoint-interval", "3"]) == 0
    capsys.readouterr()
    assert main(["run", DEMO, *SETS, "--quiet", "--out", b, "--restart",
                 sorted(a.glob("checkpoint_0*.npz"))[0]]) == 0
    table = capsys.readouterr().out.split("total wall")[0]
    shares = [float(ln.split()[-1].rstrip("%")) for ln in table.splitlines()[1:]]
    assert shares and max(shares) <= 100.0
    timers = _summary(b)["timers"]
    assert sum(v for k, v in timers.items() if k not in ("total", "compile") and "." not in k
               and isinstance(v, float)) <= timers["total"] * (1 + 1e-9) + 1e-5  # rounded
