"""Say when Numba compiles, and measure it.

The first run of a Riemann solver on a machine compiles its kernels (a minute or more
on 2 cores); later runs load them from Numba's disk cache.  :class:`CompileWatch`
listens to Numba's ``numba:compile`` event, which fires only for a real compilation
(never for a cache load): before the first compilation of each *label* (what is being
compiled, e.g. ``"shallow_roe"``) it writes one line, and it adds up the compilation
time, also into the open phase of a :class:`~forestpy.timers.Timers` (``timers``), so
that a run's rate of cell updates can leave compilation out.

    from forestpy.jit import CompileWatch
    with CompileWatch(sys.stderr, label="shallow_roe") as watch:
        sim.run()
    print(watch.seconds, "s compiling")
"""

from __future__ import annotations

import time

from numba.core import event

__all__ = ["CompileWatch"]


class CompileWatch(event.Listener):
    """Count and time Numba compilations while installed (``with CompileWatch(...)``).

    Parameters
    ----------
    stream : file, optional
        Where the notice goes (``None``: no notice).
    label : str
        What is compiled, named in the notice; change it between stages (``watch.label
        = "..."``): the notice is written once per label.
    timers : :class:`~forestpy.timers.Timers`, optional
        Receives each compilation's seconds (:meth:`~forestpy.timers.Timers.add_compile`).

    ``seconds`` is the total compilation time and ``count`` the number of top-level
    compilations (a function compiled with its callees counts once).
    """

    def __init__(self, stream=None, label: str = "kernels", timers=None):
        self.stream = stream
        self.label = label
        self.timers = timers
        self.seconds = 0.0
        self.count = 0
        self._depth = 0
        self._t0 = 0.0
        self._announced: set[str] = set()

    def notice(self) -> str:
        return (f"forestpy: compiling kernels for {self.label} (first run on this machine; "
                "cached for later runs) ...")

    def on_start(self, event) -> None:
        if self._depth == 0:
            self._t0 = time.perf_counter()
            if self.stream is not None and self.label not in self._announced:
                self._announced.add(self.label)
                tty = getattr(self.stream, "isatty", None)
                erase = "\r\033[K" if tty and tty() else ""  # over a progress bar
                self.stream.write(f"{erase}{self.notice()}\n")
                self.stream.flush()
        self._depth += 1

    def on_end(self, event) -> None:
        self._depth -= 1
        if self._depth == 0:
            elapsed = time.perf_counter() - self._t0
            self.seconds += elapsed
            self.count += 1
            if self.timers is not None:
                self.timers.add_compile(elapsed)

    def __enter__(self) -> CompileWatch:
        event.register("numba:compile", self)
        return self

    def __exit__(self, *exc) -> None:
        event.unregister("numba:compile", self)

