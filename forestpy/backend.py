"""Backends: where field arrays live and how kernels run.

A backend is passed explicitly (never a global).  Numerics code asks it for the array
module ``xp`` and moves data only through :meth:`Backend.to_host` (counted, so tests can
assert that a time step moves no field data) and :meth:`Backend.to_device`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Backend", "CPUBackend", "get_backend"]


class Backend:
    """Base class: name, array module, counted transfers, synchronisation."""

    name = "abstract"
    xp = np

    def __init__(self):
        self.host_transfers = 0

    def to_host(self, a):
        """Return ``a`` as a NumPy array; every call is counted in ``host_transfers``."""
        self.host_transfers += 1
        return np.asarray(a)

    def to_device(self, a):
        return self.xp.asarray(a)

    def synchronize(self) -> None:
        """Wait for queued device work (a no-op on the CPU)."""

    def describe(self) -> dict:
        return {"backend": self.name}


class CPUBackend(Backend):
    """NumPy arrays, Numba kernels parallel over patches."""

    name = "cpu"
    xp = np

    def describe(self) -> dict:
        import os
        import platform

        import numba

        return {
            "backend": self.name,
            "device": platform.processor() or platform.machine(),
            "numba_threads": numba.config.NUMBA_NUM_THREADS,
            "cpu_count": os.cpu_count(),
        }


def get_backend(name: str | Backend = "cpu") -> Backend:
    """Return a new backend object for ``name`` (``"cpu"``; ``"gpu"`` comes with the GPU issue)."""
    if isinstance(name, Backend):
        return name
    if name == "cpu":
        return CPUBackend()
    if name == "gpu":
        raise NotImplementedError(
            "the GPU backend is not available yet (see the GPU-backend issue); "
            "use --backend cpu"
        )
    raise ValueError(f"unknown backend {name!r}; valid: 'cpu', 'gpu'")
