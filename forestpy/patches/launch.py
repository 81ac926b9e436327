"""The launcher of pointwise bodies over a batch of patches, on both backends.

The ghost fill, the physical boundaries, the regrid transfer and the hooks (sources,
boundary forcing: :mod:`forestpy.hooks`) are written as ``numba.njit`` bodies that
update one plan entry or one cell of one patch.  A launcher runs such a body over all
entries or all interior cells of a batch of patches (AMReX's ``ParallelFor``: the loop
is the launcher's, the work the body's):

* :func:`for_each_entry`, :func:`for_each_cell`: a generated ``numba.njit(parallel=True)``
  ``prange`` loop on the CPU, one CUDA kernel (a thread per entry or cell) on the GPU;
  optionally over a subset ``rows`` of the patches, and with per-thread scratch arrays
  (``scratch``: a body that needs a few small arrays, e.g. one cell's components).
  The CPU loops are module files cached on disk (:mod:`forestpy.kernel_files`): a
  later process does not compile them again.
* :func:`for_each_patch`: a per-patch reduction then an update with its result
  (:class:`PatchReduction`): one CUDA block per patch (a deterministic tree in shared
  memory, no floating-point atomics) or one ``prange`` iteration per patch; the
  per-patch results summed over the batch in a fixed order (the last block to finish
  sums them), and an optional domain-wide reduce-and-update that the last block runs
  when the totals ask for it.  One launch for a source that needs patch sums.

:func:`launch` and :func:`launch_cells` are the GPU halves, for the modules whose CPU
loops are their own (``cache=True`` compiled).  Kernels are compiled the first time a
GPU path asks for them, so CPU-only runs never import ``numba.cuda``.

All array arguments must be device arrays (CuPy on a GPU; in Numba's CUDA simulator
NumPy arrays are the device arrays): a host NumPy array handed to a kernel on a real GPU
would be copied to the device and back at every launch, so :func:`launch` refuses them.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from forestpy.cuda_device import cuda_device, fast_kernel, launch_kernel, launch_stream
from forestpy.kernel_files import cache_dir, function_fingerprint, import_file, write_once

__all__ = ["THREADS", "PatchReduction", "blocks", "component_mask", "for_each_cell",
           "for_each_entry", "for_each_patch", "launch", "launch_cells", "require_device"]

THREADS = 256
_KERNELS: dict = {}
_CONSTANTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def blocks(n: int) -> int:
    """Blocks of :data:`THREADS` threads covering ``n`` threads."""
    return (n + THREADS - 1) // THREADS


def require_device(backend, *arrays) -> None:
    """Refuse host NumPy arrays on a real GPU (see the module docstring)."""
    if getattr(backend, "simulator", False):
        return  # in the simulator NumPy arrays are the device arrays
    for a in arrays:
        if isinstance(a, np.ndarray):
            raise TypeError(
                "a GPU kernel received a host NumPy array: upload plans once per regrid "
                "(GhostPlan.to(backend), backend.to_device) and keep fields on the device"
            )


def component_mask(backend, meqn: int, components):
    """Device boolean mask (meqn,) of ``components``, uploaded once per backend and value.

    Used for the positive components of the ghost fill and the components negated at
    walls, so that a step uploads nothing.
    """
    key = (int(meqn), tuple(sorted({int(c) for c in components})))
    per_backend = _CONSTANTS.setdefault(backend, {})
    mask = per_backend.get(key)
    if mask is None:
        host = np.zeros(meqn, dtype=np.bool_)
        host[list(key[1])] = True
        mask = per_backend[key] = backend.to_device(host)
    return mask


def launch(body, n: int, *args, backend=None) -> None:
    """Run ``body(*args, k)`` for ``k < n`` on the GPU, one thread each (nothing when
    ``n == 0``): the GPU half of :func:`for_each_entry`, for bodies whose CPU loop is
    their own module's (compiled once, cached on disk)."""
    if backend is None:
        raise TypeError("launch runs on a GPU backend; pass backend=")
    for_each_entry(body, n, *args, backend=backend)


def launch_cells(body, n: int, my: int, mx: int, mbc: int, *args, backend=None) -> None:
    """Run ``body(*args, k, j, i, mbc)`` for every interior cell ``(j, i)`` of the
    ``my x mx`` cells of ``n`` patches ``k``, one thread per cell: the GPU half of
    :func:`for_each_cell`."""
    if backend is None:
        raise TypeError("launch_cells runs on a GPU backend; pass backend=")
    for_each_cell(body, n, my, mx, mbc, *args, backend=backend)


# ---------------------------------------------------------------- both backends
# Generated sources.  ``{pre}`` is the body's leading arguments, each followed by ", "
# (nothing when it has none); ``{k}`` the patch of batch row ``r`` (``rows[r]`` or
# ``r``); ``{scratch}`` the per-thread scratch arrays, each preceded by ", ".  A CUDA
# kernel takes a tuple argument as its elements (``{params}``) and rebuilds it
# (``{unpack}``): launches whose arguments are arrays and scalars only take the fast path
# of forestpy.cuda_device.fast_kernel.
_CPU_ENTRIES = """
def loop(n, {pre}):
    for chunk in numba.prange((n + {chunk} - 1) // {chunk}):
{cpu_alloc}
        for e in range(chunk * {chunk}, min(n, (chunk + 1) * {chunk})):
            body({pre}e{scratch})
"""
_GPU_ENTRIES = """
def kernel(n, {params}):
{unpack}
    e = cuda.grid(1)
    if e < n:
{gpu_alloc}
        body({pre}e{scratch})
"""
_CPU_CELLS = """
def loop(n, my, mx, mbc, rows, {pre}):
    for r in numba.prange(n):
        k = np.int64({k})  # a prange index may be unsigned: int64 mixes with it as float
{cpu_alloc}
        for j in range(my):
            for i in range(mx):
                body({pre}k, j, i, mbc{scratch})
"""
_GPU_CELLS = """
def kernel(n, my, mx, mbc, rows, {params}):
{unpack}
    t = cuda.grid(1)
    if t < n * my * mx:
        c = t % (my * mx)
        r = t // (my * mx)
        k = {k}
{gpu_alloc}
        body({pre}k, c // mx, c % mx, mbc{scratch})
"""
# The GPU's summation order on the CPU: ``T`` partial sums (thread ``t`` takes the
# entries ``t, t + T, ...``) added pairwise as the block's tree does, so that both
# backends give the same bits.
_CPU_PATCHES = """
def loop(n, my, mx, mbc, rows, partial, totals, nall, {pre}):
    ncell = my * mx
    for r in numba.prange(n):
        k = np.int64({k})  # a prange index may be unsigned: int64 mixes with it as float
        acc = np.zeros(({T}, {na}))
        vals = np.zeros({nv})
{cpu_alloc}
        for c in range(ncell):
            cell_reduce({pre}k, c // mx, c % mx, mbc, acc[c % {T}]{scratch})
        w = {T} // 2
        while w > 0:
            for t in range(w):
                for a in range({nacc}):
                    acc[t, a] += acc[t + w, a]
            w //= 2
        patch({pre}k, acc[0], vals)
        for b in range({nvals}):
            partial[r, b] = vals[b]
        # apply>
        for j in range(my):
            for i in range(mx):
                cell_apply({pre}k, j, i, mbc, vals{scratch})
        # <apply
    tot = np.zeros(({T}, {nv}))
    for s in range(n):
        for b in range({nvals}):
            tot[s % {T}, b] += partial[s, b]
    w = {T} // 2
    while w > 0:
        for t in range(w):
            for b in range({nvals}):
                tot[t, b] += tot[t + w, b]
        w //= 2
    for b in range({nt}):
        totals[b] = 0.0
    for b in range({nvals}):
        totals[b] = tot[0, b]
    # domain>
    if domain_needed({pre}totals):
        sums = np.zeros(({T}, {na}))
{cpu_alloc_1}
        for c in range(nall * ncell):
            domain_reduce({pre}totals, c // ncell, (c % ncell) // mx, c % mx, mbc,
                          sums[c % {T}]{scratch})
        w = {T} // 2
        while w > 0:
            for t in range(w):
                for a in range({ndomain}):
                    sums[t, a] += sums[t + w, a]
            w //= 2
        for a in range({ndomain}):
            totals[{nvals} + a] = sums[0, a]
    # <domain
    # finish>
    finish({pre}totals)
    # <finish
    # domain_apply>
    if domain_needed({pre}totals):
        for kk in numba.prange(nall):
{cpu_alloc_2}
            for j in range(my):
                for i in range(mx):
                    domain_apply({pre}totals, kk, j, i, mbc{scratch})
    # <domain_apply
"""
# one block per patch; ``tree_*`` sums acc[:m] over the block into buf[a * T]
_GPU_PATCHES = """
def kernel(n, my, mx, mbc, rows, partial, totals, ticket, nall, {params}):
{unpack}
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    k = {k}
    ncell = my * mx
    acc = cuda.local.array({na}, float64)
    buf = cuda.shared.array({nbuf}, float64)
    vals = cuda.shared.array({nv}, float64)
    last = cuda.shared.array(1, int32)
{gpu_alloc}
    for a in range({nacc}):
        acc[a] = 0.0
    for c in range(t, ncell, {T}):
        cell_reduce({pre}k, c // mx, c % mx, mbc, acc{scratch})
{tree_acc}
    if t == 0:
        for a in range({nacc}):
            acc[a] = buf[a * {T}]
        patch({pre}k, acc, vals)
        for b in range({nvals}):
            partial[r, b] = vals[b]
    cuda.syncthreads()
    # apply>
    for c in range(t, ncell, {T}):
        cell_apply({pre}k, c // mx, c % mx, mbc, vals{scratch})
    # <apply
    if t == 0:
        cuda.threadfence()  # the partial results visible before the ticket is taken
        last[0] = 1 if cuda.atomic.add(ticket, 0, 1) == n - 1 else 0
    cuda.syncthreads()
    if last[0] == 1:  # the last block to finish: totals in a fixed order, no float atomics
        cuda.threadfence()
        for b in range({nvals}):
            acc[b] = 0.0
        for s in range(t, n, {T}):
            for b in range({nvals}):
                acc[b] += partial[s, b]
{tree_vals}
        if t == 0:
            for b in range({nvals}):
                totals[b] = buf[b * {T}]
            for b in range({nvals}, {nt}):
                totals[b] = 0.0
            ticket[0] = 0
        cuda.syncthreads()
        # domain>
        if domain_needed({pre}totals):
            for a in range({ndomain}):
                acc[a] = 0.0
            for c in range(t, nall * ncell, {T}):
                domain_reduce({pre}totals, c // ncell, (c % ncell) // mx, c % mx, mbc, acc{scratch})
{tree_domain}
            if t == 0:
                for a in range({ndomain}):
                    totals[{nvals} + a] = buf[a * {T}]
            cuda.syncthreads()
        # <domain
        # finish>
        if t == 0:
            finish({pre}totals)
        cuda.syncthreads()
        # <finish
        # domain_apply>
        if domain_needed({pre}totals):
            for c in range(t, nall * ncell, {T}):
                domain_apply({pre}totals, c // ncell, (c % ncell) // mx, c % mx, mbc{scratch})
        # <domain_apply
"""
_TREE = """
for a in range({m}):
    buf[a * {T} + t] = acc[a]
cuda.syncthreads()
w = {T} // 2
while w > 0:
    if t < w:
        for a in range({m}):
            buf[a * {T} + t] += buf[a * {T} + t + w]
    cuda.syncthreads()
    w //= 2
"""
_CPU_CHUNK = 64  # entries per prange iteration (the scratch arrays are made once per chunk)
_CPU: dict = {}


@dataclass(frozen=True, eq=False)
class PatchReduction:
    """The bodies of a per-patch reduction launch (:func:`for_each_patch`).

    With ``args`` the launch's arguments and ``(k, j, i)`` an interior cell (``j``,
    ``i`` from 0) of patch ``k``:

    ``cell_reduce(*args, k, j, i, mbc, acc, *scratch)``
        adds the cell's contributions to ``acc`` (``nacc`` float64, zero at the start
        of the patch); the launcher sums them over the patch.
    ``patch(*args, k, sums, vals)``
        the patch's results ``vals`` (``nvals``) from its sums (once per patch); they
        are kept in ``partial[r]`` for batch row ``r``.
    ``cell_apply(*args, k, j, i, mbc, vals, *scratch)`` (optional)
        updates the cell with its patch's results, in the same launch.

    Then, once per launch, on ``totals`` (``nvals + ndomain + 1`` float64: ``vals``
    summed over the batch in batch order, the domain sums, one free slot):

    ``domain_needed(*args, totals) -> bool`` (optional), whether the domain-wide pass
    runs: ``domain_reduce(*args, totals, k, j, i, mbc, acc, *scratch)`` over every cell
    of every patch ``k < nall`` into ``totals[nvals:nvals + ndomain]`` (zero when it
    does not run);
    ``finish(*args, totals)`` (optional), e.g. a factor derived from the totals into
    the last slot;
    ``domain_apply(*args, totals, k, j, i, mbc, *scratch)`` (optional) over every
    cell of every patch again, when ``domain_needed`` (which ``finish`` must not
    change) says so.

    On the GPU the per-launch part is run by the one block that finishes last: meant
    for rare corrections and small epilogues.  All bodies are ``numba.njit`` functions
    (or plain functions Numba can compile) following the rules of
    :func:`~forestpy.cuda_device.cuda_device`.
    """

    cell_reduce: object
    patch: object
    nacc: int
    nvals: int
    cell_apply: object = None
    domain_needed: object = None
    domain_reduce: object = None
    ndomain: int = 0
    finish: object = None
    domain_apply: object = None


def _strip(source: str, part: str) -> str:
    """``source`` less the lines from ``# part>`` to ``# <part``."""
    head, rest = source.split(f"# {part}>\n")
    return head.rstrip(" ") + rest.split(f"# <{part}\n", 1)[1]


def _names(nargs: int) -> str:
    return "".join(f"a{i}, " for i in range(nargs))


def _scratch_code(scratch, indent: int, gpu: bool) -> tuple[str, str]:
    pad = " " * indent
    make = "cuda.local.array({n}, float64)" if gpu else "np.empty({n})"
    alloc = "\n".join(f"{pad}s{i} = " + make.format(n=int(n)) for i, n in enumerate(scratch))
    return alloc, "".join(f", s{i}" for i in range(len(scratch)))


def _flattened(args) -> tuple[list, dict, tuple]:
    """Kernel arguments with every tuple argument replaced by its elements, the template
    fields ``params`` and ``unpack`` that rebuild it, and the tuple lengths (a kernel
    per combination)."""
    flat, params, unpack, lengths = [], [], [], []
    for i, a in enumerate(args):
        if isinstance(a, tuple):
            names = [f"a{i}_{j}" for j in range(len(a))]
            params += names
            unpack.append(f"    a{i} = ({', '.join(names)}{',' if names else ''})")
            flat += list(a)
            lengths.append(len(a))
        else:
            params.append(f"a{i}")
            flat.append(a)
            lengths.append(-1)
    fields = dict(params="".join(p + ", " for p in params), unpack="\n".join(unpack))
    return flat, fields, tuple(lengths)


def _indented(code: str, indent: int) -> str:
    return "\n".join(" " * indent + line for line in code.strip("\n").splitlines())


def _cpu_function(key, source, scope, **fields):
    """The CPU loop of ``source`` (generated) over the bodies ``scope``: a module file
    named by a hash of its text and of the bodies' code (:mod:`forestpy.kernel_files`),
    compiled with ``cache=True`` so that a later process loads it from disk."""
    loop = _CPU.get(key)
    if loop is not None:
        return loop
    text = source.format(**fields)
    bodies = {name: _njit(f) for name, f in scope.items() if f is not None}
    h = hashlib.sha256((text + numba.__version__ + np.__version__ + sys.version).encode())
    seen: set = set()
    for name in sorted(bodies):
        h.update(name.encode())
        function_fingerprint(bodies[name], h, seen)
    name = f"forestpy_loop_{h.hexdigest()[:20]}"
    try:
        path = cache_dir() / f"{name}.py"
        write_once(path, _loop_module(text, bodies, cache=True))
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="forestpy_loops_")) / f"{name}.py"
        write_once(path, _loop_module(text, bodies, cache=False))
    module = import_file(path, name)
    for body_name, body in bodies.items():  # before the first call compiles the loop
        setattr(module, body_name, body)
    loop = _CPU[key] = module.loop
    return loop


def _loop_module(text: str, bodies: dict, cache: bool) -> str:
    return ("# generated by forestpy.patches.launch: a CPU loop over pointwise bodies, "
            "which are set on import\n"
            "import numba\nimport numpy as np\n\n"
            + "".join(f"{name} = None\n" for name in sorted(bodies))
            + f"\n\n@numba.njit(parallel=True, cache={cache})" + text)


def _njit(func):
    if func is None or isinstance(func, CPUDispatcher):
        return func
    return numba.njit(func)


def _gpu_function(key, source, scope, lazy=None, **fields):
    """The kernel of ``source`` (generated from ``fields``, and ``lazy()``'s fields:
    made only when the kernel is) over the bodies ``scope``, compiled once per key."""
    kernel = _KERNELS.get(key)
    if kernel is None:
        from numba import cuda, float64, int32

        if lazy is not None:
            fields = {**fields, **lazy()}

        scope = {"cuda": cuda, "float64": float64, "int32": int32,
                 **{k: cuda_device(v) for k, v in scope.items() if v is not None}}
        exec(source.format(**fields), scope)
        kernel = _KERNELS[key] = fast_kernel(cuda.jit(scope["kernel"]))
    return kernel


def _no_rows(backend):
    per_backend = _CONSTANTS.setdefault(backend, {}) if backend is not None else {}
    rows = per_backend.get("no rows")
    if rows is None:
        rows = np.zeros(1, dtype=np.int64)
        if backend is not None:
            rows = per_backend["no rows"] = backend.to_device(rows)
    return rows


def _on_gpu(backend) -> bool:
    return backend is not None and backend.is_gpu


def for_each_entry(body, n: int, *args, backend=None, scratch=()) -> None:
    """Run ``body(*args, e, *scratch)`` for ``e < n``: a ``prange`` loop on the CPU
    (``backend`` None or a CPU backend), one CUDA thread per entry on a GPU backend.
    ``scratch``: sizes of float64 arrays made per thread (per chunk of entries on the
    CPU) and passed after ``e``; a body must not keep values in them between calls."""
    if n == 0:
        return
    scratch = tuple(int(s) for s in scratch) if scratch else ()
    if not _on_gpu(backend):
        fields = dict(pre=_names(len(args)), chunk=_CPU_CHUNK)
        alloc, names = _scratch_code(scratch, 8, gpu=False)
        loop = _cpu_function(("entries", body, len(args), scratch), _CPU_ENTRIES,
                             {"body": body}, cpu_alloc=alloc, scratch=names, **fields)
        loop(n, *args)
        return
    require_device(backend, *args)
    # a launch costs the host tens of microseconds: the generated source's pieces are
    # made only when the kernel is (the tuple lengths are its key)
    lengths = tuple(len(a) if isinstance(a, tuple) else -1 for a in args)

    def source_fields():
        alloc, names = _scratch_code(scratch, 8, gpu=True)
        return dict(pre=_names(len(args)), chunk=_CPU_CHUNK, gpu_alloc=alloc,
                    scratch=names, **_flattened(args)[1])

    kernel = _gpu_function(("entries", body, lengths, scratch), _GPU_ENTRIES,
                           {"body": body}, lazy=source_fields)
    flat = _flattened(args)[0] if -1 < max(lengths, default=-1) else args
    launch_kernel(kernel, blocks(n), THREADS, launch_stream(), n, *flat)


def for_each_cell(body, n: int, my: int, mx: int, mbc: int, *args, backend=None,
                  rows=None, scratch=()) -> None:
    """Run ``body(*args, k, j, i, mbc, *scratch)`` for every interior cell ``(j, i)``
    (from 0) of the ``my x mx`` cells of ``n`` patches: ``k`` runs over ``0..n-1``, or
    over ``rows[0..n-1]`` (a backend integer array) when ``rows`` is given.  A
    ``prange`` loop over the patches on the CPU, one CUDA thread per cell on the GPU;
    ``scratch`` as in :func:`for_each_entry` (made once per patch on the CPU)."""
    if n == 0:
        return
    scratch = tuple(int(s) for s in scratch)
    fields = dict(pre=_names(len(args)), k="rows[r]" if rows is not None else "r")
    key = ("cells", body, len(args), rows is not None, scratch)
    row_arg = rows if rows is not None else _no_rows(backend if _on_gpu(backend) else None)
    if not _on_gpu(backend):
        alloc, names = _scratch_code(scratch, 8, gpu=False)
        loop = _cpu_function(key, _CPU_CELLS, {"body": body}, cpu_alloc=alloc,
                             scratch=names, **fields)
        loop(n, my, mx, mbc, row_arg, *args)
        return
    require_device(backend, row_arg, *(a for a in args if hasattr(a, "shape")))
    alloc, names = _scratch_code(scratch, 8, gpu=True)
    flat, flat_fields, lengths = _flattened(args)
    kernel = _gpu_function(key + (lengths,), _GPU_CELLS, {"body": body}, gpu_alloc=alloc,
                           scratch=names, **fields, **flat_fields)
    launch_kernel(kernel, blocks(n * my * mx), THREADS, launch_stream(), n, my, mx, mbc,
                  row_arg, *flat)


def patch_threads(ncell: int) -> int:
    """Threads of a :func:`for_each_patch` block: the power of two covering the cells
    of a patch, at most :data:`THREADS`."""
    t = 1
    while t < min(ncell, THREADS):
        t *= 2
    return t


def for_each_patch(reduction: PatchReduction, n: int, my: int, mx: int, mbc: int, *args,
                   backend=None, rows=None, nall: int = 0, totals=None, partial=None,
                   scratch=()):
    """Run the :class:`PatchReduction` ``reduction`` over ``n`` patches (``rows`` as in
    :func:`for_each_cell`) in one launch; returns ``totals`` (a backend float64 array
    of ``nvals + ndomain + 1``, new unless given; written on the device, no host
    synchronisation).  ``partial``: the ``(n, nvals)`` backend array receiving every
    patch's ``vals`` (new when None).  ``nall``: the patches ``0..nall-1`` of the
    domain-wide pass.  The sums over a patch's cells, over the patches and over the
    domain are in one fixed order (the GPU block's: :func:`patch_threads` strided
    partial sums, then a pairwise tree), the CPU's loop included, so the results are
    reproducible and the two backends give the same bits."""
    xp = backend.xp if _on_gpu(backend) else np
    nvals = reduction.nvals
    nt = nvals + reduction.ndomain + 1
    if n == 0:  # no patch (a rank owning none): the sums are zero
        if totals is None:
            return xp.zeros(nt, dtype=np.float64)
        totals[...] = 0.0
        return totals
    if totals is None:  # every entry is written by the launch: no fill kernel
        totals = xp.empty(nt, dtype=np.float64)
    scratch = tuple(int(s) for s in scratch)
    na = max(reduction.nacc, nvals, reduction.ndomain, 1)
    T = patch_threads(my * mx)
    fields = dict(pre=_names(len(args)), k="rows[r]" if rows is not None else "r",
                  na=na, nv=max(nvals, 1), nacc=reduction.nacc, nvals=nvals, nt=nt,
                  ndomain=reduction.ndomain, T=T)
    scope = {name: getattr(reduction, name) for name in (
        "cell_reduce", "patch", "cell_apply", "domain_needed", "domain_reduce", "finish",
        "domain_apply")}
    cpu_source, gpu_source = _CPU_PATCHES, _GPU_PATCHES
    for part, present in (("apply", reduction.cell_apply is not None),
                          ("domain", reduction.domain_needed is not None),
                          ("finish", reduction.finish is not None),
                          ("domain_apply", reduction.domain_apply is not None)):
        if not present:
            cpu_source, gpu_source = _strip(cpu_source, part), _strip(gpu_source, part)
    key = ("patches", reduction, len(args), rows is not None, scratch, T)
    if partial is None:
        partial = xp.empty((n, max(nvals, 1)), dtype=np.float64)
    row_arg = rows if rows is not None else _no_rows(backend if _on_gpu(backend) else None)
    if not _on_gpu(backend):
        alloc, names = _scratch_code(scratch, 8, gpu=False)
        loop = _cpu_function(key, cpu_source, scope, cpu_alloc=alloc, scratch=names,
                             cpu_alloc_1=_scratch_code(scratch, 8, False)[0],
                             cpu_alloc_2=_scratch_code(scratch, 12, False)[0], **fields)
        loop(n, my, mx, mbc, row_arg, partial, totals, nall, *args)
        return totals
    require_device(backend, row_arg, totals, partial,
                   *(a for a in args if hasattr(a, "shape")))
    alloc, names = _scratch_code(scratch, 4, gpu=True)
    tree = {name: _indented(_TREE.format(m=m, T=T), indent)
            for name, m, indent in (("tree_acc", reduction.nacc, 4),
                                    ("tree_vals", nvals, 8),
                                    ("tree_domain", reduction.ndomain, 12))}
    flat, flat_fields, lengths = _flattened(args)
    kernel = _gpu_function(key + (lengths,), gpu_source, scope, gpu_alloc=alloc,
                           scratch=names, nbuf=na * T, **tree, **fields, **flat_fields)
    per_backend = _CONSTANTS.setdefault(backend, {})
    ticket = per_backend.get(("ticket", key))
    if ticket is None:  # zero between launches: the last block puts it back
        ticket = per_backend[("ticket", key)] = backend.to_device(np.zeros(1, np.int32))
    launch_kernel(kernel, n, T, launch_stream(), n, my, mx, mbc, row_arg, partial, totals,
                  ticket, nall, *flat)
    return totals
