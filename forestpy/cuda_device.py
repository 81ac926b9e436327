"""Single-source kernels: compile a ``numba.njit`` function for the GPU; CUDA graphs.

:func:`cuda_device` turns a plain or ``numba.njit`` Python function into a Numba-CUDA
device function, and does the same, recursively, for every ``numba.njit`` function it
calls through its module globals.  The pointwise Riemann solvers, limiters and ghost-fill
bodies are therefore written once and run on the CPU (Numba) and the GPU (Numba-CUDA)
from the same source; in the CUDA simulator the device functions run as Python.
"""

from __future__ import annotations

import types
from contextlib import contextmanager

from numba.core.registry import CPUDispatcher

__all__ = ["blocks_per_wave", "capture_graph", "cuda_device", "launch_stream", "on_stream",
           "priority_stream"]

_DEVICE: dict = {}
# the Numba stream that forestpy's patch kernels launch on (None: the default stream);
# set by on_stream, read by launch_stream
_NUMBA_STREAM = None


def _code_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def cuda_device(func):
    """Numba-CUDA device function compiled from ``func`` (cached per function).

    ``func`` must be device-compatible: scalar arithmetic, ``math`` functions, indexing
    of the arrays it is given, calls of other such functions; no allocation.
    """
    from numba import cuda

    py = func.py_func if isinstance(func, CPUDispatcher) else func
    done = _DEVICE.get(py)
    if done is not None:
        return done
    new_globals = None
    for name in _code_names(py.__code__):
        g = py.__globals__.get(name)
        if isinstance(g, CPUDispatcher):
            if new_globals is None:
                new_globals = dict(py.__globals__)
            new_globals[name] = cuda_device(g)
    if new_globals is not None:
        py2 = types.FunctionType(py.__code__, new_globals, py.__name__, py.__defaults__,
                                 py.__closure__)
        py2.__kwdefaults__ = py.__kwdefaults__
        py2.__qualname__ = py.__qualname__
        py2.__module__ = py.__module__
    else:
        py2 = py
    dev = cuda.jit(device=True)(py2)
    _DEVICE[py] = dev
    return dev


def capture_graph(launch, stream=None):
    """Record into a CUDA graph the Numba kernel launches that ``launch(st)`` makes on
    the Numba stream ``st``: CuPy's stream capture of ``stream`` (default: a new
    blocking stream, so that work on the legacy default stream and the graph's are
    ordered), after a device synchronise.  Returns ``(graph, stream)``;
    ``graph.launch(stream)`` replays the launches.  Raises whatever the capture raises
    (callers fall back to plain launches)."""
    import cupy
    from numba import cuda

    if stream is None:
        stream = cupy.cuda.Stream(non_blocking=False)
    cuda.synchronize()
    stream.begin_capture()
    try:
        launch(cuda.external_stream(stream.ptr))
    finally:
        graph = stream.end_capture()
    return graph, stream


def blocks_per_wave(kernel, blockdim) -> int | None:
    """Blocks of the compiled Numba ``kernel`` (its first specialisation) with
    ``blockdim`` threads that the device runs at once (the occupancy API times the
    multiprocessors); None before it is compiled, or in the simulator."""
    try:
        compiled = next(iter(kernel.overloads.values()))
        return int(compiled.max_cooperative_grid_blocks(blockdim))
    except Exception:  # noqa: BLE001 - not compiled yet, simulator, no such query
        return None


def launch_stream():
    """The Numba stream for forestpy's patch-kernel launches (ghost fill, physical
    boundaries, regrid transfer): 0, the default stream, unless inside
    :func:`on_stream`."""
    return 0 if _NUMBA_STREAM is None else _NUMBA_STREAM


@contextmanager
def on_stream(stream):
    """Inside the block, CuPy work (the current CuPy stream) and forestpy's patch-kernel
    launches (:func:`launch_stream`) go to the CuPy ``stream``.  Kernels launched
    elsewhere without a stream argument still go to the default stream, so work that
    must be ordered with the block's has to go through one of these two."""
    from numba import cuda

    global _NUMBA_STREAM
    saved = _NUMBA_STREAM
    _NUMBA_STREAM = cuda.external_stream(stream.ptr)
    try:
        with stream:
            yield
    finally:
        _NUMBA_STREAM = saved


def priority_stream():
    """A new non-blocking CuPy stream of the device's highest priority: its kernels'
    blocks are scheduled before the waiting blocks of lower-priority streams (a long
    kernel already running on the default stream leaves room as its blocks finish).
    A CuPy without stream priorities gives a plain non-blocking stream (the same order
    of work, only less eager)."""
    import cupy

    highest = -(2**20)  # CUDA clamps a priority to the device's range: the highest one
    try:
        return cupy.cuda.Stream(non_blocking=True, priority=highest)
    except TypeError:
        return cupy.cuda.Stream(non_blocking=True)
