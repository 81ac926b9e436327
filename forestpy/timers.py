"""Wall-clock timers for the phases of a run, in the spirit of ForestClaw's breakdown.

Top-level phases partition the run (what they do not cover is reported as ``other``);
a phase named ``parent.part`` is a sub-phase counted inside ``parent`` (the ghost fill
by kind: same-level copy, fine-to-coarse average, coarse-to-fine interpolation,
physical boundaries).
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

PHASES = (
    "startup",
    "ghost_fill",
    "ghost_fill.copy",
    "ghost_fill.average",
    "ghost_fill.interpolate",
    "ghost_fill.physical_bc",
    "step",
    "time_sync",
    "sources",
    "cfl_check",
    "regrid",
    "output",
    "callbacks",
)


def phase(timers, name: str):
    """``timers(name)`` or, when ``timers`` is None, a context that does nothing."""
    return nullcontext() if timers is None else timers(name)


class Timers:
    """Accumulated seconds per phase; ``with timers("step"): ...``.

    GPU work is asynchronous: a phase's time lands in whichever later phase waits for
    the device.  Set ``sync`` to the backend's ``synchronize`` to charge each phase its
    own device time (benchmarks do; it costs one synchronisation per phase).
    """

    def __init__(self, sync=None):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.sync = sync
        self._open: list[list] = []  # [phase, seconds of nested top-level phases]
        #: Numba compilation seconds per top-level phase it happened in ("other" when
        #: none was open), from :class:`forestpy.jit.CompileWatch`; counted inside the
        #: phases' seconds, not beside them.
        self.compiled: dict[str, float] = {}

    def add_compile(self, seconds: float) -> None:
        """Record ``seconds`` of compilation inside the innermost open top-level phase."""
        where = next((p for p, _ in reversed(self._open) if "." not in p), "other")
        self.compiled[where] = self.compiled.get(where, 0.0) + float(seconds)

    @property
    def compile_s(self) -> float:
        """Total compilation seconds recorded (:meth:`add_compile`)."""
        return sum(self.compiled.values())

    @contextmanager
    def __call__(self, phase: str):
        """Time ``phase``.  A top-level phase opened inside another (the ghost fill of a
        regrid) is charged to itself only: each top-level phase keeps its exclusive
        time, so that together they never exceed the wall time."""
        if self.sync is not None:
            self.sync()
        top = "." not in phase
        entry = [phase, 0.0]
        self._open.append(entry)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            elapsed = time.perf_counter() - t0
            self._open.pop()
            own = elapsed - entry[1] if top else elapsed
            self.seconds[phase] = self.seconds.get(phase, 0.0) + own
            if top:
                for outer in reversed(self._open):
                    if "." not in outer[0]:
                        outer[1] += elapsed
                        break

    @contextmanager
    def unsynchronised(self):
        """Inside the block phases do not synchronise the device: a CUDA graph capture
        fails at the first synchronisation (the step graph captures with the timers of a
        benchmark that synchronises each phase)."""
        saved, self.sync = self.sync, None
        try:
            yield
        finally:
            self.sync = saved

    def other(self, wall: float) -> float:
        """Wall time not covered by any top-level phase."""
        covered = sum(v for k, v in self.seconds.items() if "." not in k)
        return max(0.0, wall - covered)

    def as_dict(self, wall: float | None = None) -> dict:
        """Seconds per phase; with ``wall`` also ``other`` and ``total``; ``compile``
        (the compilation inside them, by phase) when any was recorded."""
        out = {k: round(v, 6) for k, v in self.seconds.items()}
        if wall is not None:
            out["other"] = round(self.other(wall), 6)
            out["total"] = round(wall, 6)
        if self.compiled:
            out["compile"] = {k: round(v, 6) for k, v in self.compiled.items()}
        return out

    def report(self, wall: float) -> str:
        """The breakdown as a table: seconds and share of the wall time per phase."""

        def line(name, v):
            share = 100.0 * v / wall if wall > 0 else 0.0
            return f"{name:<24}{v:10.3f}{share:7.1f}%"

        lines = [f"{'phase':<24}{'seconds':>10}{'share':>8}"]
        for k, v in self.seconds.items():
            if "." in k:  # sub-phases outside PHASES are listed last: named in full
                k = "  " + (k.split(".", 1)[1] if k in PHASES else k)
            lines.append(line(k, v))
        lines.append(line("other", self.other(wall)))
        lines.append(f"{'total wall':<24}{wall:10.3f}")
        if self.compile_s > 0:
            where = ", ".join(f"{k} {v:.1f} s" for k, v in self.compiled.items() if v >= 0.05)
            lines.append(f"{'  of which compiling':<24}{self.compile_s:10.3f}"
                         f"{100.0 * self.compile_s / wall if wall > 0 else 0.0:7.1f}%"
                         + (f"  ({where})" if where else ""))
        return "\n".join(lines)
