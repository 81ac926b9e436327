"""Regrids that keep the work where the patches live: one-pass regrid criteria (the
flags of the two tagging slots, computed on the backend), one number crossing to the
host when a tagging pass changes nothing, ``setaux`` only for the new patches.

The GPU backend runs in Numba's CUDA simulator here (tests/conftest.py): tiny cases.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from forestpy.extensions.geoclaw.refinement import GeoClawRefinement, Region

from forestpy import Domain, Simulation
from forestpy.backend import CPUBackend, GPUBackend
from forestpy.forest import Brick, Forest
from forestpy.indicators import ThresholdFlags, indicator_undivided_difference
from forestpy.patches import PatchGeometry
from forestpy.patches.tagging import TaggedPatches

if not numba.config.ENABLE_CUDASIM:
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no GPU and the CUDA simulator is off", allow_module_level=True)

BACKENDS = ["cpu", "gpu"]


def backend_of(name):
    return CPUBackend() if name == "cpu" else GPUBackend()


def tiny_patches(backend, mx=4, mbc=2, seed=0):
    """An adaptive forest of levels 1 and 2 with its geometry, as a criterion sees it."""
    f = Forest.new(Brick(), 1)
    f = f.refine(np.arange(f.n) == np.random.default_rng(seed).integers(f.n)).balance()
    geom = PatchGeometry.from_forest(f, mx, mx, mbc)
    return TaggedPatches(geom, backend.to_device(geom.level), backend)


def bits_of(tag, coarsen, q, aux, geom, t):
    """The criterion bits the two slots give (the reference)."""
    bits = np.asarray(tag(q, aux, geom, t)).astype(np.uint8)
    return bits | (np.asarray(coarsen(q, aux, geom, t)).astype(np.uint8) << 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_threshold_flags_are_the_two_slots_flags(backend):
    be = backend_of(backend)
    patches = tiny_patches(be)
    geom = patches.geom
    rng = np.random.default_rng(3)
    amplitude = np.resize([0.0, 0.015, 1.0], geom.npatch)[:, None, None]  # each case
    q = np.stack([1.0 + amplitude * rng.random((geom.npatch,) + geom.shape),
                  rng.standard_normal((geom.npatch,) + geom.shape)], axis=1)
    criterion = ThresholdFlags(indicator_undivided_difference(0), 0.02, 0.01)
    want = bits_of(criterion.tag4refinement, criterion.tag4coarsening, q, None, geom, 0.0)
    assert set(want.tolist()) >= {0, 1, 2}  # every case met
    got = be.to_host(criterion(be.to_device(q), None, patches, 0.0))
    np.testing.assert_array_equal(got, want)

    def spread(q, aux, geom, t):  # any other indicator: called once, compared on its backend
        core = q[:, 0, geom.mbc:-geom.mbc, geom.mbc:-geom.mbc]
        return core.max(axis=(1, 2)) - core.min(axis=(1, 2))

    generic = ThresholdFlags(spread, 0.02, 0.01)
    want = bits_of(generic.tag4refinement, generic.tag4coarsening, q, None, geom, 0.0)
    got = be.to_host(generic(be.to_device(q), None, patches, 0.0))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_geoclaw_flags_are_the_tag_and_coarsen_flags(backend):
    """Every criterion (wave, depth, shoreline, speed per level, topography, regions in
    and out of their time windows) in one pass gives the flags of tag and coarsen."""
    be = backend_of(backend)
    patches = tiny_patches(be, mx=4, seed=1)
    geom = patches.geom
    rng = np.random.default_rng(5)
    shape = (geom.npatch,) + geom.shape
    rough = np.resize([0.0, 1.0, 1.0], geom.npatch)[:, None, None]  # calm patches too
    bottom = -1.0 + rough * 1.2 * rng.random(shape) ** 3
    h = np.maximum(0.0, rough * 0.05 * rng.standard_normal(shape) - bottom)
    u, v = (rough * rng.standard_normal(shape) for _ in range(2))
    q = np.stack([h, h * u, h * v], axis=1)
    aux = bottom[:, None]
    ref = GeoClawRefinement(
        wave_tolerance=0.05, depth_tolerance=0.3, speed_tolerance=[1.5, 0.8],
        topo_tolerance=0.5, topo_until=0.5, shoreline=True,
        regions=[Region(0.0, 0.3, 0.0, 0.3, min_level=2, t2=1.0),
                 Region(0.5, 1.0, 0.5, 1.0, max_level=1, t1=0.2)])
    qd, auxd = be.to_device(q), be.to_device(aux)
    seen = set()
    for t in (0.0, 0.3, 2.0):  # topography on/off, the regions' windows
        want = bits_of(ref.tag, ref.coarsen, q, aux, geom, t)
        got = be.to_host(ref(qd, auxd, patches, t))
        np.testing.assert_array_equal(got, want)
        seen |= set(want.tolist())
    assert {1, 2} <= seen
    assert ref.reads_ghosts(0.0) and not ref.reads_ghosts(2.0)


def calm(x, y):
    return np.stack([1.0 + 0 * x, 0 * x, 0 * x])


def bump(x, y):
    h = 1.0 + 0.5 * np.exp(-80.0 * ((x - 0.3) ** 2 + (y - 0.3) ** 2))
    return np.stack([h, 0 * x, 0 * x])


def two_levels(backend, qinit, **kw):
    return Simulation("shallow_roe", qinit=qinit, domain=Domain((0, 0), (1, 1)), bc="wall",
                      mx=4, min_level=1, max_level=2, refine_threshold=0.02,
                      params={"grav": 1.0}, backend=backend, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tagging_pass_that_changes_nothing_moves_one_number(backend):
    """Nothing to refine or coarsen: one host transfer (the device's answer), no flags;
    a pass that refines moves the flags too."""
    sim = two_levels(backend, calm)
    before = sim.backend.host_transfers
    assert not sim.regrid()
    assert sim.backend.host_transfers - before == 1
    sim = two_levels(backend, bump)
    assert sim.geom.level.max() == 2
    for k, value in enumerate(np.asarray(calm(0.0, 0.0), dtype=float)):
        sim.q[:, k] = float(value)  # host values into a device array: as scalars
    before = sim.backend.host_transfers
    assert sim.regrid()  # every fine family coarsens
    assert sim.geom.level.max() == 1
    # the count, the flags, then on the GPU the plans' records (ghost plan: entry counts
    # and balance check; time sync: entry counts)
    assert sim.backend.host_transfers - before == (5 if backend == "gpu" else 2)


def test_family_test_sees_only_whole_families():
    """A coarsening flag on three of four siblings cannot change the forest: no flags
    fetched; all four can."""
    from forestpy.forest.quadrants import family_starts
    from forestpy.patches.tagging import regrid_flags

    be = CPUBackend()
    f = Forest.new(Brick(), 1).refine(np.array([True, False, False, False]))
    level = f.level.astype(np.int64)
    fam = family_starts(f.tree, f.level, f.x, f.y).astype(np.uint8)
    bits = np.zeros(f.n, dtype=np.uint8)
    bits[:3] = 2
    _, change = regrid_flags(bits, level, fam, 2, 0, 1, be)
    assert int(change) == 0
    bits[3] = 2
    flags, change = regrid_flags(bits, level, fam, 2, 0, 1, be)
    assert int(change) == 1 and flags[:4].tolist() == [2] * 4
    # without families (a share of the patches) every coarsening flag counts
    bits[3] = 0
    _, change = regrid_flags(bits, level, np.zeros(0, dtype=np.uint8), 2, 0, 1, be)
    assert int(change) == 3


def test_setaux_runs_on_the_new_patches_only():
    """A regrid calls setaux on the refined and coarsened patches alone; the aux of every
    patch is bitwise what setaux on all of them gives."""
    calls = []

    def setaux(x, y, dx, dy):
        calls.append(x.shape[0])
        return np.stack([1.0 + 0.3 * np.sin(3 * x) + dx, -0.5 + 0.2 * y - dy])

    def qinit(x, y):
        return bump(x, y)[:1]

    sim = Simulation("advection_variable", qinit=qinit, domain=Domain((0, 0), (1, 1)),
                     bc="extrap", mx=4, min_level=1, max_level=2, refine_threshold=0.02,
                     setaux=setaux, regrid_interval=1)
    calls.clear()
    sim.run(t_final=0.3)
    assert sim.regrids > 0 and calls
    assert max(calls) < sim.geom.npatch  # never the whole forest
    np.testing.assert_array_equal(sim.aux_setaux, sim._make_aux())


def test_gpu_centres_are_made_on_the_device_as_on_the_host():
    sim = two_levels("gpu", bump)
    x, y = sim.centers
    xh, yh = sim.centers_host
    np.testing.assert_array_equal(sim.backend.to_host(x), xh, strict=True)
    np.testing.assert_array_equal(sim.backend.to_host(y), yh, strict=True)


def test_flags_that_changed_nothing_stay_on_the_device_next_time():
    """Coarsening flags that the 2:1 balance undoes: the first pass fetches them and
    finds no change; a pass with the same flags on the same forest moves one record."""

    class Criterion:
        def __init__(self):
            self.default = ThresholdFlags(indicator_undivided_difference(0), 0.02, None)
            self.coarsen_level = None

        def __call__(self, q, aux, patches, t):
            if self.coarsen_level is None:
                return self.default(q, aux, patches, t)
            return (patches.level == self.coarsen_level).astype(np.uint8) * 2

    criterion = Criterion()
    sim = Simulation("shallow_roe", qinit=bump, domain=Domain((0, 0), (1, 1)), bc="wall",
                     mx=4, min_level=1, max_level=3, refine_threshold=0.02,
                     params={"grav": 1.0}, regrid_flags=criterion)
    assert {2, 3} <= set(sim.patches_per_level())
    criterion.coarsen_level = 2
    for _ in range(4):  # the families that can coarsen do
        before = sim.backend.host_transfers
        if not sim.regrid():
            break
    assert sim.backend.host_transfers - before == 2  # the record, then the flags
    forest = sim.forest
    before = sim.backend.host_transfers
    assert not sim.regrid()
    assert sim.backend.host_transfers - before == 1 and sim.forest is forest
