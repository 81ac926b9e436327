"""Gauges and fgmax sampled on the backend: points located once per forest, samples
kept in a device buffer, fgmax maxima folded in place; the same series and maxima as
``Simulation.sample`` read step by step, and no host transfer per step on the GPU
backend (run in Numba's CUDA simulator, tiny)."""

from __future__ import annotations

import functools

import numba
import numpy as np
import pytest
from forestpy.extensions.geoclaw.fgmax import FGMax

import forestpy.callbacks
from forestpy.callbacks import Gauges
from forestpy.patches.point_samples import PointCells, SampleRows

POINTS = {"centre": (0.05, 0.02), "ring": (0.55, 0.1), 7: (-0.3, 0.4), "edge": (2.4, -2.4)}
FIELDS = ["h", "speed", "velocity_x", "surface", "hu"]


class _SampleEveryStep:
    """Today's reading, the reference: ``sim.sample`` (a forest search) every step, the
    derived fields computed as ``Gauges.record`` computed them on each sample."""

    def __init__(self, points):
        self.x, self.y = np.array(list(points.values()), dtype=np.float64).T
        self.q, self.aux, self.t, self.forests = [], [], [], []

    def on_start(self, sim):
        self.on_step(sim)

    def on_step(self, sim):
        q, aux = sim.sample(self.x, self.y, aux=True)
        self.q.append(q)
        self.aux.append(aux)
        self.t.append(sim.t)
        if not self.forests or self.forests[-1] is not sim.forest:
            self.forests.append(sim.forest)

    def series(self, sim, names):
        derived = sim.riemann.derived_fields
        out = []
        for q, aux in zip(self.q, self.aux):
            qd, auxd = q.T[None, :, None, :], aux.T[None, :, None, :]
            row = [np.asarray(derived[n](qd, auxd, np.asarray(sim.params)))[0, 0]
                   if n in derived else q[:, sim.riemann.field_names.index(n)]
                   for n in names]
            out.append(np.stack(row, axis=1))
        return np.array(out)


def _adaptive(radial_dam, **kw):
    opts = dict(mx=8, min_level=1, max_level=4, t_final=0.6, regrid_interval=2)
    return radial_dam.setup(**{**opts, **kw})


def test_gauges_equal_sampling_every_step_across_regrids(radial_dam):
    sim = _adaptive(radial_dam)
    gauges = Gauges(POINTS, fields=FIELDS)
    plain = Gauges(POINTS, fields=["hv", "h"])
    ref = _SampleEveryStep(POINTS)
    sim.callbacks += [gauges, plain, ref]
    sim.run()
    assert sim.regrids > 1 and len(ref.forests) > 2  # the points moved between leaves
    assert gauges.times == ref.t == plain.times
    want = ref.series(sim, FIELDS)
    got = np.array(gauges._values)
    assert got.shape == want.shape == (sim.steps + 1, len(POINTS), len(FIELDS))
    assert np.array_equal(got, want)  # bitwise: the same cells, the same arithmetic
    assert np.array_equal(np.array(plain._values), ref.series(sim, ["hv", "h"]))
    # located once per forest the gauges saw, not once per step
    assert gauges._cells.epoch == len(ref.forests)


def test_full_buffer_is_flushed_and_grown_buffer_keeps_rows(radial_dam, monkeypatch):
    sim = _adaptive(radial_dam)
    whole = Gauges(POINTS, fields=FIELDS)
    sim.callbacks.append(whole)
    sim.run()
    monkeypatch.setattr(forestpy.callbacks, "SampleRows",
                        functools.partial(SampleRows, capacity=2, max_rows=4))
    sim = _adaptive(radial_dam)
    small = Gauges(POINTS, fields=FIELDS)
    sim.callbacks.append(small)
    sim.run()
    assert sim.steps + 1 > 8  # it filled twice
    assert small.times == whole.times
    assert np.array_equal(np.array(small._values), np.array(whole._values))


def test_sample_rows_grow_by_doubling_and_take_in_one_transfer():
    from forestpy.backend import CPUBackend

    be = CPUBackend()
    rows = SampleRows(be, 3, np.float64, capacity=2, max_rows=8)
    for k in range(8):
        rows.next_row()[:] = k
    assert rows.full and len(rows._data) == 8
    with pytest.raises(RuntimeError, match="full"):
        rows.next_row()
    before = be.host_transfers
    got = rows.take()
    assert be.host_transfers == before + 1
    assert np.array_equal(got, np.repeat(np.arange(8.0), 3).reshape(8, 3))
    assert rows.n == 0 and rows.take().shape == (0, 3)


def test_point_cells_are_the_cells_sample_reads(radial_dam):
    sim = _adaptive(radial_dam, t_final=0.05).run()
    x, y = np.array(list(POINTS.values())).T
    cells = PointCells(x, y)
    assert cells.update(sim) and not cells.update(sim)  # the second: nothing changed
    flat = cells.flat_index(sim.q.shape, [2, 0])
    np.testing.assert_array_equal(sim.q.reshape(-1)[flat], sim.sample(x, y)[:, [2, 0]])
    assert cells.flat_index(sim.q.shape, [2, 0]) is flat  # made once per location
    # the entries of the GPU's one-launch gather, run here by the CPU loop of the body
    from forestpy.patches.launch import for_each_entry
    from forestpy.patches.point_samples import _gather_entry

    entries = cells.entries([2, 0], [1])
    assert cells.entries([2, 0], [1]) is entries
    rows = SampleRows(sim.backend, len(entries), sim.q.dtype, capacity=1)
    rows.next_row()[:] = -1.0
    row = rows.next_index()
    assert row == 1 and rows.n == 2
    # the radial dam has no aux fields: q stands in for aux (entries of array 1)
    for_each_entry(_gather_entry, len(entries), sim.q, sim.q, entries, rows.data, row)
    q = sim.sample(x, y)
    want = np.concatenate([q[:, [2, 0]].ravel(), q[:, 1]])
    np.testing.assert_array_equal(rows.take()[1], want)
    with pytest.raises(ValueError, match="outside the domain"):
        PointCells([9.0], [0.0]).update(sim)


def test_fgmax_on_device_equals_the_numpy_fold(radial_dam):
    # the compiled fold against FGMax.observe's arithmetic written with NumPy
    sim = _adaptive(radial_dam, t_final=0.2)
    X, Y = np.meshgrid(np.linspace(-2.2, 2.2, 9) + 0.013, np.linspace(-2.1, 2.1, 7) + 0.007)
    fg = FGMax(X, Y, topo_index=None, sea_level=1.0, arrival_tol=0.05)
    ref = _SampleEveryStep(dict(enumerate(zip(X.ravel(), Y.ravel()))))
    sim.callbacks += [fg, ref]
    sim.run()
    n = X.size
    hmax, smax, emax = np.zeros(n), np.zeros(n), np.full(n, -np.inf)
    arrival = np.full(n, np.nan)
    for t, q in zip(ref.t, ref.q):
        h, hu, hv = q[:, 0], q[:, 1], q[:, 2]
        wet = h > fg.dry_tolerance
        speed = np.where(wet, np.sqrt(hu * hu + hv * hv) / np.where(wet, h, 1.0), 0.0)
        np.maximum(hmax, h, out=hmax)
        np.maximum(smax, speed, out=smax)
        emax = np.where(wet, np.maximum(emax, h), emax)
        hit = (h > fg.arrival_depth) & (np.abs(h - 1.0) > 0.05)
        arrival = np.where(np.isnan(arrival) & hit, t, arrival)
    for name, want in (("max_depth", hmax), ("max_speed", smax), ("max_surface", emax),
                       ("arrival_time", arrival)):
        got = getattr(fg, name)
        assert np.array_equal(got, want, equal_nan=True), name
        assert np.array_equal(np.signbit(got), np.signbit(want)), name
    assert np.isfinite(arrival).sum() >= 4 and np.array_equal(fg.bed, np.zeros(n))


def test_maximum_follows_numpy_on_zeros_and_nan():
    from forestpy.extensions.geoclaw.fgmax import _maximum

    vals = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf]
    for a in vals:
        for b in vals:
            want, got = np.maximum(a, b), _maximum(a, b)
            assert (np.isnan(want) and np.isnan(got)) or (
                want == got and np.signbit(want) == np.signbit(got)), (a, b)


def _gpu_available():
    if numba.config.ENABLE_CUDASIM:
        return True
    from numba import cuda

    return cuda.is_available()


class _CountTransfers:
    """A callback run inside this one, with the host transfers each of its hooks made."""

    def __init__(self, cb):
        self.cb, self.counts = cb, {"on_start": [], "on_step": [], "on_end": []}

    def _hook(self, name, sim):
        before = sim.backend.host_transfers
        getattr(self.cb, name)(sim)
        self.counts[name].append(sim.backend.host_transfers - before)

    def on_start(self, sim):
        self._hook("on_start", sim)

    def on_step(self, sim):
        self._hook("on_step", sim)

    def on_end(self, sim):
        self._hook("on_end", sim)


@pytest.mark.slow  # CUDA-simulator run; CI's slow step
@pytest.mark.skipif(not _gpu_available(), reason="no GPU and the CUDA simulator is off")
def test_gpu_gauges_and_fgmax_move_nothing_to_the_host_per_step(radial_dam):
    X, Y = np.meshgrid([-1.1, 0.13, 0.9], [-0.4, 0.6])

    def run(backend):
        sim = radial_dam.setup(mx=4, min_level=1, max_level=1, t_final=0.7, backend=backend)
        sim.callbacks += [_CountTransfers(cb) for cb in (
            Gauges(POINTS, fields=FIELDS), Gauges(POINTS),
            FGMax(X, Y, topo_index=None, sea_level=1.0, arrival_tol=0.05))]
        return sim.run()

    cpu, gpu = run("cpu"), run("gpu")
    assert gpu.steps == cpu.steps > 1
    counted = gpu.callbacks[-3:]
    for c in counted:
        assert c.counts["on_start"] == [0] and c.counts["on_step"] == [0] * gpu.steps
    # the gauges copy their samples at the end, once each; the maxima stay until read
    assert [c.counts["on_end"] for c in counted] == [[1], [1], [0]]
    g_fields, g_all, fg = (c.cb for c in counted)
    before = gpu.backend.host_transfers
    for _ in range(3):  # more samples: still no transfer until they are read
        g_fields.on_step(gpu), g_all.on_step(gpu), fg.on_step(gpu)
    assert gpu.backend.host_transfers == before
    for g in (g_fields, g_all):
        g.times, g._values = g.times[:-3], g._values[:-3]  # read: one transfer each
    maxima = {name: getattr(fg, name) for name in ("max_depth", "max_speed", "max_surface",
                                                    "arrival_time")}
    assert gpu.backend.host_transfers == before + 3
    # the same series and maxima as the CPU backend
    for c, g in zip(cpu.callbacks[-3:-1], (g_fields, g_all)):
        assert c.cb.times == g.times and len(g.times) == gpu.steps + 1
        want, got = np.array(c.cb._values), np.array(g._values)
        assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()
    for name, got in maxima.items():
        want = getattr(cpu.callbacks[-1].cb, name)
        assert np.allclose(got, want, rtol=1e-12, atol=0, equal_nan=True), name


class _StepSpy:
    """A deferrable ``on_step`` that records what it sees, and whether a step of the
    simulation was in flight (``sim.step`` running) when it was called."""

    deferrable = True

    def __init__(self, sim):
        self.seen, self.inside = [], []
        self._in_step = False
        step = sim.step

        def spied(dt, between=None):
            self._in_step = True
            try:
                return step(dt, between)
            finally:
                self._in_step = False

        sim.step = spied

    def on_step(self, sim):
        self.seen.append((sim.steps, sim.t, sim.forest, sim.regrids))
        self.inside.append(self._in_step)


def test_deferred_callbacks_see_their_step_and_record_the_same(radial_dam):
    """Gauges and fgmax run while the next step is launched (after its launch, before
    its status is read: on a GPU, while it is on the device; forced on the CPU here,
    where the next step is done by then, which tests that it leaves what they read
    alone): the same samples, maxima, steps and regrids, bit for bit, as running them
    after their step; a callback that is not deferrable turns it off."""
    X, Y = np.meshgrid([-1.1, 0.13, 0.9], [-0.4, 0.6])

    def run(defer, extra=()):
        sim = _adaptive(radial_dam, mx=4, max_level=3, t_final=1.0, regrid_interval=1,
                        subcycle=False)
        sim.defer_callbacks = defer
        spy = _StepSpy(sim)
        sim.callbacks += [Gauges(POINTS, fields=FIELDS),
                          FGMax(X, Y, topo_index=None, sea_level=1.0, arrival_tol=0.05),
                          spy, *extra]
        sim.run()
        return sim, spy

    (off, spy_off), (on, spy_on) = run(False), run(True)
    assert on.steps == off.steps > 4 and on.regrids == off.regrids > 0
    assert on._defers_callbacks() and not off._defers_callbacks()
    assert spy_on.seen == spy_off.seen  # each its own step's count, time and forest
    assert not any(spy_off.inside)
    # all but the last step's callbacks ran while the next step was launched
    assert spy_on.inside == [True] * (on.steps - 1) + [False]
    g_off, g_on = off.callbacks[-3], on.callbacks[-3]
    assert g_on.times == g_off.times
    assert np.array_equal(np.array(g_on._values), np.array(g_off._values))
    f_off, f_on = off.callbacks[-2], on.callbacks[-2]
    for name in ("max_depth", "max_speed", "max_surface", "arrival_time"):
        assert np.array_equal(getattr(f_on, name), getattr(f_off, name), equal_nan=True)
    assert np.array_equal(on.q, off.q)

    class Plain:  # not deferrable: every on_step runs after its step, as before
        def on_step(self, sim):
            pass

    mixed, spy = run(True, extra=[Plain()])
    assert not mixed._defers_callbacks() and not any(spy.inside)
    assert spy.seen == spy_off.seen
    cpu = radial_dam.setup(mx=4, subcycle=False)
    cpu.callbacks.append(Gauges(POINTS))
    assert not cpu._defers_callbacks()  # the CPU's default: nothing to hide
    cpu.defer_callbacks = True
    assert cpu._defers_callbacks()
