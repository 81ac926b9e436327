"""What each pinned file of tests/regression/ holds, and how it is compared.

``CASES[name]``: the fixtures whose runs make the record (tests/demos/conftest.py),
the function that makes the record from them, and the comparison rules of
``testsupport.check_pinned`` where they differ from its default (steps, regrids and
patches per level exact, other numbers to rel 1e-9 / abs 1e-12).
"""

import math
from dataclasses import dataclass, field

import numpy as np
from forestpy.extensions.reference import sample, solve_radial_dam
from testsupport import NOT_COMPARED, Approx, patches_per_level


@dataclass
class Case:
    fixtures: tuple
    record: object
    spec: dict = field(default_factory=dict)


def _interior(sim):
    b = sim.mbc
    return sim.q[:, :, b:-b, b:-b]


def _l1(values, sim):
    return float(np.sum(np.abs(values) * (sim.geom.dx * sim.geom.dy)[:, None, None]))


def _counts(sim):
    return {"steps": sim.steps, "regrids": sim.regrids,
            "patches_per_level": patches_per_level(sim)}


def radial_dam_record(sim):
    r, h_ref, _ = solve_radial_dam(ncells=4000, t_final=sim.t)
    x, y = sim.geom.cell_centers(ghosts=False)
    err = _l1(_interior(sim)[:, 0] - sample(r, h_ref, np.hypot(x, y)), sim)
    return {**_counts(sim), "totals_final": sim.totals(), "norms": {"l1_depth_error": err}}


def swirl_record(sim, demo):
    x, y = sim.geom.cell_centers(ghosts=False)
    return {**_counts(sim), "totals_final": sim.totals(),
            "norms": {"l1_error": _l1(_interior(sim)[:, 0] - demo.exact(x, y), sim)}}


def euler_record(sim):
    rho = _interior(sim)[:, 0]
    return {**_counts(sim), "totals_final": sim.totals(),
            "norms": {"l1_density": _l1(rho, sim), "max_density": float(rho.max())}}


def bowl_record(bowl, hump, thacker_runs):
    thk, t_rec = thacker_runs["amr"]
    return {
        "hump": {**_counts(hump), "norms": {"volume": hump.totals()["h"], **{
            k: v for k, v in bowl.symmetry(hump).items()
            if k in ("ring_spread_max", "ring_spread_mean")}}},
        "thacker": {**_counts(thk), "norms": {
            "volume": thk.totals()["h"], "l1_depth_error": t_rec["l1_depth_error"],
            "shoreline_radius_0.5m": t_rec["shoreline_radius_0.5m"],
            "shoreline_radius_0.01m": t_rec["shoreline_radius_0.01m"]}},
    }


def dam_break_record(dam, runs):
    amr, _ = runs
    res = dam.flood_results(amr)
    return {**_counts(amr), "norms": {
        "volume": amr.totals()["h"], "flooded_area_m2": res["flooded_area_m2"],
        "max_depth_outside_reservoir": res["max_depth_outside_reservoir"],
        **{f"arrival_{k}": t for k, t in enumerate(res["axis_arrival_s"]) if t is not None}}}


def merewether_record(sim):
    peaks = sim.merewether["peaks"].results()["max_surface"]
    return {
        **_counts(sim),
        "volume_in_domain": sim.totals()["h"],
        "volume_injected": sim.geoclaw_sources.volume_added,
        "peak_stage": [None if math.isnan(p) else float(p) for p in peaks],
        "max_depth_sum": float(np.sum(sim.merewether["flood"].results()["max_depth"])),
    }


def okushiri_record(okushiri_report):
    sim, rep, _ = okushiri_report
    return {
        **_counts(sim),
        "totals_final": sim.totals(),
        "gauges": {g: {k: e[k] for k in ("rms", "peak_error", "peak_time_error")}
                   for g, e in rep["gauges"].items()},
        "runup": rep["runup"],
    }


CASES = {
    "radial_dam": Case(("radial_dam_run",), radial_dam_record),
    "advection_swirl": Case(("swirl_run", "swirl"), swirl_record),
    "euler_quadrants": Case(("euler_run",), euler_record),
    "bowl_radial": Case(("bowl", "hump_amr", "thacker_runs"), bowl_record),
    "dam_break_dem": Case(("dam", "dam_runs"), dam_break_record,
                          {"norms": Approx(same_keys=True, rel=1e-9, abs=1e-12)}),
    "merewether": Case(("merewether_coarse",), merewether_record, {
        "volume_in_domain": Approx(rel=1e-12),
        "volume_injected": NOT_COMPARED,  # checked against 19.7 m^3/s x 150 s in its test
        "peak_stage": Approx(abs=1e-6),
        "max_depth_sum": Approx(rel=1e-9)}),
    "okushiri": Case(("okushiri_report",), okushiri_record, {
        "totals_final": Approx(rel=1e-8, abs=1e-10),
        "gauges": Approx(rel=1e-6, abs=1e-9)}),
}
