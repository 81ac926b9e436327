"""The forest distributed over MPI ranks (mpi4py): see :mod:`forestpy.parallel.distributed`
and docs/mpi.md."""

from .distributed import DistributedSimulation, distribute, select_device

__all__ = ["DistributedSimulation", "distribute", "select_device"]
