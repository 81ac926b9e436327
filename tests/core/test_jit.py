"""CompileWatch: a notice before Numba compiles, the compilation time apart."""

import io

import numba
import pytest

from forestpy.jit import CompileWatch
from forestpy.timers import Timers


def _fresh():
    """A new function each call: Numba must compile it (no disk cache)."""
    return numba.njit(lambda x: x * 2 + 1)


def test_notice_once_per_label_before_compiling():
    stream = io.StringIO()
    timers = Timers()
    with CompileWatch(stream, label="shallow_roe", timers=timers) as watch:
        f = _fresh()
        seen = []
        real = watch.on_start

        def on_start(event):  # the notice is out when the compilation begins
            real(event)
            seen.append(stream.getvalue())

        watch.on_start = on_start
        with timers("startup"):
            assert f(2) == 5
        assert f(3) == 7  # compiled already: no event
        _fresh()(1)  # another compilation, same label: no second notice
        watch.label = "the demo"
        with timers("regrid"):
            _fresh()(1)
    assert seen[0].startswith("forestpy: compiling kernels for shallow_roe")
    lines = stream.getvalue().splitlines()
    assert lines == [
        "forestpy: compiling kernels for shallow_roe (first run on this machine; cached for "
        "later runs) ...",
        "forestpy: compiling kernels for the demo (first run on this machine; cached for "
        "later runs) ...",
    ]
    assert watch.count == 3 and watch.seconds > 0
    # charged to the phase that was open: startup, none ("other"), regrid
    assert set(timers.compiled) == {"startup", "other", "regrid"}
    assert timers.compile_s == pytest.approx(watch.seconds)
    assert timers.compiled["startup"] <= timers.seconds["startup"]
    # uninstalled: a compilation now is not seen
    _fresh()(1)
    assert watch.count == 3


def test_report_and_dict_show_compilation():
    timers = Timers()
    with timers("startup"):
        timers.add_compile(1.5)
    timers.add_compile(0.5)
    text = timers.report(4.0)
    assert "of which compiling" in text and "2.000" in text and "startup 1.5 s" in text
    assert timers.as_dict(4.0)["compile"] == {"startup": 1.5, "other": 0.5}
    assert "compiling" not in Timers().report(1.0)


def test_summary_rate_leaves_compilation_out(radial_dam):
    sim = radial_dam.setup(mx=8, min_level=2, max_level=2, t_final=0.02)
    sim.run()
    plain = sim.summary()
    sim.timers.compiled["regrid"] = 0.5 * (plain["wall_s"] - plain["startup_s"])
    with_compile = sim.summary()
    assert with_compile["compile_s"] == sim.timers.compiled["regrid"]
    assert with_compile["cell_updates_per_s"] == pytest.approx(2 * plain["cell_updates_per_s"])
