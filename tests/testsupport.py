"""Helpers shared by the test folders (plain functions; the fixtures are in conftest.py).

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml), so any test module, and
the MPI scripts, import this as ``testsupport``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DEMOS = ROOT / "demos"
REGRESSION = TESTS / "regression"
REGEN = os.environ.get("FORESTPY_REGEN") == "1"


def load_demo(name: str):
    """Import ``demos/<name>.py`` as a module (demos are scripts, not a package)."""
    path = DEMOS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"demo_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def demo_fixture(name: str):
    """A session fixture returning ``load_demo(name)``."""

    @pytest.fixture(scope="session")
    def fixture():
        return load_demo(name)

    fixture.__doc__ = f"demos/{name}.py"
    return fixture


# --------------------------------------------------------------------------------------
# pinned values (tests/regression/<name>.json)
# --------------------------------------------------------------------------------------

EXACT = "exact"
NOT_COMPARED = "not compared"


class Approx:
    """``pytest.approx(**kwargs)`` on every number below a pinned key: a dict is compared
    over the pinned file's keys (with ``same_keys``, also the set of keys), a list item
    by item (``None`` where the pinned value is ``None``)."""

    def __init__(self, same_keys=False, **approx):
        self.same_keys, self.approx = same_keys, approx

    def check(self, got, want, where):
        if isinstance(want, dict):
            if self.same_keys:
                assert set(got) == set(want), where
            for k, v in want.items():
                self.check(got[k], v, (*where, k))
        elif isinstance(want, list):
            for k, (g, w) in enumerate(zip(got, want)):
                self.check(g, w, (*where, k))
        elif want is None:
            assert got is None, where
        else:
            assert got == pytest.approx(want, **self.approx), where


DEFAULT = Approx(rel=1e-9, abs=1e-12)
COUNTS = ("steps", "regrids", "patches_per_level")


def patches_per_level(sim) -> dict:
    return {str(k): v for k, v in sim.patches_per_level().items()}


def check_pinned(name: str, record: dict, spec: dict | None = None):
    """Compare ``record`` with ``tests/regression/<name>.json``.

    Every key of the pinned file is compared: ``spec`` maps a key (``"case/key"`` one
    level down) to ``EXACT`` (``==``), an ``Approx`` or ``NOT_COMPARED``; a key not in
    it is exact if it is one of ``COUNTS`` (steps, regrids, patches per level), else a
    dict is compared key by key by the same rules, a number or list by ``DEFAULT``
    (``pytest.approx`` with rel 1e-9, abs 1e-12).  With
    ``FORESTPY_REGEN=1`` the file is written from ``record`` and the test skips.
    """
    path = REGRESSION / f"{name}.json"
    if REGEN:
        path.write_text(json.dumps(record, indent=2) + "\n")
        pytest.skip(f"regenerated {path.name}")
    expected = json.loads(path.read_text())
    _check_level(record, expected, spec or {}, ())


def _check_level(got, want, spec, where):
    for key, value in want.items():
        path = "/".join((*where, key))
        rule = spec.get(path)
        if rule is None and key in COUNTS:
            rule = EXACT
        if rule is None and isinstance(value, dict):
            _check_level(got[key], value, spec, (*where, key))
        elif rule == EXACT:
            assert got[key] == value, path
        elif rule != NOT_COMPARED:
            (rule or DEFAULT).check(got[key], value, (path,))


# --------------------------------------------------------------------------------------
# demo files for the command line
# --------------------------------------------------------------------------------------


def demo_file(folder: Path, body: str, name="bad_demo.py") -> Path:
    """A tiny shallow-water demo whose ``qinit``/``src2`` come from ``body``."""
    text = textwrap.dedent(
        """
        import numpy as np
        from forestpy import Domain, Simulation
        from forestpy.options import merge_options

        OPTIONS = dict(mx=8, level=2, t_final=0.05, backend="cpu")

        def qinit(x, y):
            return np.stack([np.ones_like(x), np.zeros_like(x), np.zeros_like(x)])

        src2 = None
        """
    ) + textwrap.dedent(body) + textwrap.dedent(
        """
        def setup(**overrides):
            o = merge_options(OPTIONS, overrides, "bad_demo")
            return Simulation("shallow_roe", qinit=qinit, domain=Domain((-1, -1), (1, 1)),
                              bc="wall", params={"grav": 1.0}, mx=o["mx"],
                              min_level=o["level"], max_level=o["level"], src2=src2,
                              t_final=o["t_final"], backend=o["backend"], name="bad_demo")
        """
    )
    path = Path(folder) / name
    path.write_text(text)
    return path


def mpirun() -> str | None:
    """The launcher beside this Python (the mpich wheel's), else the one on PATH;
    ``FORESTPY_MPIRUN`` names it where another MPI's mpirun comes first on PATH."""
    return os.environ.get("FORESTPY_MPIRUN") or shutil.which(
        "mpirun", path=str(Path(sys.executable).parent)) or shutil.which("mpirun")


# --------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------
def record_figures(monkeypatch) -> list[dict]:
    """Record what every map of the project is decorated with (forestpy.io.plot's
    ``decorate``: title, axis titles, note; ``colour_bar``: the bar's title; the line
    charts' titles) while still drawing it; returns the list the records go to."""
    import forestpy.io.plot as plot

    records: list[dict] = []
    decorate, colour_bar, line_chart = plot.decorate, plot.colour_bar, plot.line_chart

    def rec_decorate(plotter, **kw):
        records.append({"kind": "map", **kw})
        return decorate(plotter, **kw)

    def rec_bar(title):
        records.append({"kind": "bar", "title": title})
        return colour_bar(title)

    def rec_chart(**kw):
        records.append({"kind": "chart", **kw})
        return line_chart(**kw)

    monkeypatch.setattr(plot, "decorate", rec_decorate)
    monkeypatch.setattr(plot, "colour_bar", rec_bar)
    monkeypatch.setattr(plot, "line_chart", rec_chart)
    return records


def check_figure(records, *, units=("m",), time=True, clipped=None):
    """Every map recorded has axis titles with a unit, a title with the time; every
    colour bar a unit; ``clipped``: whether some map says its colour range is clipped."""
    maps = [r for r in records if r["kind"] == "map"]
    assert maps, "no map drawn"
    for r in maps + [r for r in records if r["kind"] == "chart"]:
        assert any(f"({u}" in r["xlabel"] or f"{u})" in r["xlabel"] for u in units), r
        assert any(f"({u}" in r["ylabel"] or f"{u})" in r["ylabel"] for u in units), r
        if time:
            assert "t = " in r["title"], r
    for r in records:
        if r["kind"] == "bar":
            assert r["title"].endswith(")") and " (" in r["title"], r
    if clipped is not None:
        assert any("colour range clipped" in (r.get("note") or "") for r in maps) == clipped


# Compiling CUDA kernels for the device without a GPU: a child process with the simulator
# off, where Numba's NVVM compiles for compute capability 9.0 (PTX; ptxas assembles it
# where installed).  The simulator runs kernels as Python and cannot see what only the
# real compiler finds (a typing error, spills, a missing intrinsic).
NVVM_PREAMBLE = r'''
import sys, types
import numba.cuda.dispatcher as disp
try:
    from numba.cuda.cudadrv import nvvm
    nvvm.NVVM()
except Exception as e:  # no libNVVM: nothing to compile with
    print(repr(e))
    sys.exit(77)
# device functions ask the current device for its compute capability: there is none
disp.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
'''


def compile_for_device(script: str, *, preamble: bool = True, timeout: float = 600,
                       cwd=None) -> str:
    """Run ``script`` (after :data:`NVVM_PREAMBLE` unless ``preamble`` is false) in a
    child process with the CUDA simulator off; skip the test when the child exits with
    77 (no compiler), fail on any other non-zero exit; return the child's stdout."""
    import subprocess

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    code = (NVVM_PREAMBLE if preamble else "") + script
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=timeout, cwd=cwd)
    if r.returncode == 77:
        pytest.skip(f"no device compiler: {r.stdout.strip()[:200]}")
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout
