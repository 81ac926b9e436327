"""The values that change from one step to the next, in one block of device memory.

A GPU step replayed as a CUDA graph (:mod:`forestpy.step_graph`) cannot take ``dt``,
``t`` or a boundary forcing's value as kernel arguments: a graph keeps the arguments it
was captured with.  On a GPU backend the kernels of a step therefore read such values
from a :class:`StepParams` block instead (:func:`device_scalar` reads a one-entry view
as a number and leaves a number as it is, so the CPU loops and direct calls with numbers
compile from the same source).

Every user of the block (the step kernel's ``dt``, a hook's ``t``/``dt``/forcing value,
GeoClaw's source constants) owns a fixed range of it and gives a function of
``(t, dt)`` that computes its values on the host.  Outside a capture :meth:`values`
computes and uploads them (one small copy on the launch stream, ordered before the
kernels that read them).  While a graph is captured the copies are recorded from a
page-locked host mirror and the functions kept, so that before each replay
:meth:`refresh` computes every value for the new ``(t, dt)`` into the mirror and the
graph's own copies carry them to the device.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

__all__ = ["StepParams", "device_scalar", "dt_argument"]


def device_scalar(x):
    """``x[0]`` for an array (a view of a :class:`StepParams` block), ``x`` for a number."""
    return x[0] if getattr(x, "ndim", 0) else x


@overload(device_scalar, target="generic")
def _device_scalar(x):
    if isinstance(x, types.Array):
        return lambda x: x[0]
    return lambda x: x


def dt_argument(value):
    """A kernel argument for a per-step value: a device view as it is (reading it on the
    host would synchronise), a number as a float."""
    return value if getattr(value, "ndim", 0) else float(value)


class CaptureError(RuntimeError):
    """A step could not be captured as a graph (it does something a replay cannot
    repeat); the simulation then steps without graphs."""


class StepParams:
    """A device block of per-step float64 values with a host mirror (see the module
    docstring).  ``size``: entries (a user that does not fit raises)."""

    def __init__(self, backend, size: int = 512):
        self.backend = backend
        self.size = int(size)
        self.dev = backend.xp.zeros(self.size, dtype=np.float64)
        self._real_gpu = backend.is_gpu and not getattr(backend, "simulator", False)
        if self._real_gpu:
            import cupyx

            self.host = cupyx.empty_pinned(self.size, dtype=np.float64)
        else:
            self.host = np.zeros(self.size, dtype=np.float64)
        self._slots: dict = {}
        self._end = 0
        self._capture = None  # (t, dt, [(offset, n, fn)]) while a graph is captured

    def slot(self, key, n: int) -> int:
        """The first entry of the ``n`` entries owned by ``key`` (made on first use)."""
        got = self._slots.get(key)
        if got is not None:
            if got[1] != n:
                raise ValueError(f"step parameters {key!r}: {n} values, was {got[1]}")
            return got[0]
        if self._end + n > self.size:
            raise ValueError(f"the step parameter block holds {self.size} values; "
                             f"{key!r} needs {n} more after {self._end}")
        self._slots[key] = (self._end, n)
        self._end += n
        return self._end - n

    def values(self, key, fn, t: float, dt: float):
        """The device view of ``key``'s values ``fn(t, dt)`` for the kernels launched
        next (uploaded, or recorded while a graph is captured)."""
        vals = np.asarray(fn(t, dt), dtype=np.float64).reshape(-1)
        off = self.slot(key, vals.size)
        view = self.dev[off : off + vals.size]
        if self._capture is not None:
            ct, cdt, recorded = self._capture
            if t != ct or dt not in (cdt, 0.0):  # 0: a boundary's call (no step)
                raise CaptureError(f"step parameters {key!r} asked for t={t}, dt={dt} in a "
                                   f"step captured at t={ct}, dt={cdt}")
            self.host[off : off + vals.size] = vals
            recorded.append((off, vals.size, fn, dt != 0.0))
            import cupy

            # the runtime's copy, which a capture records (CuPy's set refuses to)
            cupy.cuda.runtime.memcpyAsync(
                view.data.ptr, self.host.ctypes.data + 8 * off, 8 * vals.size,
                cupy.cuda.runtime.memcpyHostToDevice, cupy.cuda.get_current_stream().ptr)
        elif self._real_gpu:
            view.set(vals)  # pageable: staged before returning, ordered on the stream
        else:
            view[...] = vals
        return view

    @property
    def capturing(self) -> bool:
        """Whether a graph is being captured: hooks then keep no host counts (the
        replays do, :mod:`forestpy.step_graph`)."""
        return self._capture is not None

    def begin_capture(self, t: float, dt: float) -> None:
        self._capture = (float(t), float(dt), [])

    def end_capture(self) -> list:
        """The recorded ``(offset, n, fn, with_dt)`` of the capture that ends."""
        recorded = [] if self._capture is None else self._capture[2]
        self._capture = None
        return recorded

    def refresh(self, recorded, t: float, dt: float) -> None:
        """Write every recorded user's values for ``(t, dt)`` into the host mirror (the
        replayed graph copies them to the device)."""
        for off, n, fn, with_dt in recorded:
            vals = fn(t, dt if with_dt else 0.0)
            self.host[off : off + n] = np.asarray(vals, dtype=np.float64).reshape(-1)
