"""The demo modules and the runs that more than one test checks: each demo's own tests
(test_demo_*.py) and the pinned values (test_regression.py) share one run."""

import pytest
from testsupport import demo_fixture

bowl = demo_fixture("geoclaw/bowl_radial")
dam = demo_fixture("geoclaw/dam_break_dem")
merewether = demo_fixture("geoclaw/merewether")
okushiri = demo_fixture("geoclaw/okushiri")


# --------------------------------------------------------------------------------------
# the runs
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def radial_dam_run(radial_dam):
    return radial_dam.setup(mx=8, min_level=2, max_level=4, t_final=0.5).run()


@pytest.fixture(scope="session")
def swirl_run(swirl):
    return swirl.setup(mx=8, min_level=2, max_level=4, refine_threshold=0.05).run()


@pytest.fixture(scope="session")
def euler_run(euler_quadrants):
    return euler_quadrants.setup(mx=8, min_level=2, max_level=4, t_final=0.3).run()


@pytest.fixture(scope="session")
def thacker_runs(bowl):
    """Thacker to half a period (the largest runup): uniform grids of 32^2, 64^2 and
    128^2 cells, and an adaptive grid with levels 2-4 (finest as the last uniform)."""
    half = bowl.Thacker(0.1).period / 2
    runs = {}
    for name, lo, hi in (("L2", 2, 2), ("L3", 3, 3), ("L4", 4, 4), ("amr", 2, 4)):
        sim = bowl.setup(case="thacker", min_level=lo, max_level=hi, t_final=half).run()
        runs[name] = (sim, bowl.thacker_errors(sim, bowl.Thacker(0.1)))
    return runs


@pytest.fixture(scope="session")
def hump_amr(bowl):
    """The hump on levels 2-4 until it has run up the shore."""
    return bowl.setup(min_level=2, max_level=4, t_final=5.0).run()


@pytest.fixture(scope="session")
def dam_runs(dam):
    """The coarse flood (240 s) on an adaptive grid (levels 1-2, 40 m and 20 m) and on
    the uniform level-2 grid."""
    amr = dam.setup(min_level=1, max_level=2, t_final=240.0).run()
    uni = dam.setup(min_level=2, max_level=2, t_final=240.0).run()
    return amr, uni


MEREWETHER_COARSE = dict(mx=4, min_level=0, max_level=1, t_final=150.0, boundary="wall",
                         fgmax_spacing=4.0, fgmax_every=5)


@pytest.fixture(scope="session")
def merewether_coarse(merewether):
    """8 m / 4 m AMR, 150 s, walls on all sides."""
    return merewether.setup(**MEREWETHER_COARSE).run()


@pytest.fixture(scope="session")
def okushiri_reduced(okushiri):
    """Finest cells 0.112 m instead of 0.014, three levels, to 22.5 s."""
    return okushiri.setup(dx_finest=0.112, mx=4, max_level=2).run()


@pytest.fixture(scope="session")
def okushiri_report(okushiri, okushiri_reduced, tmp_path_factory):
    """(the reduced run, its report without the picture, the report's folder)."""
    out = tmp_path_factory.mktemp("okushiri_report")
    return okushiri_reduced, okushiri.report(okushiri_reduced, out, plot=False), out
