"""Wall-clock timers for the phases of a run (ghost fill, step, regrid, ...)."""

from __future__ import annotations

import time
from contextlib import contextmanager

PHASES = ("startup", "ghost_fill", "step", "time_sync", "cfl_check", "regrid", "output",
          "callbacks")


class Timers:
    """Accumulated seconds per phase; ``with timers("step"): ...``.

    GPU work is asynchronous: a phase's time lands in whichever later phase waits for
    the device.  Set ``sync`` to the backend's ``synchronize`` to charge each phase its
    own device time (benchmarks do; it costs one synchronisation per phase).
    """

    def __init__(self, sync=None):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.sync = sync

    @contextmanager
    def __call__(self, phase: str):
        if self.sync is not None:
            self.sync()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def as_dict(self) -> dict:
        return {k: round(v, 6) for k, v in self.seconds.items()}

    def report(self, wall: float) -> str:
        lines = [f"{'phase':<12}{'seconds':>10}{'share':>8}"]
        for k, v in self.seconds.items():
            share = 100.0 * v / wall if wall > 0 else 0.0
            lines.append(f"{k:<12}{v:10.3f}{share:7.1f}%")
        lines.append(f"{'total wall':<12}{wall:10.3f}")
        return "\n".join(lines)
