"""The forest distributed over MPI ranks (mpi4py): see :mod:`forestpy.parallel.distributed`,
:mod:`forestpy.parallel.io` and docs/mpi.md."""

from .distributed import DistributedSimulation, distribute, select_device
from .io import ParallelGauges, ParallelVTKOutput, write_frame_distributed

__all__ = ["DistributedSimulation", "ParallelGauges", "ParallelVTKOutput", "distribute",
           "select_device", "write_frame_distributed"]
