"""The harbour demo (ship entering a harbour over variable depth) on a coarse grid:
volume ledger, dry land, the path, gauges, outputs."""

import json
import math

import numpy as np
import pytest
from testsupport import load_demo


@pytest.fixture(scope="module")
def harbour():
    return load_demo("boussinesq/harbour")


def test_geometry_and_path(harbour):
    h = harbour
    depth, x, y = h.bathymetry(10.0)
    X, Y = np.meshgrid(x, y)
    # coast, basin, breakwaters, entrance
    assert (depth[(X > 1100) | ((X > 800) & (Y < 240))] <= 0).all()
    assert np.allclose(depth[(X > 810) & (X < 1090) & (Y > 260) & (Y < 540)], 8.0)
    assert (depth[(np.abs(X - 650) < 5) & (Y > 260) & (Y < 350)] <= 0).all()
    assert (depth[(X > 600) & (X < 1000) & (np.abs(Y - 400) < 35)] > 0).all()
    assert depth[0, 0] > 13.5 and depth.min() == 0.0
    p = h.ShipPath(4.0, 150.0)
    # heading = direction of motion, speed = 4 m/s while cruising, rest at the berth
    for t in (10.0, 60.0, 120.0, 180.0):
        x0, y0, hd = p(t)
        x1, y1, _ = p(t + 0.05)
        assert math.hypot(x1 - x0, y1 - y0) / 0.05 == pytest.approx(4.0, rel=1e-3)
        assert math.atan2(y1 - y0, x1 - x0) == pytest.approx(hd, abs=2e-3)
    assert p(0.0)[:2] == (150.0, 150.0)
    assert p(p.t_arrival + 10.0)[:2] == pytest.approx(h.BERTH)
    assert p(60.0)[2] > 0.3 and p(200.0)[2] == 0.0  # turns to the east
    with pytest.raises(ValueError, match="stop_distance"):
        h.ShipPath(4.0, 5000.0)
    with pytest.raises(KeyError, match="unknown option"):
        h.setup(dxx=3.0)


def test_coarse_harbour_run(harbour, tmp_path):
    h = harbour
    res = h.main(out=tmp_path, dx=20.0, t_final=140.0)
    # the fluxes conserve sum(zeta): volume + sponge-removed volume = 0 at every frame
    assert res["volume_ledger_rel"] < 1e-12
    assert abs(res["sponge_removed_m3"]) > 1e3 * res["volume_ledger_max_abs_m3"]
    assert res["land_max_abs_zeta"] == 0.0  # walls: land stays dry
    assert 2 <= res["cg_iterations_max"] <= 12
    hs = res["gauge_wave_height_m"]
    assert set(hs) == set(h.GAUGES)
    # the ship's waves reached the offshore gauge; wave heights ~ cm for 0.2 m of head
    assert 1e-3 < hs["sea"] < 0.2 and all(np.isfinite(v) for v in hs.values())
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == res["steps"]
    g = np.load(tmp_path / "gauges.npz")
    assert g["zeta"].shape == (res["steps"], len(h.GAUGES))
    assert np.ptp(g["zeta"][:, 0]) == pytest.approx(hs["sea"])


@pytest.mark.parametrize("bad", [{"speed": -1.0}, {"tol": 0.0}, {"rrb_level": 1},
                                 {"backend": "tpu"}])
def test_options_are_typed_and_checked(harbour, bad):
    from forestpy.options import OptionError

    with pytest.raises(OptionError, match=next(iter(bad))):
        harbour.setup(**bad)
    with pytest.raises(KeyError, match="sped"):
        harbour.setup(sped=3.0)
