"""Single-source kernels: compile a ``numba.njit`` function for the GPU; CUDA graphs.

:func:`cuda_device` turns a plain or ``numba.njit`` Python function into a Numba-CUDA
device function, and does the same, recursively, for every ``numba.njit`` function it
calls through its module globals (:func:`recompile_tree`, which the CPU kernels also use
to compile the same sources with other options).  The pointwise Riemann solvers,
limiters and ghost-fill bodies are therefore written once and run on the CPU (Numba) and
the GPU (Numba-CUDA) from the same source; in the CUDA simulator the device functions
run as Python.
"""

from __future__ import annotations

import functools
import types
from contextlib import contextmanager

from numba.core.registry import CPUDispatcher

__all__ = ["blocks_per_wave", "capture_graph", "cuda_device", "recompile_tree",
           "grid_dependency", "kernel_launches", "launch_kernel", "launch_stream",
           "on_stream", "prefetch", "priority_stream", "programmatic_graph",
           "words_as_float64"]

_DEVICE: dict = {}
# Numba types of the device arrays launched so far, per (dtype, shape, strides)
_ARRAY_TYPES: dict = {}
_CUPY_NDARRAY = None  # cupy.ndarray once a launch on a real GPU has asked for it
_launches = 0
# per (kernel, argument types): the compiled kernel Numba chose, or False where the
# arguments are not all views and Python scalars (see launch_kernel)
_COMPILED: dict = {}
#: Launch a kernel already compiled for the arguments' types without Numba's typing of
#: every argument (:func:`launch_kernel`); False: always through Numba's dispatcher.
TYPE_ONCE = True
# the Numba stream that forestpy's patch kernels launch on (None: the default stream);
# set by on_stream, read by launch_stream
_NUMBA_STREAM = None


def _code_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def recompile_tree(func, compile, cache: dict, follow=None):
    """``compile`` applied to ``func`` (plain or ``numba.njit``) and, recursively, to
    every ``numba.njit`` function it calls through its module globals, each call then
    going to the recompiled callee; results cached per Python function in ``cache``.

    ``compile`` takes a plain Python function (``numba.njit(...)``,
    ``cuda.jit(device=True)``, ...); ``follow(dispatcher)`` says which callees to
    recompile (default: all), the others are called as they are.  The one way of
    running a source written for Numba on another target or with other options.
    """
    py = func.py_func if isinstance(func, CPUDispatcher) else func
    done = cache.get(py)
    if done is not None:
        return done
    new_globals = None
    for name in _code_names(py.__code__):
        g = py.__globals__.get(name)
        if isinstance(g, CPUDispatcher) and (follow is None or follow(g)):
            if new_globals is None:
                new_globals = dict(py.__globals__)
            new_globals[name] = recompile_tree(g, compile, cache, follow)
    if new_globals is not None:
        py2 = types.FunctionType(py.__code__, new_globals, py.__name__, py.__defaults__,
                                 py.__closure__)
        py2.__kwdefaults__ = py.__kwdefaults__
        py2.__qualname__ = py.__qualname__
        py2.__module__ = py.__module__
    else:
        py2 = py
    done = cache[py] = compile(py2)
    return done


def cuda_device(func):
    """Numba-CUDA device function compiled from ``func`` (cached per function).

    ``func`` must be device-compatible: scalar arithmetic, ``math`` functions, indexing
    of the arrays it is given, calls of other such functions; no allocation.
    """
    from numba import cuda

    return recompile_tree(func, cuda.jit(device=True), _DEVICE)


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


@functools.cache
def grid_dependency():
    """``(wait, trigger)``: device functions for programmatic dependent launch (PDL,
    compute capability >= 9.0) -- ``griddepcontrol.wait`` (block until the grids this
    one depends on have completed and their writes are visible) and
    ``griddepcontrol.launch_dependents`` (the grids that depend on this one may be
    scheduled now).  A kernel that calls ``wait()`` before its first access to memory
    another kernel of the graph writes may follow its predecessor through a
    programmatic edge (:func:`programmatic_graph`): its launch and everything before
    the ``wait()`` overlap the predecessor's tail.  Outside such an edge both are
    no-ops, as they are in the simulator."""
    from numba import cuda

    from forestpy.backend import cuda_simulator_enabled

    if cuda_simulator_enabled():

        @cuda.jit(device=True)
        def wait():
            pass

        @cuda.jit(device=True)
        def trigger():
            pass

    else:
        wait = _inline_ptx("griddepcontrol.wait;")
        trigger = _inline_ptx("griddepcontrol.launch_dependents;")
    return wait, trigger


@functools.cache
def prefetch():
    """Device function ``prefetch(a, i)``: start fetching the line of element ``i`` of
    the C-contiguous array ``a`` (flat index) into the multiprocessor's L1 (and L2),
    without waiting for it.  An L1 line is not kept coherent with other
    multiprocessors' writes, so before a :func:`grid_dependency` ``wait()`` prefetch
    only what no kernel of the graph writes (a factorisation's factors).  A no-op in
    the simulator."""
    from numba import cuda

    from forestpy.backend import cuda_simulator_enabled

    if cuda_simulator_enabled():

        @cuda.jit(device=True)
        def fetch(a, i):
            pass

    else:
        fetch = _prefetch_intrinsic("prefetch.global.L1 [$0];")
    return fetch


@functools.cache
def words_as_float64():
    """Device function ``words_as_float64(lo, hi)``: the float64 whose IEEE bits are the
    32-bit words ``lo`` (low) and ``hi`` (high) -- integers, truncated to 32 bits; a
    register pair on the GPU, no instruction of its own (64-bit integer shifts and
    masks to build the same bits cost two instructions each)."""
    from numba import cuda

    from forestpy.backend import cuda_simulator_enabled

    if cuda_simulator_enabled():
        import numpy as np

        @cuda.jit(device=True)
        def cast(lo, hi):
            bits = ((int(hi) & 0xFFFFFFFF) << 32) | (int(lo) & 0xFFFFFFFF)
            return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])

    else:
        from numba import types as nbtypes

        def typer(typingctx, lo, hi):
            if not (isinstance(lo, nbtypes.Integer) and isinstance(hi, nbtypes.Integer)):
                return None

            def codegen(context, builder, signature, args):
                from llvmlite import ir

                i32 = ir.IntType(32)
                pair = ir.Constant(ir.VectorType(i32, 2), None)
                for k in range(2):
                    word = builder.trunc(
                        context.cast(builder, args[k], signature.args[k], nbtypes.int64), i32)
                    pair = builder.insert_element(pair, word, ir.Constant(i32, k))
                return builder.bitcast(pair, ir.DoubleType())

            return nbtypes.float64(lo, hi), codegen

        typer.__name__ = "words_as_float64"
        cast = _intrinsic()(typer)
    return cast


def _intrinsic():
    try:
        from numba.cuda.extending import intrinsic
    except ImportError:  # numba's built-in CUDA target
        from numba.core.extending import intrinsic
    return intrinsic


def _prefetch_intrinsic(instruction):
    from llvmlite import ir
    from numba import types as nbtypes

    def typer(typingctx, a, i):
        if not isinstance(a, nbtypes.Array) or not isinstance(i, nbtypes.Integer):
            return None

        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, value=args[0])
            idx = context.cast(builder, args[1], signature.args[1], nbtypes.intp)
            addr = builder.ptrtoint(builder.gep(ary.data, [idx]), ir.IntType(64))
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), instruction,
                               "l", side_effect=True)
            builder.call(asm, [addr])
            return context.get_dummy_value()

        return nbtypes.void(a, i), codegen

    typer.__name__ = "ptx_" + instruction.split(" ")[0].replace(".", "_")
    return _intrinsic()(typer)


def _inline_ptx(instruction):
    """A device function of no arguments that is one PTX ``instruction`` (with a memory
    clobber: the compiler keeps loads and stores on their side of it)."""
    from llvmlite import ir
    from numba import types as nbtypes

    def typer(typingctx):
        def codegen(context, builder, signature, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), instruction, "~{memory}",
                               side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()

        return nbtypes.void(), codegen

    typer.__name__ = "ptx_" + instruction.split(";")[0].replace(".", "_")
    return _intrinsic()(typer)


class _ProgrammaticGraph:
    """An instantiated CUDA graph (``cuda.bindings``) with ``launch(stream)`` as a CuPy
    graph's; keeps the CuPy graph it was made from alive."""

    def __init__(self, source, graph_exec):
        from cuda.bindings import driver

        self._source = source
        self._exec = graph_exec
        self._launch = driver.cuGraphLaunch
        self._stream = (None, None)  # (CuPy stream pointer, its driver handle)

    def launch(self, stream):
        ptr, handle = self._stream
        if ptr != stream.ptr:  # the handle made once per stream, not at every launch
            from cuda.bindings import driver

            ptr, handle = self._stream = (stream.ptr, driver.CUstream(stream.ptr))
        _checked(self._launch(self._exec, handle))

    def __del__(self):
        try:
            from cuda.bindings import driver

            driver.cuGraphExecDestroy(self._exec)
        except Exception:  # noqa: BLE001 - interpreter shutdown, context gone
            pass


def _checked(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err!r}")
    return rest[0] if len(rest) == 1 else rest


def programmatic_graph(graph):
    """The CuPy ``graph`` (from :func:`capture_graph`) instantiated with every edge
    between two kernel nodes made a programmatic one: the later kernel is launched as
    soon as every block of the earlier has called ``trigger()`` (or ended) and runs up
    to its ``wait()`` while the earlier finishes (:func:`grid_dependency`).  Every
    kernel of ``graph`` must call ``wait()`` before touching memory that a kernel
    before it writes or reads.  Raises when the driver lacks the API (callers keep
    the plain graph)."""
    from cuda.bindings import driver

    h = driver.CUgraph(graph.graph)
    n = _checked(driver.cuGraphGetEdges(h, 0))[-1]
    frm, to, data, n = _checked(driver.cuGraphGetEdges(h, n))
    kernel = driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
    keep = [
        i for i in range(n)
        if _checked(driver.cuGraphNodeGetType(frm[i])) == kernel
        and _checked(driver.cuGraphNodeGetType(to[i])) == kernel
    ]
    if keep:
        f = [frm[i] for i in keep]
        t = [to[i] for i in keep]
        _checked(driver.cuGraphRemoveDependencies(h, f, t, [data[i] for i in keep], len(keep)))
        new = []
        for _ in keep:
            e = driver.CUgraphEdgeData()
            e.type = driver.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
            e.from_port = driver.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
            e.to_port = 0
            new.append(e)
        _checked(driver.cuGraphAddDependencies(h, f, t, new, len(keep)))
    return _ProgrammaticGraph(graph, _checked(driver.cuGraphInstantiate(h, 0)))


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


# --------------------------------------------------------------------------------------
# kernel launches with CuPy arguments
# --------------------------------------------------------------------------------------


class _DevicePointer(int):
    """A device address as Numba's launch reads it: ``.value`` (ctypes-style, older
    drivers' code path) or ``int()`` (the NVIDIA bindings' one)."""

    @property
    def value(self):
        return int(self)


class _DeviceArrayView:
    """What a Numba-CUDA launch reads of a device array argument, taken from a CuPy
    array's own attributes.

    A CuPy argument costs a launch two conversions through ``__cuda_array_interface__``
    (Numba's typing makes a ``DeviceNDArray`` of it, its argument marshalling another:
    each parses the interface dictionary and builds a device-memory object), tens of
    microseconds of Python per array.  Numba passes an object marked as device memory
    (``__cuda_memory__``) straight through, and types one that carries
    ``_numba_type_`` without converting it: this view is such an object, made from
    the array's pointer, shape and strides, with the type Numba gave the first array
    of the same dtype, shape and strides.  It holds the CuPy array for the launch.
    """

    __cuda_ndarray__ = True
    __cuda_memory__ = True
    __slots__ = ("_numba_type_", "size", "dtype", "ndim", "shape", "strides",
                 "device_ctypes_pointer", "_array")

    def __init__(self, a, numba_type):
        self._array = a
        self._numba_type_ = numba_type
        self.size = a.size
        self.dtype = a.dtype
        self.ndim = a.ndim
        self.shape = a.shape
        self.strides = a.strides
        self.device_ctypes_pointer = _DevicePointer(a.data.ptr)


def _array_type(kernel, a):
    """Numba's type of the CuPy array ``a`` as ``kernel``'s dispatcher types it (made
    once per dtype, shape and strides: the layout follows from them)."""
    key = (a.dtype.str, a.shape, a.strides)
    t = _ARRAY_TYPES.get(key)
    if t is None:
        from numba import cuda

        if len(_ARRAY_TYPES) > 4096:  # plan lengths change at every regrid
            _ARRAY_TYPES.clear()
        t = _ARRAY_TYPES[key] = kernel.typeof_pyval(cuda.as_cuda_array(a, sync=False))
    return t


def launch_kernel(kernel, griddim, blockdim, stream, *args) -> None:
    """``kernel[griddim, blockdim, stream](*args)``, every CuPy array argument passed
    as a :class:`_DeviceArrayView` (no per-launch conversion to a Numba device array).
    Once Numba has typed and compiled the kernel for a combination of argument types
    (array types, Python ``int``/``float``/``bool``), later launches with the same
    types go straight to that compiled kernel's launch, without Numba typing each
    argument again (:data:`TYPE_ONCE`).  Every forestpy kernel launch goes through
    here, so :func:`kernel_launches` counts them.  In the CUDA simulator the arguments
    are passed as they are."""
    global _launches, _CUPY_NDARRAY
    _launches += 1
    cupy_array = _CUPY_NDARRAY
    if cupy_array is None:
        from forestpy.backend import cuda_simulator_enabled

        if cuda_simulator_enabled():
            kernel[griddim, blockdim, stream](*args)
            return
        import cupy

        cupy_array = _CUPY_NDARRAY = cupy.ndarray
    args = [_DeviceArrayView(a, _array_type(kernel, a)) if type(a) is cupy_array else a
            for a in args]
    config = kernel[griddim, blockdim, stream]  # Numba caches the configuration
    if not TYPE_ONCE:
        config(*args)
        return
    key = (kernel, tuple(a._numba_type_ if type(a) is _DeviceArrayView else
                         (type(a) if type(a) in _SCALARS else None) for a in args))
    compiled = _COMPILED.get(key)
    if compiled:
        # what Numba's dispatcher does after typing the arguments (the launch proper)
        compiled.launch(args, config.griddim, config.blockdim, config.stream,
                        config.sharedmem)
        return
    config(*args)  # types, compiles if needed, launches
    if compiled is None:
        plain = None in key[1] or len(_COMPILED) > 4096
        _COMPILED[key] = False if plain else kernel.overloads.get(
            tuple(kernel.typeof_pyval(a) for a in args), False)


# Python scalars a kernel argument may be, each always typed the same by Numba
_SCALARS = (int, float, bool)


def kernel_launches() -> int:
    """Kernel launches made through :func:`launch_kernel` since the process started (a
    test or a benchmark counts a step's launches as a difference)."""
    return _launches
