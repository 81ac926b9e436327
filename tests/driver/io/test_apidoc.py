"""docs/api.md is generated from the docstrings and kept current."""

import re

from testsupport import ROOT

from forestpy.io.apidoc import MODULES, main, render

API = ROOT / "docs" / "api.md"


def _entries(text):
    """The documented names (``### `module.name(`` headings), signatures left out: they
    print differently across Python versions."""
    return re.findall(r"^### `([\w.]+)", text, flags=re.M)


def test_api_reference_lists_every_public_name_of_the_code():
    rendered = render()
    assert _entries(API.read_text(encoding="utf-8")) == _entries(rendered), (
        "docs/api.md is out of date: python -m forestpy.io.apidoc docs/api.md")
    for module in MODULES:
        assert f"## `{module}`" in rendered
    names = _entries(rendered)
    assert "forestpy.Simulation" in names and "forestpy.subcycling.Subcycler" in names
    assert len(names) > 100


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "api.md"
    stale.write_text("# API reference\n")
    assert main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main([str(stale)]) == 0 and main(["--check", str(stale)]) == 0
    assert main([]) == 2
