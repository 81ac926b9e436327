"""The forest distributed over MPI ranks (mpi4py): a serial run is a distributed run on
one rank.  :mod:`forestpy.parallel.layout` (which patches a rank owns),
:mod:`forestpy.parallel.exchange` (what the ranks exchange), used by the one
:class:`~forestpy.Simulation`; :mod:`forestpy.parallel.distributed` (sharing a
simulation over ranks), :mod:`forestpy.parallel.io` and docs/mpi.md.  Nothing here
imports the driver (:mod:`forestpy.simulation`)."""

from .distributed import build_distributed, distribute, distributed_setup, select_device
from .exchange import Exchange, MPIExchange
from .io import ParallelGauges, ParallelVTKOutput, write_frame_distributed
from .layout import Layout

__all__ = ["Exchange", "Layout", "MPIExchange", "ParallelGauges", "ParallelVTKOutput",
           "build_distributed", "distribute", "distributed_setup", "select_device",
           "write_frame_distributed"]
