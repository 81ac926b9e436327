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

import numpy as np
from numba.core.registry import CPUDispatcher

__all__ = ["FastKernel", "blocks_per_wave", "capture_graph", "cuda_device", "fast_kernel",
           "grid_dependency", "kernel_launches", "launch_kernel", "launch_stream",
           "on_stream", "prefetch", "priority_stream", "programmatic_graph",
           "recompile_tree", "words_as_float64"]

_DEVICE: dict = {}
_launches = 0  # see launch_kernel
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


# ---------------------------------------------------------------------------- launches
class FastKernel:
    """A Numba-CUDA kernel whose launches skip Numba's per-launch dispatch.

    Numba types every argument at every launch (a CuPy array through its
    ``__cuda_array_interface__``), looks the specialisation up and wraps each array:
    measured on an H200 (numba-cuda 0.30.4), 230-460 us of Python per launch with 11-13
    arguments, against 15 us for the same launch with the arguments marshalled here.
    A step of an adaptive GeoClaw run launches tens of kernels, so this was most of its
    wall time.

    ``kernel[griddim, blockdim(, stream(, sharedmem))](*args)`` as with Numba.  The
    first launch of each argument signature goes through Numba (it compiles, and its
    result is the reference); later ones marshal the arguments the way Numba's
    ``_Kernel.launch`` does (an array: meminfo, parent, size, itemsize, data pointer,
    shape, strides) and launch the compiled function directly.  Anything else than
    CuPy arrays and scalars (host arrays, Numba device arrays, tuples, records) always
    takes Numba's path.  Attributes not defined here are the dispatcher's.
    """

    __slots__ = ("dispatcher", "_compiled", "_configs", "_fingerprint")

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self._compiled: dict = {}
        self._configs: dict = {}
        self._fingerprint = None  # forestpy.cuda_cache's hash; False: not cacheable

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)

    def __getitem__(self, config):
        got = self._configs.get(config) if _hashable(config) else None
        if got is None:
            got = _FastLaunch(self, config)
            if _hashable(config) and len(self._configs) < 256:
                self._configs[config] = got
        return got


def _hashable(config) -> bool:
    try:
        hash(config)
        return True
    except TypeError:
        return False


def _dims(d):
    if isinstance(d, int):
        return (d, 1, 1)
    d = tuple(int(v) for v in d)
    return d + (1,) * (3 - len(d))


class _FastLaunch:
    __slots__ = ("kernel", "config", "griddim", "blockdim", "stream", "shmem", "_launch_config")

    def __init__(self, kernel: FastKernel, config):
        cfg = config if isinstance(config, tuple) else (config,)
        if len(cfg) < 2:
            raise ValueError("a kernel launch needs griddim and blockdim")
        self.kernel = kernel
        self.config = config
        self.griddim, self.blockdim = _dims(cfg[0]), _dims(cfg[1])
        self.stream = cfg[2] if len(cfg) > 2 else 0
        self.shmem = int(cfg[3]) if len(cfg) > 3 else 0
        self._launch_config = None

    def __call__(self, *args):
        k = self.kernel
        key = _signature_key(args)
        entry = k._compiled.get(key) if key is not None else None
        if entry is None and key is not None:
            entry = _entry_from_disk(k, args)
            if entry is not None:
                k._compiled[key] = entry
        if entry is None:
            k.dispatcher[self.config](*args)
            if key is not None:
                k._compiled[key] = _compiled_entry(k.dispatcher, args, k)
            return
        if entry is False:  # a signature this launcher does not marshal
            k.dispatcher[self.config](*args)
            return
        function, converters = entry
        params = []
        for convert, a in zip(converters, args):
            convert(a, params)
        if self._launch_config is None:
            self._launch_config = _core_launch_config(self)
        config, stream = self._launch_config
        _core_launch()(stream, config, function, *params)


def _signature_key(args):
    """A cheap key of the argument types (array dtype, rank, contiguity; scalar type),
    or None when an argument is of a kind only Numba marshals."""
    key = []
    for a in args:
        t = type(a)
        if t is float or t is int or t is bool:
            key.append(t)
        elif getattr(t, "__module__", "").startswith("cupy") and hasattr(a, "data"):
            f = a.flags
            key.append((a.dtype.num, a.ndim, f.c_contiguous, f.f_contiguous))
        elif isinstance(a, (np.floating, np.integer, np.bool_)):
            key.append(a.dtype.num)
        else:
            return None
    return tuple(key)


def _array_params(a, params):
    params += (0, 0, a.size, a.itemsize, a.data.ptr, *a.shape, *a.strides)


_INTEGERS = {f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)}


def _argument_kinds(argument_types) -> tuple | None:
    """How each argument of a compiled kernel is marshalled ("array", a scalar type),
    or None where its marshalling is not this module's."""
    kinds = []
    # by name: numba-cuda has its own ``types`` module beside numba.core's
    for ty in argument_types:
        name = str(ty)
        if all(hasattr(ty, a) for a in ("ndim", "layout", "dtype")):
            kinds.append("array")
        elif name in ("float64", "float32") or name in _INTEGERS:
            kinds.append(name)
        elif name in ("bool", "boolean"):
            kinds.append("bool")
        else:
            return None
    return tuple(kinds)


def _converters(kinds) -> tuple:
    import ctypes

    out = []
    for kind in kinds:
        if kind == "array":
            out.append(_array_params)
        elif kind == "float64":
            out.append(lambda v, p: p.append(ctypes.c_double(v)))
        elif kind == "float32":
            out.append(lambda v, p: p.append(ctypes.c_float(v)))
        elif kind == "bool":
            out.append(lambda v, p: p.append(bool(v)))
        else:
            ctype = getattr(ctypes, f"c_{kind}")
            out.append(lambda v, p, c=ctype: p.append(c(v)))
    return tuple(out)


def _compiled_entry(dispatcher, args, kernel=None):
    """(compiled function, per-argument converters) of the specialisation Numba chose
    for ``args``, or False where its marshalling is not this module's; kept on disk
    for later processes (:mod:`forestpy.cuda_cache`) when ``kernel`` is given."""
    try:
        argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
        compiled = dispatcher.overloads.get(argtypes)
        if compiled is None and len(dispatcher.overloads) == 1:
            compiled = next(iter(dispatcher.overloads.values()))
        if compiled is None or getattr(compiled, "cooperative", False) or \
                getattr(compiled, "debug", False) or getattr(compiled, "extensions", None):
            return False
        kinds = _argument_kinds(compiled.argument_types)
        if kinds is None or len(kinds) != len(args):
            return False
        library = compiled._codelibrary
        entry = library.get_cufunc().kernel, _converters(kinds)
        if kernel is not None and not library._setup_functions:
            _entry_to_disk(kernel, argtypes, library, kinds)
        return entry
    except Exception:  # noqa: BLE001 - any surprise: Numba's own launch path
        return False


def _cache_key(kernel: FastKernel, argtypes):
    """(fingerprint, argument types, compute capability) of a launch, or None when the
    disk cache is off or the kernel cannot be fingerprinted."""
    from forestpy import cuda_cache

    if not cuda_cache.enabled():
        return None
    if kernel._fingerprint is None:
        kernel._fingerprint = cuda_cache.kernel_fingerprint(kernel.dispatcher) or False
    if not kernel._fingerprint:
        return None
    from numba import cuda

    cc = tuple(cuda.get_current_device().compute_capability)
    return kernel._fingerprint, tuple(str(t) for t in argtypes), cc


def _entry_from_disk(kernel: FastKernel, args):
    """The launch entry of a kernel compiled by an earlier process, or None."""
    try:
        argtypes = tuple(kernel.dispatcher.typeof_pyval(a) for a in args)
        key = _cache_key(kernel, argtypes)
        if key is None:
            return None
        from forestpy import cuda_cache

        got = cuda_cache.load(*key)
        if got is None:
            return None
        entry_name, kinds, cubin = got
        if len(kinds) != len(args):
            return None
        from numba.cuda.cudadrv import devices

        try:
            from cuda.core import ObjectCode
        except ImportError:
            from cuda.core.experimental import ObjectCode
        module = devices.get_context().create_module_image(ObjectCode.from_cubin(cubin))
        return module.get_function(entry_name).kernel, _converters(kinds)
    except Exception:  # noqa: BLE001 - a bad cache entry: compile instead
        return None


def _entry_to_disk(kernel: FastKernel, argtypes, library, kinds) -> None:
    key = _cache_key(kernel, argtypes)
    if key is None:
        return
    from forestpy import cuda_cache

    cubin = library.get_cubin()  # a cuda.core ObjectCode (its bytes: ``code``)
    cuda_cache.store(*key, library._entry_name, kinds, getattr(cubin, "code", cubin))


def _core_launch_config(launch: _FastLaunch):
    from cuda.core import LaunchConfig  # numba-cuda's own dependency
    from numba.cuda.cudadrv import driver

    config = LaunchConfig(grid=launch.griddim, block=launch.blockdim,
                          shmem_size=launch.shmem)
    return config, driver._to_core_stream(launch.stream)


@functools.cache
def _core_launch():
    from cuda.core import launch

    return launch


def fast_kernel(dispatcher):
    """``dispatcher`` wrapped in :class:`FastKernel` on a real GPU; unchanged in the
    CUDA simulator (its kernels run as Python: nothing to save)."""
    from forestpy.backend import cuda_simulator_enabled

    return dispatcher if cuda_simulator_enabled() else FastKernel(dispatcher)


def launch_kernel(kernel, griddim, blockdim, stream, *args) -> None:
    """``kernel[griddim, blockdim, stream](*args)``, counted: every forestpy kernel
    launch goes through here, so that :func:`kernel_launches` gives a step's launches
    (``kernel`` is a :class:`FastKernel` on a real GPU, see :func:`fast_kernel`)."""
    global _launches
    _launches += 1
    if _RECORDING is not None:
        _RECORDING.append(args)
    kernel[griddim, blockdim, stream](*args)


_RECORDING = None  # a list while a CUDA graph is captured: the launches' arguments


@contextmanager
def recording_launches():
    """Inside the block every :func:`launch_kernel`'s arguments are appended to the
    list it yields: a captured graph keeps the arrays it writes alive with it (their
    memory must not be handed to another array while the graph may replay)."""
    global _RECORDING
    saved, _RECORDING = _RECORDING, []
    try:
        yield _RECORDING
    finally:
        _RECORDING = saved


def kernel_launches() -> int:
    """Kernel launches made through :func:`launch_kernel` since the process started (a
    test or a benchmark counts a step's launches as a difference)."""
    return _launches
