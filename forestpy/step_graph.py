"""One-dt GPU steps replayed as CUDA graphs (issue 29, item 6).

A serial GPU step launches ~15 small kernels (ghost fill, physical boundaries, step,
time sync, sources, status record), each costing 15-60 us of Python on the host while
the device runs it in a few microseconds.  :class:`StepGraph` captures the launches of
one step into a CUDA graph per forest and state buffer (the state alternates between
two arrays, so two graphs per forest) and replays it: per step the host writes the
step's values (``t``, ``dt``, forcing values: :mod:`forestpy.step_params`) into a
page-locked block, launches the graph and reads the status record, as before.  Rejected
steps, output times and regrids are decided on the host exactly as without graphs: the
host still reads one record per step.

When a capture is taken:
* never on the first two steps of a forest: they run as before and do its lazy set-up
  (plans, geometry, kernels compiled and their fast launch paths taken);
* then once for each of the two state buffers.

What cannot be replayed turns graphs off for the run, with the reason in
:attr:`StepGraph.reason` (and a warning when a capture fails): subcycled steps, a
distributed run, ``b4step``, a ``src2`` or boundary hook that is not pointwise (array
hooks, see ``docs/hooks.md``), a solver that takes ``dt`` only as a number, a capture
that allocates device memory or synchronises.  The graph keeps every array its kernels
were given alive, so their memory cannot be handed to another array while it replays.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from forestpy.hooks import takes_context

__all__ = ["StepGraph"]


@dataclass
class _Captured:
    graph: object
    recorded: list  # the step parameters' (offset, n, fn, with_dt)
    q_new: object
    read: object  # the status record's host read
    keep: list = field(default_factory=list)  # every launch's arguments


class StepGraph:
    """Capture and replay of a simulation's one-dt GPU steps (see the module
    docstring); ``sim.step`` asks :meth:`step` first."""

    def __init__(self, sim):
        self.sim = sim
        self.reason = _unsupported(sim)
        self.captures = 0
        self.replays = 0
        self._layout = None
        self._aux = None
        self._graphs: dict = {}
        self._direct = 0
        self._stream = None
        self._buffers = None

    def usable(self) -> bool:
        return self.reason is None

    def summary(self) -> dict:
        return {"gpu_graph": self.usable(), "graph_captures": self.captures,
                "graph_replays": self.replays, "graph_off_reason": self.reason}

    def step(self, dt, between=None) -> tuple[bool, float] | None:
        """The step ``dt`` replayed from a graph: ``(accepted, Courant number)``, or
        None when this step must run without one (the caller then steps as usual and
        ``between`` has not run).  ``between()``: see :meth:`Simulation.step`."""
        sim = self.sim
        L = sim.layout
        if not L.whole:
            return None
        if L is not self._layout or sim.aux is not self._aux:
            self._layout, self._aux = L, sim.aux
            self._graphs.clear()
            self._buffers = None
            self._direct = 0
        if self._direct < 2:  # the forest's lazy set-up and first launches run plainly
            self._direct += 1
            return None
        q = sim.q
        spare = self._spare_for(q)
        key = (q.data.ptr, spare.data.ptr)
        entry = self._graphs.get(key)
        if entry is None:
            if len(self._graphs) >= 4:  # the state was replaced: keep the two in use
                self._graphs.clear()
            entry = self._capture(dt)
            if entry is None:
                return None
            self._graphs[key] = entry
        sim.step_params.refresh(entry.recorded, sim.t, dt)
        with sim.timers("step"):
            entry.graph.launch(self._stream)
        src2 = sim.vtable.src2
        if src2 is not None:
            src2.graph_replay(sim.hook_context(sim.t, dt))
        if between is not None:
            between()
        with sim.timers("cfl_check"):
            status = entry.read()
        self.replays += 1
        old = sim.q
        accepted, courant = sim._finish_step(entry.q_new, status, dt)
        if accepted:  # the old state's array receives the next step
            self._buffers = (old,) + self._buffers[1:]
        return accepted, courant

    def _spare_for(self, q):
        """The array the next step writes (not ``q``), with the Courant numbers, the
        edge fluxes and the row list of the step kernel: made once per forest."""
        xp = self.sim.backend.xp
        if self._buffers is None or self._buffers[0] is q or self._buffers[0].shape != q.shape:
            npatch, meqn = q.shape[:2]
            g = self.sim.layout.local_arrays
            self._buffers = (xp.empty_like(q), xp.empty(npatch),
                             xp.empty((npatch, 4, meqn, max(g.mx, g.my))),
                             xp.arange(npatch, dtype=np.int64))
        return self._buffers[0]

    def _capture(self, dt) -> _Captured | None:
        import cupy

        from forestpy.cuda_device import recording_launches

        sim = self.sim
        block = sim.step_params
        if self._stream is None:  # blocking: ordered with the default stream's work
            self._stream = cupy.cuda.Stream(non_blocking=False)
        stream = self._stream
        cupy.cuda.Device().synchronize()
        watch = _AllocationWatch()
        block.begin_capture(sim.t, dt)
        try:
            with recording_launches() as launched, watch:
                out, graph, error = capture(
                    sim, stream, lambda: sim._launch_step(dt, buffers=self._buffers))
        finally:
            recorded = block.end_capture()
        if error is None and watch.allocations:
            error = RuntimeError(f"{watch.allocations} device allocation(s) in the step")
        if error is not None:
            self.reason = f"the step could not be captured: {type(error).__name__}: {error}"
            warnings.warn(f"forestpy: GPU steps without CUDA graphs ({self.reason})",
                          RuntimeWarning, stacklevel=3)
            return None
        self.captures += 1
        q_new, read = out
        return _Captured(graph, recorded, q_new, read, keep=list(launched) + [self._buffers])


def capture(sim, stream, work):
    """``(result, graph, error)``: ``work()`` captured on the CuPy ``stream`` into a
    CUDA graph (forestpy's launches and CuPy's work go to the stream; the timers do not
    synchronise), and the exception that made the capture fail (None when it did
    not).  The capture always ends, so the stream is usable after a failure."""
    from forestpy.cuda_device import on_stream

    result = graph = error = None
    with on_stream(stream), sim.timers.unsynchronised():
        stream.begin_capture()
        try:
            result = work()
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            error = exc
        finally:
            try:
                graph = stream.end_capture()
            except Exception as exc:  # noqa: BLE001
                error = error or exc
    return result, graph, error


def _unsupported(sim) -> str | None:
    """Why the steps of ``sim`` cannot be replayed from graphs (None: they can)."""
    be = sim.backend
    if not be.is_gpu or getattr(be, "simulator", False):
        return "CUDA graphs need a GPU (not the simulator)"
    if sim.subcycle:
        return "subcycled steps"
    if sim.comm is not None and getattr(sim.comm, "size", 1) > 1:
        return "a distributed run"
    if sim.vtable.b4step is not None:
        return "a b4step hook"
    src2 = sim.vtable.src2
    if src2 is not None and not (takes_context(src2) and hasattr(src2, "graph_replay")):
        return "a src2 hook without graph_replay (array-level hooks run step by step)"
    if sim.vtable.physical_bc != sim._physical_bc:
        return "a physical_bc slot of its own"
    if any(callable(k) and not takes_context(k) for k in sim.bc):
        return "an array-level boundary function"
    if not getattr(sim.solver, "device_dt", False):
        return "the solver takes dt as a number only"
    return None


def _allocation_watch_base():
    try:
        from cupy.cuda.memory_hook import MemoryHook
    except ImportError:  # no CuPy: never used (graphs need a GPU)
        return object
    return MemoryHook


class _AllocationWatch(_allocation_watch_base()):
    """Counts the device allocations made while a step is captured: memory a graph
    writes must outlive it, so a step that allocates is not replayed."""

    name = "forestpy_capture_watch"

    def __init__(self):
        self.allocations = 0

    def malloc_preprocess(self, **kwargs):
        self.allocations += 1
