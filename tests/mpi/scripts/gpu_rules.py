"""Scenarios of issue 36's GPU crash, run by ``run_demo.py`` (mode ``call``) under
mpirun with the GPU backend in Numba's CUDA simulator and CuPy's rules
(:mod:`cupy_rules`): ``mpirun -n 2 forestpy run demos/geoclaw/okushiri.py --backend
gpu`` stopped on both ranks with ``AttributeError: 'bool' object has no attribute
'astype'``, a failure the simulator's NumPy hides.

:func:`positivity` calls GeoClaw's source hook (the positivity fix alone) on patches of
4 x 4 cells split over the ranks, one of them lacking more water than it holds: the
deficit is taken from every rank's patches after a reduction over the ranks, the path
that crashed (the reduced volume, a host float, compared inside ``cupy.where``).  The
last rank owns no patch (empty arrays, but it calls the hook: the collectives match),
or with ``"dry": true`` one dry patch.
"""

from types import SimpleNamespace

import numpy as np

MX, MBC = 4, 2


def patches():
    """``(h, hu, hv, dx)`` of 4 patches; patch 0 lacks far more water than it holds,
    patch 3 is dry (depth and momenta 0)."""
    rng = np.random.default_rng(7)
    h = rng.uniform(0.5, 1.0, (4, MX, MX))
    h[0] = 0.01
    h[0, 1, 1] = -1.0
    h[3] = 0.0
    hu, hv = rng.normal(size=h.shape), rng.normal(size=h.shape)
    hu[3] = hv[3] = 0.0
    return h, hu, hv, np.array([1.0, 2.0, 2.0, 1.0])


def split(nranks, dry):
    """The patches of each rank: 0 -> [0], 1 -> [1, 2], 2 -> the dry patch 3 (``dry``)
    or none, the others none."""
    last = slice(3, 4) if dry else slice(4, 4)
    return [slice(0, 1), slice(1, 3), last] + [slice(4, 4)] * (nranks - 3)


def positivity_fix(parts, backend, comm=None):
    """The hook on the patches ``parts`` of :func:`patches` (host results: h, hu, hv
    interiors, and the volume moved over all ranks)."""
    from forestpy.extensions.geoclaw.sources import GeoClawSources

    from forestpy.hooks import HookContext, HookGeometry

    h, hu, hv, dx = (a[parts] for a in patches())
    n = len(h)
    geom = SimpleNamespace(mx=MX, my=MX, mbc=MBC, npatch=n, dx=dx, dy=dx,
                           xlower=np.zeros(n), ylower=np.zeros(n),
                           level=np.zeros(n, dtype=np.int64))
    size = MX + 2 * MBC
    q = np.zeros((n, 3, size, size))
    for m, a in enumerate((h, hu, hv)):
        q[:, m, MBC:-MBC, MBC:-MBC] = a
    q = backend.to_device(q)
    aux = backend.to_device(np.zeros((n, 1, size, size)))
    src = GeoClawSources(dry_tolerance=0.0)
    src.apply(q, aux, HookContext(HookGeometry(geom, backend), 0.0, 0.1, comm=comm))
    moved = GeoClawSources._moved_sum(src._pending[2])
    return backend.to_host(q)[:, :, MBC:-MBC, MBC:-MBC], float(moved)


def positivity(out, opts):
    """Every rank: the fix on its patches (GPU backend, CuPy's rules); rank 0 also runs
    it serially on all of them and writes ``result.npz`` (the ranks' interiors in rank
    order, the serial ones, the volumes moved)."""
    import cupy_rules
    from mpi4py import MPI

    cupy_rules.install()
    from forestpy.backend import GPUBackend

    comm = MPI.COMM_WORLD
    be = GPUBackend()
    dry = bool(opts.get("dry", False))
    parts = split(comm.size, dry)[comm.rank]
    mine, moved = positivity_fix(parts, be, comm)
    every = comm.gather((mine, moved), root=0)
    if comm.rank == 0:
        serial, serial_moved = positivity_fix(slice(0, 4 if dry else 3), be)
        np.savez(out / "result.npz", q=np.concatenate([m for m, _ in every]),
                 moved=np.array([v for _, v in every]), serial=serial,
                 serial_moved=serial_moved, owned=np.array([len(m) for m, _ in every]),
                 rules=be.xp is cupy_rules.RULES, simulator=be.simulator)
