"""A :class:`~forestpy.Simulation` whose time steps are shared by MPI ranks.

A serial run is a distributed run on one rank: the one Simulation steps the patches of
its :class:`~forestpy.parallel.layout.Layout` and moves data through its
:class:`~forestpy.parallel.exchange.Exchange`.  Sharing it over MPI ranks is giving it
an :class:`~forestpy.parallel.exchange.MPIExchange`, and with it a partitioned layout:

Metadata replicated, step work distributed: every rank holds the whole forest; the
leaves are split into contiguous Morton ranges (:meth:`Forest.partition`) and each rank
steps only the patches it owns.  Each step receives, from their owners, the patches
that the owned ghost cells read (the "halo", one patch deep: every ghost source is an
interior cell) while the owned patches that need no remote data are stepped
(communication overlap, de la Asuncion et al. 2012); then the others are stepped; the
edge fluxes of remote fine patches that the owned time sync needs follow.  The Courant
number and the state checks are Allreduces.  A regrid gathers the flags, builds the
same forest and partition on every rank and moves to each new owner only the old
patches it needs (point to point), transferred into its new arrays.  Patch data is
local: each rank allocates ``q``, ``aux`` and the cell centres for its owned patches
and its halo only (owned rows first, then the halo: ``layout.l2g``/``layout.g2l``),
and the owned parts of the global plans are remapped to these rows; the ``src2`` hook
runs on the owned rows.  ``totals()`` is a gather of per-patch integrals summed with
``math.fsum`` on every rank: bitwise the serial totals.  Checkpoints and rank-0
callbacks gather the state to rank 0 only (Gatherv, ``Simulation.root_view``).  The
setup is distributed when the Simulation is built with ``comm=`` (or by
``distributed_setup(setup, **options)``, under ``build_distributed()``, the CLI under
mpirun): at every initial level each rank evaluates ``setaux``/``qinit`` on its owned
and halo patches only, tags its owned patches and the flags are gathered (bitwise the
serial build for pointwise ``qinit``/``setaux``); ``distribute(sim)`` of a serially
built Simulation starts from the whole initial state on every rank.  VTK frames and
gauges are written per rank (:mod:`forestpy.parallel.io`).  See docs/mpi.md.

Usage (same demo scripts, launched with ``mpirun -n 4 python script.py``)::

    from forestpy.parallel import distributed_setup
    sim = distributed_setup(setup, max_level=5)  # or Simulation(..., comm=comm)
    sim.run()                                    # distribute(setup(...)): serial build

This module, like the rest of :mod:`forestpy.parallel`, does not import the driver
(:mod:`forestpy.simulation`): the driver imports the layout and the exchange.
"""

from __future__ import annotations

import contextlib

from .exchange import BUILD_COMM, MPIExchange, world

__all__ = ["build_distributed", "distribute", "distributed_setup", "select_device"]


def select_device(comm=None) -> int:
    """Rank-local GPU selection: node-local rank modulo the visible GPUs (call it before
    any other CUDA call).  Returns the device index chosen."""
    from mpi4py import MPI
    from numba import cuda

    comm = comm or world()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    ngpu = len(cuda.gpus)
    if ngpu == 0:
        raise RuntimeError("select_device: no GPU visible to this rank")
    dev = local.rank % ngpu
    cuda.select_device(dev)
    try:
        import cupy

        cupy.cuda.Device(dev).use()
    except ImportError:
        pass
    local.Free()
    return dev


def distribute(sim, comm=None, overlap: bool | None = None):
    """Share a freshly built Simulation (identical on every rank: same setup, same
    initial refinement) over the ranks of ``comm`` (default COMM_WORLD), in place;
    returns it.  This keeps demo scripts unchanged: ``distribute(setup(**options)).run()``.
    ``overlap``: communication overlap in the step (default: on the GPU backend only).
    The callbacks are wrapped for a distributed run (:func:`_wrap_callback`)."""
    if not callable(getattr(sim, "use_exchange", None)):
        raise TypeError(f"distribute: expected a Simulation, got {type(sim).__name__}")
    if sim.exchange.distributed:  # built distributed: the layout is there already
        sim.overlap = sim.backend.is_gpu if overlap is None else bool(overlap)
    else:
        sim.use_exchange(MPIExchange(comm, sim.backend), overlap)
    sim.callbacks = [_wrap_callback(cb) for cb in sim.callbacks]
    return sim


def distributed_setup(setup, *args, comm=None, overlap=None, **overrides):
    """``distribute(setup(*args, **overrides))`` with a distributed initial build:
    every :class:`~forestpy.Simulation` that ``setup`` constructs does its initial
    refinement over the ranks (``qinit``/``setaux`` on each rank's owned and halo
    patches only), so no rank holds the whole initial state.  Bitwise the serial
    initial state for pointwise ``qinit``/``setaux``.  Subclasses of Simulation are
    built serially, then distributed."""
    with build_distributed(comm):
        sim = setup(*args, **overrides)
    return distribute(sim, comm, overlap)


@contextlib.contextmanager
def build_distributed(comm=None):
    """Context: every :class:`~forestpy.Simulation` (exactly that class) constructed
    inside it is distributed over ``comm`` (default COMM_WORLD) from its initial
    refinement on; pass it to :func:`distribute` afterwards (which wraps the
    callbacks).  The CLI builds this way under ``mpirun``."""
    token = BUILD_COMM.set(comm if comm is not None else world())
    try:
        yield
    finally:
        BUILD_COMM.reset(token)


def _wrap_callback(cb):
    """VTK frames: written per rank (a :class:`~forestpy.parallel.io.ParallelVTKOutput`
    made from ``cb``); gauges: sampled where they lie, rank 0 writes (a
    ``ParallelGauges``); callbacks marked ``collective``: called on every rank as they
    are; the others run on rank 0 on the gathered state (:class:`_RankZeroCallback`)."""
    from forestpy.callbacks import Gauges
    from forestpy.io.vtk import VTKOutput

    from .io import ParallelGauges, ParallelVTKOutput

    if type(cb) is VTKOutput and cb.kind == "amr":
        cb = ParallelVTKOutput.of(cb)
    elif type(cb) is Gauges:
        cb = ParallelGauges.of(cb)
    if isinstance(cb, _RankZeroCallback) or getattr(cb, "collective", False):
        return cb
    return _RankZeroCallback(cb)


class _RankZeroCallback:
    """A callback run on rank 0 only, on a view of the simulation holding the state
    gathered to rank 0 (``Simulation.root_view``: the other ranks allocate nothing
    global); ``next_time`` (the output times the steps must land on) is asked on every
    rank so that all take the same steps."""

    _HOOKS = ("on_start", "on_step", "on_end")

    def __init__(self, cb):
        self._cb = cb

    def __getattr__(self, name):
        attr = getattr(self._cb, name)
        if name not in self._HOOKS:
            return attr

        def hook(sim):
            with sim.root_view(0) as root:
                if root is not None:
                    attr(root)

        return hook
