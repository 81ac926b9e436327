"""Regression of every demo on error norms, totals and AMR counts.

The pinned values live in ``tests/regression/<demo>.json``.  After an intended change
of results, regenerate them with ``FORESTPY_REGEN=1 pytest tests/demos/test_regression.py``
and say why in the commit message.
"""

import json
import os

import numpy as np
import pytest
from forestpy.extensions.reference import sample, solve_radial_dam
from testsupport import REGRESSION

HERE = REGRESSION
REGEN = os.environ.get("FORESTPY_REGEN") == "1"


def interior(sim):
    b = sim.mbc
    return sim.q[:, :, b:-b, b:-b]


def l1(values, sim):
    return float(np.sum(np.abs(values) * (sim.geom.dx * sim.geom.dy)[:, None, None]))


def radial_dam_record(demo):
    sim = demo.setup(mx=8, min_level=2, max_level=4, t_final=0.5).run()
    r, h_ref, _ = solve_radial_dam(ncells=4000, t_final=sim.t)
    x, y = sim.geom.cell_centers(ghosts=False)
    err = l1(interior(sim)[:, 0] - sample(r, h_ref, np.hypot(x, y)), sim)
    return sim, {"l1_depth_error": err}


def swirl_record(demo):
    sim = demo.setup(mx=8, min_level=2, max_level=4, refine_threshold=0.05).run()
    x, y = sim.geom.cell_centers(ghosts=False)
    return sim, {"l1_error": l1(interior(sim)[:, 0] - demo.exact(x, y), sim)}


def euler_record(demo):
    sim = demo.setup(mx=8, min_level=2, max_level=4, t_final=0.3).run()
    rho = interior(sim)[:, 0]
    return sim, {"l1_density": l1(rho, sim), "max_density": float(rho.max())}


CASES = {"radial_dam": radial_dam_record, "advection_swirl": swirl_record,
         "euler_quadrants": euler_record}


@pytest.mark.parametrize("name", sorted(CASES))
def test_demo_regression(name, request):
    demo = request.getfixturevalue({"radial_dam": "radial_dam", "advection_swirl": "swirl",
                                    "euler_quadrants": "euler_quadrants"}[name])
    sim, norms = CASES[name](demo)
    record = {
        "steps": sim.steps,
        "regrids": sim.regrids,
        "patches_per_level": {str(k): v for k, v in sim.patches_per_level().items()},
        "totals_final": sim.totals(),
        "norms": norms,
    }
    path = HERE / f"{name}.json"
    if REGEN:
        path.write_text(json.dumps(record, indent=2) + "\n")
        pytest.skip(f"regenerated {path.name}")
    expected = json.loads(path.read_text())
    assert record["steps"] == expected["steps"]
    assert record["regrids"] == expected["regrids"]
    assert record["patches_per_level"] == expected["patches_per_level"]
    for group in ("totals_final", "norms"):
        for key, value in expected[group].items():
            assert record[group][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (group, key)
