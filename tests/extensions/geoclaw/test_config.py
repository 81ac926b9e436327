"""forestpy run --config: a GeoClaw-like run from a TOML file (extensions/geoclaw/config.py).

The example demos/geoclaw/okushiri.toml is the Okushiri demo: the same state, bit for bit.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from forestpy.extensions.geoclaw.config import ConfigError, read_config, setup
from testsupport import ROOT, load_demo

from forestpy.callbacks import Gauges, read_gauges
from forestpy.cli import main

EXAMPLE = ROOT / "demos" / "geoclaw" / "okushiri.toml"
DATA = ROOT / "demos" / "geoclaw" / "data" / "okushiri"


def test_okushiri_config_is_the_okushiri_demo():
    cfg = read_config(EXAMPLE)
    cfg["run"]["t_final"] = 0.6
    a = setup(cfg).run()
    b = load_demo("geoclaw/okushiri").setup(t_final=0.6).run()
    assert a.steps == b.steps and a.patches_per_level() == b.patches_per_level()
    np.testing.assert_array_equal(np.asarray(a.q), np.asarray(b.q))
    ga, gb = ([c for c in s.callbacks if isinstance(c, Gauges)][0].data() for s in (a, b))
    for gid in gb:
        np.testing.assert_array_equal(ga[gid]["surface"], gb[gid]["surface"])


def _small_config(tmp_path, **replace) -> Path:
    """The example, to a short end time, its data files named absolutely."""
    text = EXAMPLE.read_text().replace('"data/okushiri/', f'"{DATA.as_posix()}/')
    text = text.replace("t_final = 22.5", "t_final = 0.3")
    text = text.replace("interval = 0.5 ", "interval = 0.1 ")
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_cli_runs_a_config(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["run", "--config", str(_small_config(tmp_path)), "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    from forestpy.io.vtk import read_pvd

    times = [t for t, _ in read_pvd(out / "frame.pvd")]
    assert times == pytest.approx([0.0, 0.1, 0.2, 0.3])  # [output] interval
    gauges = read_gauges(out / "gauges.csv")
    assert sorted(gauges) == ["ch5", "ch7", "ch9"] and gauges["ch5"]["t"][-1] == 0.3
    report = json.loads((out / "report.json").read_text())
    assert {"gauges.csv", "fgmax.npz"} <= set(report["files"])
    assert all((out / f).is_file() for f in report["files"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["demo"] == "okushiri" and summary["status"] == "ok"
    # the command line's output options take precedence over the file's
    out2 = tmp_path / "out2"
    assert main(["run", "--config", str(_small_config(tmp_path)), "--out", str(out2),
                 "--quiet", "--output-times", "0.15"]) == 0
    assert [t for t, _ in read_pvd(out2 / "frame.pvd")] == pytest.approx([0.0, 0.15, 0.3])


@pytest.mark.parametrize("old, new, words", [
    ("[physics]", "[physic]", ["unknown table", "physic"]),
    ("limiter = \"mc\"", "limiter = \"mc\"\nlimitter = 1", ["unknown key", "limitter"]),
    ("Benchmark_2_Bathymetry.asc", "missing.asc", ["no such file", "missing.asc"]),
    ("mx = 16", "mx = \"16\"", ["[refinement] mx", "expected int"]),
    ("x = 4.521, y = 1.196", "x = 40.0, y = 1.196", ["ch5", "outside the domain"]),
    ("ntrees = [7, 4]", "ntrees = [7, 5]", ["square"]),
    ("max_level = 2 ", "max_level = 19 ", ["max_level"]),
    ("t_final = 0.3", "t_final = nan", ["t_final", "finite"]),
    ("x_upper = \"wall\"", "x_upper = \"open\"", ["x_upper", "'wall', 'extrap'"]),
    ("[run]", "[run]\nkind = \"fortran\"", ["kind", "fortran"]),
])
def test_bad_configs_are_one_line_and_exit_2(tmp_path, capsys, old, new, words):
    path = _small_config(tmp_path, **{old: new})
    out = tmp_path / "out"
    assert main(["run", "--config", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("forestpy run: error: --config"), err
    for w in words:
        assert w in err[0], err
    assert not out.exists()


def test_config_file_problems(tmp_path, capsys):
    assert main(["run", "--config", str(tmp_path / "none.toml")]) == 2
    (tmp_path / "bad.toml").write_text("[run\n")
    assert main(["run", "--config", str(tmp_path / "bad.toml")]) == 2
    assert main(["run", str(ROOT / "demos" / "radial_dam.py"), "--config", str(EXAMPLE)]) == 2
    assert main(["run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(e.startswith("forestpy run: error:") for e in err), err
    with pytest.raises(ConfigError, match="required"):
        (tmp_path / "empty.toml").write_text("[run]\nname = 'x'\n")
        read_config(tmp_path / "empty.toml")
