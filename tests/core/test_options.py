"""Typed demo options: checks, parsing from the command line, the options table."""


import pytest
from testsupport import ROOT

from forestpy.cli import main
from forestpy.options import (
    Option,
    OptionError,
    describe_options,
    merge_options,
    option_defaults,
    parse_value,
    standard_options,
)

DEMO = ROOT / "demos" / "radial_dam.py"

SPEC = dict(
    level=Option(3, "finest level", min=0, max=10),
    cfl=Option(0.9, "Courant number", min=0.0, max=1.0, min_inclusive=False),
    solver=Option("roe", "Riemann solver", choices=("roe", "hlle")),
    dt=Option(None, "first step", type=float, min=0.0),
    plain=2.5,
)


def test_merge_checks_types_ranges_and_choices():
    o = merge_options(SPEC, dict(level=5, cfl=1, dt=None))
    assert o == dict(level=5, cfl=1.0, solver="roe", dt=None, plain=2.5)
    assert isinstance(o["cfl"], float)  # an int is widened for a float option
    for bad, match in [
        (dict(level=11), "'level' must be >= 0 and <= 10, got 11"),
        (dict(level=2.5), "'level' expects int"),
        (dict(level=True), "'level' expects int"),
        (dict(cfl=0.0), "'cfl' must be > 0.0"),
        (dict(solver="exact"), "'solver' must be one of"),
        (dict(dt=-1.0), "'dt' must be >= 0.0"),
    ]:
        with pytest.raises(OptionError, match=match):
            merge_options(SPEC, bad)
    with pytest.raises(KeyError, match=r"unknown option\(s\) \['levle'\].*valid"):
        merge_options(SPEC, dict(levle=2))


def test_parse_value_uses_the_option_type():
    assert parse_value("4", SPEC["level"], "level") == 4
    assert parse_value("1", SPEC["cfl"], "cfl") == 1.0
    assert parse_value("0.5", SPEC["dt"], "dt") == 0.5
    assert parse_value("none", SPEC["dt"], "dt") is None
    with pytest.raises(OptionError, match="'level' must be"):
        parse_value("12", SPEC["level"], "level")
    with pytest.raises(ValueError, match="expected an integer"):
        parse_value("four", SPEC["level"], "level")


def test_bad_defaults_are_caught_when_the_option_is_declared():
    with pytest.raises(OptionError, match="default"):
        Option(2, "x", choices=(0, 1))


def test_describe_lists_every_option_with_default_and_doc():
    options = {**standard_options(), **SPEC}
    table = describe_options(options, "title")
    lines = table.splitlines()
    assert lines[0] == "title" and len(lines) == 2 + len(options)
    assert any(line.split()[:3] == ["cfl", "float", "0.9"] for line in lines)
    assert "one of roe, hlle" in table and "Riemann solver" in table
    assert option_defaults(SPEC)["plain"] == 2.5


def test_cli_help_options_and_bad_sets(capsys):
    assert main(["run", str(DEMO), "--help-options"]) == 0
    out = capsys.readouterr().out
    assert "max_level" in out and "Riemann solver" in out and "one of cpu, gpu" in out
    for item, match in [
        ("cfl=1.5", "option 'cfl' must be > 0.0 and <= 1.0, got 1.5"),
        ("solver=exact", "option 'solver' must be one of ['roe', 'hlle']"),
        ("max_level=abc", "expected an integer, got 'abc'"),
        ("max_levl=3", "unknown option 'max_levl'"),
    ]:
        assert main(["run", str(DEMO), "--set", item, "--out", "/nonexistent/x"]) == 2
        err = capsys.readouterr().err
        assert match in err and "Traceback" not in err
    assert main(["run", str(DEMO), "--backend", "tpu"]) == 2


def test_nan_and_infinity_are_refused():
    spec = dict(**SPEC, top=Option(1.0, "may be infinite", min=0.0, allow_inf=True),
                pair=Option((0.0, 1.0), "two numbers"))
    for bad, match in [
        (dict(cfl=float("nan")), "'cfl' may not be NaN"),
        (dict(dt=float("nan")), "'dt' may not be NaN"),  # only a min: NaN < 0 is false
        (dict(dt=float("inf")), "'dt' must be finite"),
        (dict(top=float("nan")), "'top' may not be NaN"),
        (dict(pair=(0.0, float("nan"))), "'pair' may not be NaN"),
        (dict(pair=[float("-inf"), 1.0]), "'pair' must be finite"),
    ]:
        with pytest.raises(OptionError, match=match):
            merge_options(spec, bad)
    assert merge_options(spec, dict(top=float("inf")))["top"] == float("inf")
    with pytest.raises(OptionError, match="'x' may not be NaN"):
        Option(None, "untyped").check("x", float("nan"))


def test_standard_constraints():
    std = standard_options()
    for bad, match in [
        (dict(mx=6), "'mx' must be a multiple of 4, got 6"),
        (dict(max_level=19), "'max_level' must be >= 0 and <= 18"),  # the forest's limit
        (dict(min_level=19), "'min_level' must be >= 0 and <= 18"),
        (dict(min_level=3, max_level=2), r"'max_level' must be >= min_level \(3\), got 2"),
        (dict(t_final=float("inf")), "'t_final' must be finite"),
        (dict(refine_threshold=float("nan")), "'refine_threshold' may not be NaN"),
    ]:
        with pytest.raises(OptionError, match=match):
            merge_options(std, bad)
    assert merge_options(std, dict(min_level=3, max_level=3, mx=12))["mx"] == 12


@pytest.mark.parametrize("sets", [
    ["cfl=nan"], ["t_final=nan"], ["t_final=inf"], ["refine_threshold=nan"],
    ["max_level=19"], ["mx=6"], ["min_level=3", "max_level=2"],
])
def test_cli_refuses_before_writing(sets, tmp_path, capsys):
    out = tmp_path / "new" / "out"
    args = [a for s in sets for a in ("--set", s)]
    assert main(["run", str(DEMO), *args, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "new").exists()  # nothing written, no folder made


def test_simulation_refuses_nan_and_infinite_times():
    from forestpy import Simulation
    from forestpy.indicators import indicator_undivided_difference, threshold_tagging

    for bad, match in [(dict(t_final=float("inf")), "finite t_final"),
                       (dict(t_final=float("nan")), "finite t_final"),
                       (dict(dt_max=float("nan")), "dt_max > 0"),
                       (dict(dt_initial=float("inf")), "finite dt_initial")]:
        with pytest.raises(ValueError, match=match):
            Simulation("shallow_roe", qinit=lambda x, y: None, **bad)
    with pytest.raises(ValueError, match="refine_threshold may not be NaN"):
        threshold_tagging(indicator_undivided_difference(0), float("nan"), None)
    with pytest.raises(ValueError, match="coarsen_threshold may not be NaN"):
        threshold_tagging(indicator_undivided_difference(0), 0.1, float("nan"))
