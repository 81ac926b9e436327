"""The forest distributed over MPI ranks (mpi4py): see :mod:`forestpy.parallel.distributed`,
:mod:`forestpy.parallel.io` and docs/mpi.md."""

from .distributed import (
    DistributedSimulation,
    build_distributed,
    distribute,
    distributed_setup,
    select_device,
)
from .io import ParallelGauges, ParallelVTKOutput, write_frame_distributed

__all__ = ["DistributedSimulation", "ParallelGauges", "ParallelVTKOutput", "build_distributed",
           "distribute", "distributed_setup", "select_device", "write_frame_distributed"]
