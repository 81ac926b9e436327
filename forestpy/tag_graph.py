"""Regrid tagging replayed as a CUDA graph (issue 29, item 4).

An adaptive GPU run tags its patches every ``regrid_interval`` steps, and most passes
change nothing: the criterion's kernel, the masking kernel and a few CuPy reductions
make one record (may anything change?) that the host reads.  Launching them costs the
host ~0.3-0.5 ms a pass while the device does a few microseconds of work, so on a run
like the Okushiri demo (380 passes, 8 of them changing the forest) tagging was a sixth
of the wall time.  :class:`TagGraph` captures a pass once per forest, state buffer and
criterion state and replays it: one graph launch, then the record's read, as before.

Only criteria that say what their launches depend on are replayed: a ``tag4regrid``
with a method ``graph_key(t)`` returning a hashable of every host-side value its
launches take at time ``t`` (GeoClaw's :class:`~forestpy.extensions.geoclaw.refinement.
GeoClawRefinement`: which regions are active and whether the topography criterion is
on); its kernels' other arguments must be arrays made once per forest.  A pass is
captured the second time its key is seen (the first one uploads the per-forest
arrays, which a capture cannot), after two plain runs that fill a private memory pool:
the temporaries of the captured pass come from that pool, which lives as long as the
graph, so no other array is ever handed memory that a replay writes.  A failed capture
turns the replay off for the run (:attr:`TagGraph.reason`) and the pass runs as before.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

__all__ = ["TagGraph"]


@dataclass
class _Captured:
    graph: object
    result: tuple  # the captured pass's outputs: (flags, record), rewritten by a replay
    pool: object  # the private memory pool of its temporaries
    keep: tuple  # what the key names by identity, kept alive with the graph


class TagGraph:
    """Capture and replay of a simulation's tagging passes (module docstring)."""

    max_entries = 8

    def __init__(self, sim):
        self.sim = sim
        self.reason = None
        self.captures = 0
        self.replays = 0
        self._entries: dict = {}
        self._seen: set = set()
        self._stream = None
        self._patches = None

    def key(self, patches, frozen_below, memo):
        """The key of a pass on the simulation now, or None when it cannot be replayed."""
        sim = self.sim
        if self.reason is not None:
            return None
        criterion = sim.vtable.tag4regrid
        graph_key = getattr(criterion, "graph_key", None)
        if graph_key is None or not sim.layout.whole:
            return None
        memo_flags = None if memo is None else memo[1]
        return (id(patches), sim.q.data.ptr, id(sim.aux), frozen_below,
                None if memo_flags is None else memo_flags.data.ptr, graph_key(sim.t))

    def run(self, key, tag, keep=()):
        """``tag()``'s ``(flags, record)``, replayed from a graph where ``key`` has
        been captured, else run (and captured on the key's second pass).  ``keep``:
        ``(patches, ...)``, what the key names by identity (the patches first).  The
        flags of a replay are the graph's own array: copy them to keep them past the
        next pass."""
        if key is None:
            return tag()
        if self._patches is None or keep[0] is not self._patches:
            # a new forest or layout (patches compare by identity): the old graphs go
            self._entries.clear()
            self._seen.clear()
            self._patches = keep[0]
        entry = self._entries.get(key)
        if entry is not None:
            entry.graph.launch(self._stream)
            self.replays += 1
            return entry.result
        if key not in self._seen:
            self._seen.add(key)
            return tag()
        return self._capture(key, tag, keep)

    def _capture(self, key, tag, keep):
        import cupy

        from forestpy.step_graph import capture

        sim = self.sim
        if self._stream is None:  # blocking: ordered with the default stream's work
            self._stream = cupy.cuda.Stream(non_blocking=False)
        stream = self._stream
        pool = cupy.cuda.MemoryPool()
        with cupy.cuda.using_allocator(pool.malloc):
            tag()  # fills the pool with this pass's blocks; its outputs are dropped
            result = tag()  # this pass's answer (blocks of the first outputs now free)
            cupy.cuda.Device().synchronize()
            captured, graph, error = capture(sim, stream, tag)
        if error is not None:
            self.reason = f"the tagging could not be captured: {type(error).__name__}: {error}"
            self._entries.clear()
            warnings.warn(f"forestpy: tagging without CUDA graphs ({self.reason})",
                          RuntimeWarning, stacklevel=4)
            return result
        if len(self._entries) >= self.max_entries:  # the state was replaced
            self._entries.clear()
            self._seen = {key}
        self._entries[key] = _Captured(graph, captured, pool, tuple(keep))
        self.captures += 1
        return result

    def summary(self) -> dict:
        return {"tag_graph_captures": self.captures, "tag_graph_replays": self.replays,
                "tag_graph_off_reason": self.reason}
