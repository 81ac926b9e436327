"""The pieces of the GPU steps replayed as CUDA graphs (forestpy.step_params,
forestpy.step_graph) that run without a GPU: the per-step parameter block, the values
kernels read through ``device_scalar``, the reasons a run steps without graphs, and the
hooks' counts of a replayed step.  A capture and its replays need a real GPU:
``benchmarks/gpu_graph.sh parity`` compares those runs with direct steps bit for bit."""

from types import SimpleNamespace

import numba
import numpy as np
import pytest
from forestpy.extensions.geoclaw.model import geoclaw_simulation
from forestpy.extensions.geoclaw.sources import DischargeSource
from testsupport import load_demo

from forestpy import Domain
from forestpy.backend import get_backend
from forestpy.step_graph import _unsupported
from forestpy.step_params import CaptureError, StepParams, device_scalar, dt_argument


def test_device_scalar_reads_a_view_or_keeps_a_number():
    @numba.njit
    def twice(x):
        return 2.0 * device_scalar(x)

    block = np.array([1.5, 7.0])
    assert twice(block[0:1]) == 3.0 and twice(2.5) == 5.0
    assert device_scalar(block[1:2]) == 7.0 and device_scalar(4.0) == 4.0
    assert dt_argument(3) == 3.0 and type(dt_argument(3)) is float
    view = block[0:1]
    assert dt_argument(view) is view  # a device view is passed on, never read


def test_step_params_give_each_user_its_own_range():
    block = StepParams(get_backend("cpu"), size=6)
    dt = block.values("dt", lambda t, dt: dt, 1.0, 0.25)
    pair = block.values("pair", lambda t, dt: (t, 2.0 * dt), 1.0, 0.25)
    assert dt.tolist() == [0.25] and pair.tolist() == [1.0, 0.5]
    again = block.values("dt", lambda t, dt: dt, 1.25, 0.5)
    assert again.tolist() == [0.5] and pair.tolist() == [1.0, 0.5]  # untouched
    assert block.dev[:3].tolist() == [0.5, 1.0, 0.5]
    with pytest.raises(ValueError, match="'pair': 3 values, was 2"):
        block.values("pair", lambda t, dt: (1.0, 2.0, 3.0), 0.0, 0.0)
    with pytest.raises(ValueError, match="holds 6 values"):
        block.values("big", lambda t, dt: np.zeros(4), 0.0, 0.0)


def test_step_params_refresh_computes_every_recorded_user_for_the_new_step():
    block = StepParams(get_backend("cpu"), size=8)
    # what a capture records: (offset, n, fn, with_dt); a boundary's call has no dt
    recorded = [(0, 1, lambda t, dt: dt, True), (1, 2, lambda t, dt: (t, dt), False),
                (3, 1, lambda t, dt: t + dt, True)]
    block.refresh(recorded, 2.0, 0.125)
    assert block.host[:4].tolist() == [0.125, 2.0, 0.0, 2.125]


def test_a_value_asked_for_another_step_than_the_captured_one_is_refused():
    block = StepParams(get_backend("cpu"))
    block.begin_capture(1.0, 0.5)
    assert block.capturing
    with pytest.raises(CaptureError, match="t=1.5, dt=0.5 in a step captured at t=1.0"):
        block.values("dt", lambda t, dt: dt, 1.5, 0.5)
    with pytest.raises(CaptureError, match="dt=0.25"):
        block.values("dt", lambda t, dt: dt, 1.0, 0.25)
    assert block.end_capture() == [] and not block.capturing


def _fake(**kw):
    """A stand-in simulation for :func:`_unsupported`: every condition for graphs met
    unless ``kw`` says otherwise."""
    class Hook:
        takes_context = True

        def apply(self, q, aux, context):
            pass

        def graph_replay(self, context):
            pass

    physical = object()
    sim = SimpleNamespace(
        backend=SimpleNamespace(is_gpu=True, simulator=False), subcycle=False, comm=None,
        vtable=SimpleNamespace(b4step=None, src2=Hook(), physical_bc=physical),
        _physical_bc=physical, bc=["wall"] * 4, solver=SimpleNamespace(device_dt=True))
    for key, value in kw.items():
        obj, _, name = key.rpartition("__")
        setattr(getattr(sim, obj) if obj else sim, name, value)
    return sim


@pytest.mark.parametrize("change, reason", [
    ({"backend__simulator": True}, "need a GPU"),
    ({"backend__is_gpu": False}, "need a GPU"),
    ({"subcycle": True}, "subcycled"),
    ({"comm": SimpleNamespace(size=2)}, "distributed"),
    ({"vtable__b4step": lambda sim, dt: None}, "b4step"),
    ({"vtable__src2": lambda q, aux, x, y, t, dt: None}, "without graph_replay"),
    ({"vtable__physical_bc": object()}, "physical_bc slot"),
    ({"bc": ["wall", lambda q, aux, x, y, t: None, "wall", "wall"]}, "array-level boundary"),
    ({"solver__device_dt": False}, "dt as a number"),
])
def test_steps_that_cannot_be_replayed_say_why(change, reason):
    assert _unsupported(_fake()) is None
    got = _unsupported(_fake(**change))
    assert got is not None and reason in got


def test_graphs_are_off_in_the_simulator_and_on_request(monkeypatch):
    radial_dam = load_demo("radial_dam")
    sim = radial_dam.setup(mx=8, min_level=2, max_level=2, backend="gpu", subcycle=False)
    assert sim._step_graph() is None  # what sim.step asks first
    summary = sim.graph_summary()
    assert summary["gpu_graph"] is False and summary["graph_replays"] == 0
    assert "need a GPU" in summary["graph_off_reason"]
    monkeypatch.setenv("FORESTPY_GPU_GRAPH", "0")
    off = radial_dam.setup(mx=8, min_level=2, max_level=2, backend="gpu")
    assert off.gpu_graph is False and off.graph_summary()["graph_off_reason"] == "off"
    monkeypatch.setenv("FORESTPY_GPU_GRAPH", "1")
    assert radial_dam.setup(mx=8, min_level=2, max_level=2, backend="gpu").gpu_graph


def test_interior_digest_sums_the_owned_interiors():
    sim = load_demo("radial_dam").setup(mx=8, min_level=2, max_level=3)
    sim.run(max_steps=2)
    b = sim.mbc
    q = sim.q[:, :, b:-b, b:-b]
    assert sim.interior_digest() == [float(q.sum()), float(np.abs(q).sum())]


def test_a_replayed_source_call_counts_as_the_call_it_repeats():
    # a replayed graph runs the source's kernels without calling apply: graph_replay
    # must keep the same volume added and moved as the call it was captured from
    src = DischargeSource(30.0, 40.0, 19.7, radius=7.0)
    sim = geoclaw_simulation(lambda x, y, dx, dy: 0.0 * x + 0.01 * x,
                             domain=Domain((0, 0), (100, 100)), eta_init=lambda x, y: 0.3,
                             sources=[src], mx=8, min_level=2, max_level=2, subcycle=False,
                             t_final=3.0)
    sim.run(max_steps=2)
    hook = sim.geoclaw_sources
    hook._commit()
    ctx = sim.hook_context(sim.t, 0.01)
    ctx.step = sim.steps + 1
    q = sim.q.copy()
    hook.apply(q, sim.aux, ctx)
    applied = hook._pending
    hook._pending = None
    hook.graph_replay(ctx)
    replayed = hook._pending
    assert replayed[0] == applied[0] and replayed[3] == applied[3]
    assert replayed[1] == applied[1] == pytest.approx(19.7 * 0.01, rel=1e-14)
    assert [np.asarray(m).tolist() for m in replayed[2]] == \
        [np.asarray(m).tolist() for m in applied[2]]
    assert replayed[2][-1] is not hook._totals  # a copy: the next call reuses the buffer


def test_timers_do_not_synchronise_inside_a_capture():
    """A benchmark's timers synchronise the device around each phase; a CUDA graph
    capture fails at the first synchronisation, so the capture suspends it."""
    from forestpy.timers import Timers

    calls = []
    timers = Timers(sync=lambda: calls.append(1))
    with timers("step"):
        pass
    assert len(calls) == 2
    with timers.unsynchronised():
        with timers("step"), timers("ghost_fill"):
            pass
    assert len(calls) == 2 and timers.seconds["ghost_fill"] >= 0.0
    with pytest.raises(RuntimeError), timers.unsynchronised():
        raise RuntimeError("a failed capture")
    with timers("step"):
        pass
    assert len(calls) == 4


def test_tagging_passes_run_plainly_then_are_captured_then_replayed():
    """forestpy.tag_graph: a key's first pass runs (it uploads the per-forest arrays),
    its second is captured, later ones replay; a new forest drops the old graphs; no
    key (a criterion without ``graph_key``) always runs.  The capture itself needs a
    GPU: here it is a stand-in that records the pass."""
    from forestpy.tag_graph import TagGraph, _Captured

    class Recorded(TagGraph):
        def _capture(self, key, tag, keep):
            result = tag()
            graph = SimpleNamespace(launch=lambda stream: launched.append(key))
            self._entries[key] = _Captured(graph, ("replayed", key), None, keep)
            self.captures += 1
            return result

    ran, launched = [], []

    def tag():
        ran.append(1)
        return "ran", len(ran)

    g = Recorded(SimpleNamespace())
    from forestpy.patches.tagging import TaggedPatches

    # patches hold arrays: compared by identity, never by value
    forest_a, forest_b = (TaggedPatches(None, np.arange(3), None) for _ in range(2))
    got = [g.run("k", tag, keep=(forest_a,)) for _ in range(4)]
    assert got == [("ran", 1), ("ran", 2), ("replayed", "k"), ("replayed", "k")]
    assert (g.captures, g.replays, launched) == (1, 2, ["k", "k"])
    assert g.run("k", tag, keep=(forest_b,)) == ("ran", 3)  # new forest: seen afresh
    assert g.run(None, tag, keep=(forest_b,)) == ("ran", 4)
    assert g.summary() == {"tag_graph_captures": 1, "tag_graph_replays": 2,
                           "tag_graph_off_reason": None}


def test_geoclaw_tagging_key_follows_the_active_regions():
    import importlib.util

    from testsupport import ROOT

    spec = importlib.util.spec_from_file_location(
        "okushiri_demo", ROOT / "demos" / "geoclaw" / "okushiri.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    sim = demo.setup(dx_finest=0.112, t_final=0.2)
    crit = sim.vtable.tag4regrid
    assert sim._tag_graph() is None  # CPU: passes run as before
    from forestpy.extensions.geoclaw.refinement import Region

    crit.regions = list(crit.regions) + [Region(0.0, 1.0, 0.0, 1.0, 0, 2, t1=5.0, t2=9.0)]
    assert crit.graph_key(0.0) != crit.graph_key(6.0)
    assert crit.graph_key(6.0) == crit.graph_key(7.0)
